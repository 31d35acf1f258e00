package gpuvizprocessor

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadatatest"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// serverGauge appends to md one server's resource with a gauge name of
// points (engine label: value), all at ts, and returns the points.
// A server on host, named with its GPU's uuid where gpu is set.
func serverGauge(md pmetric.Metrics, name, service, instance, host, gpu string, ts time.Time, gauge bool, points ...float64) pmetric.NumberDataPointSlice {
	rm := md.ResourceMetrics().AppendEmpty()
	res := rm.Resource().Attributes()
	res.PutStr("service.name", service)
	res.PutStr("service.instance.id", instance)
	if host != "" {
		res.PutStr("host.name", host)
	}
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
	return dps
}

func TestEngineCountsReadTheServersRunningGauges(t *testing.T) {
	ts := time.Unix(1000, 0)
	md := pmetric.NewMetrics()
	serverGauge(md, "vllm:num_requests_running", "vllm", "a:8000", "", "", ts, true, 3, 4) // data-parallel engines: summed
	serverGauge(md, "sglang_num_running_reqs", "sglang", "b:30000", "", "", ts, true, 2)   // a Prometheus translation's name
	serverGauge(md, "tgi_batch_current_size", "tgi", "f:80", "", "", ts, true, 5)
	serverGauge(md, "trtllm_num_requests_running", "trtllm", "h:8000", "", "", ts, true, 8)
	triton := serverGauge(md, "nv_trt_llm_request_metrics", "triton", "g:8002", "", "", ts, true, 6, 512, 2)
	for i, kind := range []string{"scheduled", "max", "context"} { // only the scheduled requests run
		triton.At(i).Attributes().PutStr("request_type", kind)
	}
	serverGauge(md, "vllm:num_requests_waiting", "vllm", "c:8000", "", "", ts, true, 9)  // not a running count
	serverGauge(md, "vllm:num_requests_running", "vllm", "d:8000", "", "", ts, false, 9) // not a gauge
	serverGauge(md, "vllm:num_requests_running", "vllm", "e:8000", "", "", ts, true, math.NaN(), -1, math.Inf(1))
	got := engineCounts(md, nil)
	require.Len(t, got, 5)
	assert.Equal(t, "vllm\x00a:8000", got[0].source)
	assert.Equal(t, 7.0, got[0].n)
	assert.Equal(t, ts.UnixNano(), got[0].ts)
	assert.Equal(t, "sglang\x00b:30000", got[1].source)
	assert.Equal(t, 2.0, got[1].n)
	assert.Equal(t, "tgi\x00f:80", got[2].source)
	assert.Equal(t, 5.0, got[2].n)
	assert.Equal(t, "trtllm\x00h:8000", got[3].source)
	assert.Equal(t, 8.0, got[3].n)
	assert.Equal(t, "triton\x00g:8002", got[4].source)
	assert.Equal(t, 6.0, got[4].n)
}

// A server's count reaches the books of the GPUs its resource matches, as
// a span of that resource would be matched, once those GPUs are one group;
// the servers of one GPU set are summed, a silent one drops out, and what
// became of each count is counted.
func TestEngineCountsReachTheirGPUsBooks(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	t0 := time.Unix(1_700_000_000, 0)
	*now = t0
	for i, host := range []string{"node-a", "node-b"} {
		c.processMetrics(context.Background(), gpuMetrics(host, fmt.Sprintf("GPU-%d", i), 0, t0, time.Second, []sample{{powerW: 100}, {powerW: 100}}))
	}
	scrape := func(at time.Time, instance, host, gpu string, n float64) {
		md := pmetric.NewMetrics()
		serverGauge(md, "vllm:num_requests_running", "vllm", instance, host, gpu, at, true, n)
		c.processMetrics(context.Background(), md)
	}
	k0 := timeline.Key{Host: "node-a", GPU: "GPU-0"}
	c.spans.mu.Lock()
	set := c.spans.pipeline.set([]timeline.Key{k0})
	c.spans.mu.Unlock()

	scrape(t0, "a:8000", "node-a", "GPU-0", 3)
	scrape(t0, "z:8000", "node-z", "GPU-9", 3)
	md := pmetric.NewMetrics() // an unmatched server gone stale: no count, none unmatched
	serverGauge(md, "vllm:num_requests_running", "vllm", "z:8000", "node-z", "GPU-9", t0.Add(time.Second), true, 0).At(0).SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
	c.processMetrics(context.Background(), md)
	c.spans.mu.Lock()
	assert.Equal(t, engineSources{"vllm\x00a:8000": {ts: t0.UnixNano(), n: 3}}, c.spans.pipeline.engines[set.name], "matched by its gpu.uuid")
	c.spans.pipeline.groupsOf(set)
	assert.Equal(t, countBooked, c.spans.pipeline.running(set, "vllm\x00b:8000", t0.Add(2*time.Second).UnixNano(), 2), "the set's books are one group")
	assert.Equal(t, countDropped, c.spans.pipeline.running(set, "vllm\x00b:8000", t0.Add(time.Second).UnixNano(), 2), "older than the newest held")
	assert.Equal(t, countDropped, c.spans.pipeline.running(set, "vllm\x00c:8000", t0.Add(time.Second).UnixNano(), 2), "another server's, older than the set's newest")
	c.spans.mu.Unlock()

	late := t0.Add(2*time.Second + time.Duration(61e9))
	*now = late
	scrape(late, "b:8000", "node-a", "GPU-0", 1)
	c.spans.mu.Lock()
	assert.Equal(t, engineSources{"vllm\x00b:8000": {ts: late.UnixNano(), n: 1}}, c.spans.pipeline.engines[set.name], "a: silent past EngineGap")
	c.spans.mu.Unlock()
	metadatatest.AssertEqualProcessorGpuvizEngineCounts(t, tel, []metricdata.DataPoint[int64]{
		{Attributes: attribute.NewSet(attribute.String("outcome", countNoBooks)), Value: 1},
		{Attributes: attribute.NewSet(attribute.String("outcome", countUnmatched)), Value: 1},
		{Attributes: attribute.NewSet(attribute.String("outcome", countBooked)), Value: 1},
	}, metricdatatest.IgnoreTimestamp())
}

