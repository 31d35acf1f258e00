package gpuvizprocessor

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gpuviz/gpuviz/internal/view"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadatatest"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// oneGauge is a batch of one point of the gauge name for GPU id of host.
func oneGauge(host, id, name string, ts time.Time, v float64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", host)
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName(name)
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
	dp.SetDoubleValue(v)
	dp.Attributes().PutStr("hw.id", id)
	return md
}

// refusedPoints is processor_gpuviz_gpu_points_refused by reason.
func refusedPoints(t *testing.T, tel *componenttest.Telemetry) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := tel.GetMetric("otelcol_processor_gpuviz_gpu_points_refused")
	if err != nil {
		return out
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		r, _ := dp.Attributes.Value("reason")
		out[r.AsString()] += dp.Value
	}
	return out
}

// A host whose clock runs ahead of the processor's by more than a span may
// (a minute) has its points refused as future, counted, and changes
// nothing for the other hosts' GPUs: their books share one window of bins,
// which a point far ahead would drag past them.
func TestPointsFromAClockAheadAreRefused(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	run := func(t *testing.T, skew time.Duration) (map[string]any, map[string]int64) {
		tel := componenttest.NewTelemetry()
		t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
		c, now, sink := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
		*now = base.Add(121 * time.Second)
		c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 121)))
		if skew > 0 {
			c.ingest.consume(context.Background(), gpuMetrics("node-2", "GPU-b", 0, base.Add(skew), time.Second, repeat(busy, 121)))
			c.ingest.consume(context.Background(), oneGauge("node-2", "GPU-b", "hw.power", base.Add(100*365*24*time.Hour), 300))
		}
		td := ptrace.NewTraces()
		vllmSpan(td, 1, base.Add(60*time.Second), 1, 1, 8, 200)
		td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 40 {
			*now = base.Add(121*time.Second + time.Duration(step)*time.Second)
			c.tick(*now)
		}
		got := spanAttrs(t, sink, "llm_request")
		require.Len(t, got, 1)
		return got[0], refusedPoints(t, tel)
	}
	alone, _ := run(t, 0)
	require.Contains(t, alone, "gpuviz.energy")
	skewed, refused := run(t, 6*time.Minute)
	assert.Equal(t, alone["gpuviz.energy"], skewed["gpuviz.energy"], "node-1's span as if node-2 were not there")
	// node-2's readings of each of its 121 s, sent when the clock read
	// 121 s, and the one a century ahead.
	assert.Greater(t, refused["future"], int64(121))
}

// Every signal reads at or above 0: a negative reading, or a point with
// no value at all, is refused as bad_value, not learned as a reading.
func TestNegativeAndEmptyPointsAreRefused(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	*now = base.Add(time.Minute)
	k := timeline.Key{Host: "node-1", GPU: "GPU-a"}
	c.ingest.consume(context.Background(), oneGauge(k.Host, k.GPU, "hw.power", base, -450))
	empty := oneGauge(k.Host, k.GPU, "hw.power", base.Add(time.Second), 0)
	dp := empty.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0)
	bare := pmetric.NewNumberDataPoint()
	dp.Attributes().CopyTo(bare.Attributes())
	bare.SetTimestamp(dp.Timestamp())
	bare.CopyTo(dp)
	require.Equal(t, pmetric.NumberDataPointValueTypeEmpty, dp.ValueType())
	c.ingest.consume(context.Background(), empty)
	assert.False(t, c.ingest.store.Has(k, timeline.Power), "no power learned")
	assert.Equal(t, map[string]int64{"bad_value": 2}, refusedPoints(t, tel))
}

// A GPU metric the timeline reads that comes as neither a gauge nor a sum
// (a histogram hw.power) is refused as bad_type, counted, not skipped
// silently.
func TestAGPUMetricOfAnotherTypeIsRefused(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, _, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("hw.power")
	m.SetEmptyHistogram().DataPoints().AppendEmpty().Attributes().PutStr("hw.id", "GPU-a")
	c.ingest.consume(context.Background(), md)
	assert.Zero(t, c.ingest.store.Len())
	assert.Equal(t, map[string]int64{"bad_type": 1}, refusedPoints(t, tel))
}

