package gpuvizprocessor

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// serverGauge appends to md one server's resource with a gauge name of
// points (engine label: value), all at ts.
func serverGauge(md pmetric.Metrics, name, service, instance, gpu string, ts time.Time, gauge bool, points ...float64) {
	rm := md.ResourceMetrics().AppendEmpty()
	res := rm.Resource().Attributes()
	res.PutStr("service.name", service)
	res.PutStr("service.instance.id", instance)
	if gpu != "" {
		res.PutStr("gpu.uuid", gpu)
	}
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName(name)
	dps := m.SetEmptySum().DataPoints()
	if gauge {
		dps = m.SetEmptyGauge().DataPoints()
	}
	for i, v := range points {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		dp.SetDoubleValue(v)
		dp.Attributes().PutStr("engine", string(rune('0'+i)))
	}
}

func TestEngineCountsReadTheServersRunningGauges(t *testing.T) {
	ts := time.Unix(1000, 0)
	md := pmetric.NewMetrics()
	serverGauge(md, "vllm:num_requests_running", "vllm", "a:8000", "", ts, true, 3, 4) // data-parallel engines: summed
	serverGauge(md, "sglang_num_running_reqs", "sglang", "b:30000", "", ts, true, 2)   // a Prometheus translation's name
	serverGauge(md, "vllm:num_requests_waiting", "vllm", "c:8000", "", ts, true, 9)    // not a running count
	serverGauge(md, "vllm:num_requests_running", "vllm", "d:8000", "", ts, false, 9)   // not a gauge
	serverGauge(md, "vllm:num_requests_running", "vllm", "e:8000", "", ts, true, math.NaN(), -1)
	got := engineCounts(md, nil)
	require.Len(t, got, 2)
	assert.Equal(t, "vllm\x00a:8000", got[0].source)
	assert.Equal(t, 7.0, got[0].n)
	assert.Equal(t, ts.UnixNano(), got[0].ts)
	assert.Equal(t, "sglang\x00b:30000", got[1].source)
	assert.Equal(t, 2.0, got[1].n)
}

// A server's count reaches the books of the GPUs its resource matches, as
// a span of that resource would be matched, once those GPUs are one group;
// the servers of one GPU set are summed, and a silent one drops out.
func TestEngineCountsReachTheirGPUsBooks(t *testing.T) {
	c, now, _ := virtualCore(t, nil)
	t0 := time.Unix(1_700_000_000, 0)
	*now = t0
	for i, id := range []string{"GPU-0", "GPU-1"} {
		c.processMetrics(context.Background(), gpuMetrics("node-a", id, int64(i), t0, time.Second, []sample{{powerW: 100}, {powerW: 100}}))
	}
	scrape := func(at time.Time, instance, gpu string, n float64) {
		md := pmetric.NewMetrics()
		serverGauge(md, "vllm:num_requests_running", "vllm", instance, gpu, at, true, n)
		c.processMetrics(context.Background(), md)
	}
	k0 := timeline.Key{Host: "node-a", GPU: "GPU-0"}
	c.mu.Lock()
	set := c.pipeline.set([]timeline.Key{k0})
	c.mu.Unlock()

	scrape(t0, "a:8000", "GPU-0", 3)
	c.mu.Lock()
	assert.Equal(t, engineSources{"vllm\x00a:8000": {ts: t0.UnixNano(), n: 3}}, c.pipeline.engines[set.name], "matched by its gpu.uuid")
	assert.False(t, c.pipeline.running(set, "vllm\x00a:8000", t0.Add(time.Second).UnixNano(), 3), "no books for the GPU yet")
	c.pipeline.groupsOf(set)
	assert.True(t, c.pipeline.running(set, "vllm\x00b:8000", t0.Add(2*time.Second).UnixNano(), 2), "the set's books are one group")
	c.mu.Unlock()

	late := t0.Add(2*time.Second + time.Duration(61e9))
	scrape(late, "b:8000", "GPU-0", 1)
	c.mu.Lock()
	assert.Equal(t, engineSources{"vllm\x00b:8000": {ts: late.UnixNano(), n: 1}}, c.pipeline.engines[set.name], "a: silent past EngineGap")
	c.mu.Unlock()
}