func TestEngineTallySumsEachSetsServers(t *testing.T) {
	const gap = attribution.EngineGap
	tests := []struct {
		name    string
		counts  []tallyCount
		wantSum float64
		wantOK  bool
	}{
		{"one server", []tallyCount{{"s", "a", 0, 3}}, 3, true},
		{"servers of one set add up", []tallyCount{{"s", "a", 0, 3}, {"s", "b", 1, 2}}, 5, true},
		{"a server's newer count replaces its older", []tallyCount{{"s", "a", 0, 3}, {"s", "a", 1, 1}}, 1, true},
		{"an older count than the server's last is dropped", []tallyCount{{"s", "a", 5, 3}, {"s", "a", 4, 1}}, 0, false},
		{"other sets are not summed", []tallyCount{{"t", "a", 0, 3}, {"s", "b", 0, 2}}, 2, true},
		{"a server silent past EngineGap is not counted", []tallyCount{{"s", "a", 0, 3}, {"s", "b", gap + 1, 2}}, 2, true},
		{"a server silent for EngineGap still is", []tallyCount{{"s", "a", 0, 3}, {"s", "b", gap, 2}}, 5, true},
		{"a server past maxEngineSources is dropped", append(servers("s", maxEngineSources), tallyCount{"s", "new", 0, 1}), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tally := engineTally{}
			var (
				sum float64
				ok  bool
			)
			for _, c := range tt.counts {
				sum, ok = tally.count(c.set, c.source, c.ts, c.n)
			}
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.wantSum, sum)
		})
	}
}

// tallyCount is one server's count for a set.
type tallyCount struct {
	set, source string
	ts          int64
	n           float64
}

// servers returns one count of 1 at 0 from each of n servers of set.
func servers(set string, n int) []tallyCount {
	out := make([]tallyCount, n)
	for i := range out {
		out[i].set, out[i].source, out[i].n = set, fmt.Sprint(i), 1
	}
	return out
}

func TestEngineTallyForgetsSetsWhoseServersAllWentSilent(t *testing.T) {
	tally := engineTally{}
	tally.count("old", "a", 0, 1)
	tally.count("mixed", "a", 0, 1)
	tally.count("mixed", "b", attribution.EngineGap+1, 1)
	tally.count("new", "c", attribution.EngineGap+1, 1)
	tally.count("edge", "d", 1, 1) // silent for EngineGap exactly: still counted
	tally.forget()
	assert.ElementsMatch(t, []string{"mixed", "new", "edge"}, slices.Collect(maps.Keys(tally)))
}