// A receiver point is keyed by its resource's host.name, or, where the
// resource has none, its own host.name attribute.
func TestAPointsHostIsItsResourcesElseItsOwn(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, resourceHost := range []string{"", "node-1"} {
		in := newTestIngest(t)
		md := oneGauge(resourceHost, "GPU-a", "hw.power", base, 300)
		md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0).Attributes().PutStr("host.name", "node-7")
		in.consume(context.Background(), md)
		want := cmp.Or(resourceHost, "node-7")
		assert.Equal(t, []timeline.Key{{Host: want, GPU: "GPU-a"}}, in.store.GPUs(""), "resource host %q", resourceHost)
	}
}

// A cumulative counter that went back (the driver or DCGM reloaded)
// starts over: the interval across it gives no rate or share, and nothing
// is refused as a bad value.
func TestACounterThatWentBackIsNoBadValue(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	*now = base.Add(time.Minute)
	for i, total := range []float64{5000, 1000, 3000} {
		ts := base.Add(time.Duration(i) * time.Second)
		io := oneGauge("node-1", "GPU-a", "hw.gpu.io", ts, total)
		io.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0).Attributes().PutStr("network.io.direction", "receive")
		c.ingest.consume(context.Background(), io)
		throttled := oneGauge("node-1", "GPU-a", "nvidia.gpu.throttle.time", ts, total/10000)
		throttled.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0).Attributes().PutStr("nvidia.gpu.throttle.reason", "sw_power_cap")
		c.ingest.consume(context.Background(), throttled)
		c.ingest.consume(context.Background(), dcgmScrape(ts, dcgmSeries{name: "DCGM_FI_DEV_POWER_VIOLATION", counter: true, v: total * 1e5}))
	}
	assert.Empty(t, refusedPoints(t, tel))
	k := timeline.Key{Host: "node-1", GPU: "GPU-a"}
	rx, ok := last(c.ingest, k, timeline.PCIeRx, base.Add(2*time.Second))
	require.True(t, ok)
	assert.InDelta(t, 2000, rx, 1e-9, "the rate after the reset")
	power, ok := last(c.ingest, k, timeline.PowerThrottled, base.Add(2*time.Second))
	require.True(t, ok)
	assert.InDelta(t, 0.2, power, 1e-9, "the share after the reload")
	power, ok = last(c.ingest, dcgmKeyOf(0), timeline.PowerThrottled, base.Add(2*time.Second))
	require.True(t, ok)
	assert.InDelta(t, 0.2, power, 1e-9, "DCGM's share after its restart")
}

// A point stamped far ahead of the processor's clock is refused before its
// handler reads it: the newest driver power sample, throttle time or DCGM
// violation total it left behind kept the GPU's later points out (the
// tick's power as superseded, the later totals as older) until the clock
// caught up.
func TestAPointFarAheadLeavesNothingBehind(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	*now = base.Add(time.Minute)
	throttled := func(ts time.Time, seconds float64) pmetric.Metrics {
		md := oneGauge("node-1", "GPU-a", "nvidia.gpu.throttle.time", ts, seconds)
		md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0).Attributes().PutStr("nvidia.gpu.throttle.reason", "sw_power_cap")
		return md
	}
	violation := func(ts time.Time, seconds float64) pmetric.Metrics {
		return dcgmScrape(ts, dcgmSeries{name: "DCGM_FI_DEV_POWER_VIOLATION", counter: true, v: seconds * 1e9})
	}
	ahead := base.Add(time.Hour)
	c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-a", "nvidia.gpu.samples.power", ahead, 300))
	c.ingest.consume(context.Background(), throttled(ahead, 100))
	c.ingest.consume(context.Background(), violation(ahead, 100))
	for i, seconds := range []float64{0, 0.2, 0.4} {
		ts := base.Add(time.Duration(i) * time.Second)
		c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-a", "hw.power", ts, 200))
		c.ingest.consume(context.Background(), throttled(ts, seconds))
		c.ingest.consume(context.Background(), violation(ts, seconds))
	}
	assert.Equal(t, map[string]int64{"future": 3}, refusedPoints(t, tel))
	k, at := timeline.Key{Host: "node-1", GPU: "GPU-a"}, base.Add(2*time.Second)
	power, ok := last(c.ingest, k, timeline.Power, at)
	require.True(t, ok, "the tick's power")
	assert.InDelta(t, 200, power, 1e-9)
	share, ok := last(c.ingest, k, timeline.PowerThrottled, at)
	require.True(t, ok, "the receiver's throttle shares")
	assert.InDelta(t, 0.2, share, 1e-9)
	share, ok = last(c.ingest, dcgmKeyOf(0), timeline.PowerThrottled, at)
	require.True(t, ok, "DCGM's violation shares")
	assert.InDelta(t, 0.2, share, 1e-9)
}