// BenchmarkEngineCounts measures what reading the inference servers'
// running counts costs the metrics path: per op, one scrape of the 8 vLLM
// servers of a host of 8 GPUs, each matched by host and booked.
func BenchmarkEngineCounts(b *testing.B) {
	c, now, _ := virtualCoreWith(b, processortest.NewNopSettings(metadata.Type), func(cfg *Config) { cfg.Metrics.Enabled = false })
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	*now = t0
	var keys []timeline.Key
	for g := range 8 {
		id := fmt.Sprintf("GPU-%d", g)
		c.processMetrics(ctx, gpuMetrics("node-a", id, int64(g), t0, time.Second, []sample{{powerW: 100}, {powerW: 100}}))
		keys = append(keys, timeline.Key{Host: "node-a", GPU: id})
	}
	c.spans.mu.Lock()
	set := c.spans.pipeline.set(keys)
	c.spans.pipeline.groupsOf(set)
	c.spans.mu.Unlock()
	md := pmetric.NewMetrics()
	for s := range 8 {
		serverGauge(md, "vllm:num_requests_running", "vllm", fmt.Sprintf("10.0.0.%d:8000", s), "node-a", "", t0, true, 3)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// Each pass is the next scrape, 15 s on.
		ts := pcommon.NewTimestampFromTime(t0.Add(time.Duration(i+1) * 15 * time.Second))
		forEachNumberPoint(md, func(dp pmetric.NumberDataPoint) { dp.SetTimestamp(ts) })
		if _, err := c.processMetrics(ctx, md); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.spans.mu.Lock()
	defer c.spans.mu.Unlock()
	if n := len(c.spans.pipeline.engines[set.name]); n != 8 {
		b.Fatalf("%d servers booked on the host's GPUs, want 8", n)
	}
}

// SGLang with priority scheduling (--enable-priority-scheduling) sets
// sglang:num_running_reqs twice per scheduler: its total under
// priority="" and a breakdown under priority="<int>", one per priority
// seen (sgl-project/sglang, python/sglang/srt/observability/
// metrics_collector.py, SchedulerMetricsCollector.init_new and
// _log_gauge_queue_count). Prometheus drops an empty label, so through
// the prometheus receiver the total is the point with no priority; the
// breakdown is not more requests.
func TestEngineCountsReadSGLangsTotalNotItsPriorityBreakdown(t *testing.T) {
	ts := time.Unix(1000, 0)
	md := pmetric.NewMetrics()
	dps := serverGauge(md, "sglang:num_running_reqs", "sglang", "b:30000", "", "", ts, true, 5, 3, 2, 0)
	for i := range dps.Len() {
		dps.At(i).Attributes().Clear()
		for k, v := range map[string]string{"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"} {
			dps.At(i).Attributes().PutStr(k, v)
		}
	}
	for i, p := range []string{"0", "1", "2"} {
		dps.At(i+1).Attributes().PutStr("priority", p)
	}
	got := engineCounts(md, nil)
	require.Len(t, got, 1)
	assert.Equal(t, 5.0, got[0].n, "the total, not the total and its breakdown")

	// A total exported as priority="" (an exposition read by something
	// that keeps empty labels) is still the total.
	dps.At(0).Attributes().PutStr("priority", "")
	got = engineCounts(md, nil)
	require.Len(t, got, 1)
	assert.Equal(t, 5.0, got[0].n)
}

// A server that dies, or whose scrape fails, is marked stale: the
// prometheus receiver passes the Prometheus staleness marker of each of
// its series on as a point flagged NoRecordedValue at that scrape's
// instant (opentelemetry-collector-contrib, receiver/prometheusreceiver/
// internal/transaction.go, addGaugeDataPoint: value.IsStaleNaN). From
// then on it runs nothing the others' sum should hold: a PromQL sum over
// the servers leaves a stale series out.
// A count stamped far ahead of the processor's clock (a server's clock
// skewed, or a bad point) is not taken, and counted: taken, it would keep
// every later count of its server out as older for as long. A staleness
// marker stamped ahead does not take the server out either. The metrics
// pass through untouched.
func TestEngineCountsStampedFarAheadAreNotTaken(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	t0 := time.Unix(1_700_000_000, 0)
	*now = t0
	c.processMetrics(context.Background(), gpuMetrics("node-a", "GPU-0", 0, t0, time.Second, []sample{{powerW: 100}, {powerW: 100}}))
	c.spans.mu.Lock()
	set := c.spans.pipeline.set([]timeline.Key{{Host: "node-a", GPU: "GPU-0"}})
	c.spans.mu.Unlock()
	held := func() engineSources {
		c.spans.mu.Lock()
		defer c.spans.mu.Unlock()
		return maps.Clone(c.spans.pipeline.engines[set.name])
	}
	scrape := func(at time.Time, n float64, stale bool) {
		md := pmetric.NewMetrics()
		dps := serverGauge(md, "vllm:num_requests_running", "vllm", "a:8000", "node-a", "", at, true, n)
		if stale {
			dps.At(0).SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
		}
		want := pmetric.NewMetrics()
		md.CopyTo(want)
		out, err := c.processMetrics(context.Background(), md)
		require.NoError(t, err)
		assert.Equal(t, want, out, "passed through untouched")
	}

	scrape(t0.Add(time.Hour), 40, false)
	assert.Empty(t, held(), "an hour ahead: not taken")
	metadatatest.AssertEqualProcessorGpuvizEngineCounts(t, tel, []metricdata.DataPoint[int64]{
		{Attributes: attribute.NewSet(attribute.String("outcome", countFuture)), Value: 1},
	}, metricdatatest.IgnoreTimestamp())
	for i := 1; i <= 3; i++ {
		*now = t0.Add(time.Duration(i) * time.Second)
		scrape(*now, float64(i), false)
		assert.Equal(t, engineSources{"vllm\x00a:8000": {ts: now.UnixNano(), n: float64(i)}}, held(), "the server's counts after it are taken")
	}
	scrape(now.Add(time.Hour), 0, true)
	assert.Equal(t, engineSources{"vllm\x00a:8000": {ts: now.UnixNano(), n: 3}}, held(), "a staleness marker an hour ahead leaves the count")
	scrape(now.Add(time.Minute+time.Nanosecond), 5, false)
	assert.Equal(t, engineSources{"vllm\x00a:8000": {ts: now.UnixNano(), n: 3}}, held(), "a nanosecond past the minute: not taken")
	scrape(now.Add(time.Minute), 4, false)
	assert.Equal(t, engineSources{"vllm\x00a:8000": {ts: now.Add(time.Minute).UnixNano(), n: 4}}, held(), "a minute ahead is taken")
	metadatatest.AssertEqualProcessorGpuvizEngineCounts(t, tel, []metricdata.DataPoint[int64]{
		{Attributes: attribute.NewSet(attribute.String("outcome", countFuture)), Value: 2},
		{Attributes: attribute.NewSet(attribute.String("outcome", countNoBooks)), Value: 4},
	}, metricdatatest.IgnoreTimestamp())
}

func TestEngineCountsStaleServerLeavesItsSetsSum(t *testing.T) {
	c, now, _ := virtualCoreWith(t, processortest.NewNopSettings(metadata.Type), nil)
	t0 := time.Unix(1_700_000_000, 0)
	*now = t0
	c.processMetrics(context.Background(), gpuMetrics("node-a", "GPU-0", 0, t0, time.Second, []sample{{powerW: 100}, {powerW: 100}}))
	c.spans.mu.Lock()
	set := c.spans.pipeline.set([]timeline.Key{{Host: "node-a", GPU: "GPU-0"}})
	c.spans.mu.Unlock()

	md := pmetric.NewMetrics()
	serverGauge(md, "vllm:num_requests_running", "vllm", "a:8000", "node-a", "", t0, true, 5)
	serverGauge(md, "vllm:num_requests_running", "vllm", "b:8000", "node-a", "", t0, true, 2)
	c.processMetrics(context.Background(), md)

	t1 := t0.Add(15 * time.Second)
	md = pmetric.NewMetrics()
	stale := serverGauge(md, "vllm:num_requests_running", "vllm", "a:8000", "node-a", "", t1, true, math.Float64frombits(0x7ff0000000000002))
	stale.At(0).SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
	serverGauge(md, "vllm:num_requests_running", "vllm", "b:8000", "node-a", "", t1, true, 2)
	c.processMetrics(context.Background(), md)

	c.spans.mu.Lock()
	defer c.spans.mu.Unlock()
	assert.Equal(t, engineSources{"vllm\x00b:8000": {ts: t1.UnixNano(), n: 2}}, c.spans.pipeline.engines[set.name], "a: stale at t1")
	sum, ok := c.spans.pipeline.engines.count(set.name, "vllm\x00b:8000", t1.Add(time.Second).UnixNano(), 2)
	assert.True(t, ok)
	assert.Equal(t, 2.0, sum)

	// A staleness marker older than the server's last count (delivered
	// late) leaves that count in the sum.
	c.spans.pipeline.engines.stale(set.name, "vllm\x00b:8000", t1.UnixNano())
	sum, ok = c.spans.pipeline.engines.count(set.name, "vllm\x00c:8000", t1.Add(time.Second).UnixNano(), 1)
	assert.True(t, ok)
	assert.Equal(t, 3.0, sum, "b's 2 and c's 1")

	// One engine of a server stale, the other not: the server's count is
	// the live one's.
	md = pmetric.NewMetrics()
	dps := serverGauge(md, "vllm:num_requests_running", "vllm", "a:8000", "node-a", "", t1, true, math.Float64frombits(0x7ff0000000000002), 3)
	dps.At(0).SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
	got := engineCounts(md, nil)
	require.Len(t, got, 1)
	assert.False(t, got[0].stale)
	assert.Equal(t, 3.0, got[0].n)
}