// A point stamped before what the timeline keeps of its GPU (more than
// history.retention behind its newest point: a batch retried after a long
// outage, a point that lost its timestamp) is refused as too_old, not as
// gpu_limit, which says to raise history.max_gpus: that is for a GPU past it.
func TestAPointOlderThanTheRetentionIsRefusedAsTooOld(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), func(cfg *Config) { cfg.History.MaxGPUs = 1 })
	*now = base.Add(time.Hour)
	c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-a", "hw.power", base.Add(time.Hour), 300))
	c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-a", "hw.power", base, 300))
	c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-a", "hw.energy", time.Unix(0, 0), 5e6))
	c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-b", "hw.power", base.Add(time.Hour), 300))
	assert.Equal(t, map[string]int64{"too_old": 2, "gpu_limit": 1}, refusedPoints(t, tel))
}

// A receiver point the timeline refused (a NaN power) does not mark the
// signal as the receiver's: dcgm-exporter's good power of that GPU is
// still taken.
func TestARefusedReceiverPointSupersedesNothing(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	k := dcgmKeyOf(0)
	in.consume(context.Background(), oneGauge(k.Host, k.GPU, "hw.power", t0, math.NaN()))
	in.consume(context.Background(), dcgmScrape(t0.Add(time.Second), dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", v: 300}))
	in.consume(context.Background(), dcgmScrape(t0.Add(2*time.Second), dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", v: 300}))
	assert.True(t, in.store.Has(k, timeline.Power))
}

// Ingest keeps per-GPU state, and feeds the live view, for no more GPUs
// than history.max_gpus, whatever a source sends: 5,000 GPU ids in one
// batch leave two states and two GPUs in the view's sink.
func TestIngestTracksAtMostMaxGPUs(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, func(cfg *Config) { cfg.History.MaxGPUs = 2 })
	*now = base.Add(2 * time.Second)
	reg := view.NewRegistry(view.Limits{Retention: time.Minute, MaxGPUs: 10, MaxRequests: 10}, "", func() time.Time { return *now })
	src, release := reg.RegisterSource("gpuviz")
	defer release()
	sink := &viewSink{sources: []*view.Source{src}, release: []func(){release}, width: int64(100 * time.Millisecond), gpus: map[timeline.Key][]*view.GPU{}}
	c.spans.setView(sink)
	md := pmetric.NewMetrics()
	for i := range 5000 {
		one := gpuMetrics("node-1", fmt.Sprintf("GPU-%d", i), 0, base, time.Second, repeat(busy, 1))
		one.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", "nvml")
		one.ResourceMetrics().MoveAndAppendTo(md.ResourceMetrics())
	}
	c.ingest.consume(context.Background(), md)
	assert.Equal(t, 2, c.spans.store.Len())
	c.ingest.mu.Lock()
	assert.Len(t, c.ingest.gpus, 2)
	c.ingest.mu.Unlock()
	assert.Len(t, sink.gpus, 2)
	assert.Equal(t, 2, reg.GPUs())
}

// A reading the live view alone shows (temperature) stamped past the clock
// is refused as the timeline's readings are: one such point would make
// the view drop every real sample of the GPU as too old.
func TestViewReadingsFromTheFutureAreRefused(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	*now = base.Add(21 * time.Second)
	reg := view.NewRegistry(view.Limits{Retention: time.Minute, MaxGPUs: 10, MaxRequests: 10}, "", func() time.Time { return *now })
	src, release := reg.RegisterSource("gpuviz")
	defer release()
	c.spans.setView(&viewSink{sources: []*view.Source{src}, release: []func(){release}, width: int64(100 * time.Millisecond), gpus: map[timeline.Key][]*view.GPU{}})
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-a", "hw.temperature", base.Add(24*time.Hour), 60))
	*now = base.Add(22 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base.Add(21*time.Second), time.Second, repeat(busy, 1)))
	assert.Equal(t, int64(1), refusedPoints(t, tel)["future"])
	assert.Zero(t, reg.Dropped().SamplesTooOld, "the view kept the GPU's samples")
}

// The receiver's GPU metrics feed the timeline's signals by name, as the
// receiver's documentation (receiver/gpuvizreceiver/documentation.md) has
// them: each row sends a reading at t0 and t1 and reads the signal's mean
// over the second before t1. hw.gpu.utilization feeds utilisation only for
// the general task (or no task): its encoder and decoder series are
// NVENC's and NVDEC's engines, not the graphics/compute engine's.
func TestReceiverHandlersFeedTheirSignals(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	k := timeline.Key{Host: "node-1", GPU: "GPU-a"}
	for _, tc := range []struct {
		name   string
		metric string
		attrs  map[string]any
		sig    timeline.Signal
		v      float64
		absent bool
	}{
		{name: "utilization, general task", metric: "hw.gpu.utilization", attrs: map[string]any{"hw.gpu.task": "general"}, sig: timeline.Utilization, v: 0.7},
		{name: "utilization, no task", metric: "hw.gpu.utilization", sig: timeline.Utilization, v: 0.7},
		{name: "utilization, encoder", metric: "hw.gpu.utilization", attrs: map[string]any{"hw.gpu.task": "encoder"}, sig: timeline.Utilization, v: 0.7, absent: true},
		{name: "utilization, decoder", metric: "hw.gpu.utilization", attrs: map[string]any{"hw.gpu.task": "decoder"}, sig: timeline.Utilization, v: 0.7, absent: true},
		{name: "utilization samples", metric: "nvidia.gpu.samples.utilization", sig: timeline.Utilization, v: 0.4},
		{name: "memory controller", metric: "nvidia.gpu.memory_controller.utilization", sig: timeline.MemoryController, v: 0.3},
		{name: "memory controller samples", metric: "nvidia.gpu.samples.memory_controller.utilization", sig: timeline.MemoryController, v: 0.6},
		{name: "memory usage", metric: "hw.gpu.memory.usage", sig: timeline.MemoryUsed, v: 40e9},
		{name: "memory limit", metric: "hw.gpu.memory.limit", sig: timeline.MemoryLimit, v: 80e9},
		{name: "power", metric: "hw.power", sig: timeline.Power, v: 350},
		{name: "power samples", metric: "nvidia.gpu.samples.power", sig: timeline.Power, v: 420},
		{name: "nvlink capacity", metric: "nvidia.gpu.nvlink.capacity", sig: timeline.NVLinkCapacity, v: 478.1e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newTestIngest(t)
			for _, ts := range []time.Time{t0, t1} {
				md := oneGauge(k.Host, k.GPU, tc.metric, ts, tc.v)
				dp := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0)
				for key, v := range tc.attrs {
					dp.Attributes().PutStr(key, v.(string))
				}
				in.consume(context.Background(), md)
			}
			got, ok := last(in, k, tc.sig, t1)
			if tc.absent {
				assert.False(t, ok, "%s feeds nothing into %v", tc.metric, tc.sig)
				return
			}
			require.True(t, ok, "%s feeds %v", tc.metric, tc.sig)
			assert.InDelta(t, tc.v, got, 1e-9*tc.v)
		})
	}
}

// A GPU point stamped at the bound (the processor's clock plus
// max_future) is taken; one a nanosecond past it is refused before it
// leaves anything, the receiver's or DCGM's: not its backend, nor a slot of history.max_gpus that
// kept the next GPU out.
func TestAGPUPointPastTheFutureBoundTakesNoSlot(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), func(cfg *Config) { cfg.History.MaxGPUs = 1 })
	*now = base
	bound := base.Add(c.ingest.maxFuture)
	withBackend := func(md pmetric.Metrics, backend string) pmetric.Metrics {
		md.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", backend)
		return md
	}
	ahead, taken := timeline.Key{Host: "node-1", GPU: "GPU-b"}, timeline.Key{Host: "node-1", GPU: "GPU-a"}
	c.ingest.consume(context.Background(), withBackend(oneGauge(ahead.Host, ahead.GPU, "hw.power", bound.Add(time.Nanosecond), 300), "simulated"))
	assert.Equal(t, map[string]int64{"future": 1}, refusedPoints(t, tel))
	assert.Empty(t, c.ingest.backend(ahead), "the refused point's backend")
	c.ingest.consume(context.Background(), dcgmScrape(bound.Add(time.Nanosecond), dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", v: 300}))
	assert.Equal(t, map[string]int64{"future": 2}, refusedPoints(t, tel))
	assert.Empty(t, c.ingest.backend(dcgmKeyOf(0)), "the refused DCGM point's backend")
	c.ingest.consume(context.Background(), withBackend(oneGauge(taken.Host, taken.GPU, "hw.power", bound, 300), "nvml"))
	assert.Equal(t, map[string]int64{"future": 2}, refusedPoints(t, tel), "the point at the bound is taken")
	assert.Equal(t, "nvml", c.ingest.backend(taken))
	assert.True(t, c.ingest.store.Has(taken, timeline.Power))
}
