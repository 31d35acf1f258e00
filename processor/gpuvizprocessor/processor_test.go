package gpuvizprocessor

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/gpuviz/gpuviz/internal/promnames"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
)

// sample is one scrape's worth of readings of a fixture GPU.
type sample struct {
	util, tensor, dram, powerW, memUsed float64
}

// gpuMetrics builds the metrics a gpuviz receiver would send for one GPU:
// a sample every step from..to, with an energy counter that integrates the
// power exactly (so counter-based energies can be checked by hand).
func gpuMetrics(host, id string, index int64, from time.Time, step time.Duration, samples []sample) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	if host != "" {
		rm.Resource().Attributes().PutStr("host.name", host)
	}
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	gauge := func(name string) pmetric.NumberDataPointSlice {
		m := ms.AppendEmpty()
		m.SetName(name)
		return m.SetEmptyGauge().DataPoints()
	}
	util, tensor, dram, power := gauge("hw.gpu.utilization"), gauge("nvidia.gpu.tensor.activity"), gauge("nvidia.gpu.dram.activity"), gauge("hw.power")
	mem, limit, info := gauge("hw.gpu.memory.usage"), gauge("hw.gpu.memory.limit"), gauge("nvidia.gpu.info")
	em := ms.AppendEmpty()
	em.SetName("hw.energy")
	energy := em.SetEmptySum().DataPoints()
	joules := 1e6
	for i, s := range samples {
		ts := pcommon.NewTimestampFromTime(from.Add(time.Duration(i) * step))
		add := func(dps pmetric.NumberDataPointSlice, v float64) pmetric.NumberDataPoint {
			dp := dps.AppendEmpty()
			dp.SetTimestamp(ts)
			dp.SetDoubleValue(v)
			dp.Attributes().PutStr("hw.id", id)
			return dp
		}
		add(util, s.util).Attributes().PutStr("hw.gpu.task", "general")
		add(tensor, s.tensor)
		add(dram, s.dram)
		add(power, s.powerW)
		add(mem, s.memUsed)
		add(limit, 80e9)
		add(info, 1).Attributes().PutInt("nvidia.gpu.index", index)
		if i > 0 {
			joules += s.powerW * step.Seconds() // the power of sample i covers the step before it
		}
		add(energy, joules)
	}
	return md
}

// vllmSpan is an llm_request span as vLLM's V1 engine emits it.
func vllmSpan(td ptrace.Traces, trace byte, start time.Time, queue, prefill, decode float64, outTokens int64) ptrace.Span {
	var rs ptrace.ResourceSpans
	if td.ResourceSpans().Len() == 0 {
		rs = td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "vllm")
		rs.ScopeSpans().AppendEmpty().Scope().SetName("vllm.llm_engine")
	}
	rs = td.ResourceSpans().At(0)
	span := rs.ScopeSpans().At(0).Spans().AppendEmpty()
	span.SetName("llm_request")
	span.SetKind(ptrace.SpanKindServer)
	span.SetTraceID(pcommon.TraceID{trace, 1})
	span.SetSpanID(pcommon.SpanID{trace, 2})
	total := queue + prefill + decode
	span.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	span.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Duration(total * float64(time.Second)))))
	a := span.Attributes()
	a.PutDouble("gen_ai.latency.time_in_queue", queue)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", prefill)
	a.PutDouble("gen_ai.latency.time_in_model_decode", decode)
	a.PutDouble("gen_ai.latency.e2e", total)
	a.PutInt("gen_ai.usage.prompt_tokens", 512)
	a.PutInt("gen_ai.usage.completion_tokens", outTokens)
	a.PutStr("gen_ai.request.model", "meta-llama/Llama-3.1-8B-Instruct")
	a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
	return span
}

type pipelines struct {
	cfg     *Config
	traces  processor.Traces
	metrics processor.Metrics
	spans   *consumertest.TracesSink
	points  *consumertest.MetricsSink
}

func newPipelines(t *testing.T, tune func(*Config)) *pipelines {
	t.Helper()
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	// Real time: spans are attributed as soon as their energy is in, not
	// held while the books warm up, and bins final a second behind it.
	cfg.Attribution.SettleWindow, cfg.Attribution.FinalizeAfter, cfg.Attribution.WarmupWait = 0, time.Second, 0
	if tune != nil {
		tune(cfg)
	}
	require.NoError(t, cfg.Validate())
	p := &pipelines{cfg: cfg, spans: new(consumertest.TracesSink), points: new(consumertest.MetricsSink)}
	var err error
	set := processortest.NewNopSettings(metadata.Type)
	p.traces, err = f.CreateTraces(context.Background(), set, cfg, p.spans)
	require.NoError(t, err)
	p.metrics, err = f.CreateMetrics(context.Background(), set, cfg, p.points)
	require.NoError(t, err)
	require.NoError(t, p.traces.Start(context.Background(), nil))
	require.NoError(t, p.metrics.Start(context.Background(), nil))
	t.Cleanup(func() {
		require.NoError(t, p.traces.Shutdown(context.Background()))
		require.NoError(t, p.metrics.Shutdown(context.Background()))
	})
	return p
}

// busy is a GPU decoding: memory-bound, 450 W.
var busy = sample{util: 0.95, tensor: 0.2, dram: 0.8, powerW: 450, memUsed: 60e9}

// starved is a GPU waiting for its host between steps: requests present
// read host_bound, 120 W.
var starved = sample{util: 0.1, tensor: 0.01, dram: 0.05, powerW: 120, memUsed: 60e9}

func repeat(s sample, n int) []sample {
	out := make([]sample, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func spanAttrs(t *testing.T, sink *consumertest.TracesSink, name string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, td := range sink.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			sss := td.ResourceSpans().At(i).ScopeSpans()
			for j := range sss.Len() {
				spans := sss.At(j).Spans()
				for k := range spans.Len() {
					if spans.At(k).Name() == name {
						out = append(out, spans.At(k).Attributes().AsRaw())
					}
				}
			}
		}
	}
	return out
}

// oneBusyGPU is a processor that has seen 30 s of GPU-a on node-1 busy,
// up to now.
func oneBusyGPU(t *testing.T) (*pipelines, time.Time) {
	t.Helper()
	p := newPipelines(t, nil)
	now := time.Now().Truncate(time.Second)
	from := now.Add(-30 * time.Second)
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, from, time.Second, repeat(busy, 31))))
	return p, now
}

func TestSpansAreEnrichedFromTheGPUTimeline(t *testing.T) {
	p, now := oneBusyGPU(t)

	td := ptrace.NewTraces()
	vllmSpan(td, 1, now.Add(-20*time.Second), 1, 1, 8, 200)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	got := spanAttrs(t, p.spans, "llm_request")
	require.Len(t, got, 1)
	a := got[0]
	assert.Equal(t, []any{"GPU-a"}, a["gpuviz.gpu.ids"])
	assert.Equal(t, "host", a["gpuviz.gpu.match"], "the span has no GPU attribute, pid or host.name: the single host's GPUs")
	assert.Equal(t, "vllm", a["gpuviz.request.family"])
	assert.InDelta(t, 1.0, a["gpuviz.coverage"], 1e-9)
	assert.InDelta(t, 0.95, a["gpuviz.gpu.utilization.mean"], 1e-9)
	assert.InDelta(t, 0.8, a["gpuviz.gpu.dram_activity.mean"], 1e-9)
	assert.InDelta(t, 450.0, a["gpuviz.gpu.power.mean"], 1e-9)
	assert.InDelta(t, 4050.0, a["gpuviz.energy"], 1e-6, "9 s at 450 W, alone on the GPU: its second in the queue ran nothing")
	assert.Equal(t, "counter", a["gpuviz.energy.source"])
	assert.InDelta(t, 4050.0/200, a["gpuviz.energy_per_output_token"], 1e-6)
	assert.Equal(t, "memory_bound", a["gpuviz.bottleneck"])
	assert.Equal(t, "memory_bound", a["gpuviz.phase.decode.bottleneck"])
	assert.InDelta(t, 3600.0, a["gpuviz.phase.decode.energy"], 1e-6)
	assert.Equal(t, int64(60e9), a["gpuviz.gpu.memory.peak"])

	for _, phase := range []string{"gpu.queue", "gpu.prefill", "gpu.decode"} {
		children := spanAttrs(t, p.spans, phase)
		require.Len(t, children, 1, phase)
		assert.Contains(t, children[0], "gpuviz.bottleneck")
	}
}

// A span that already carries gpuviz. attributes (enriched by a collector
// upstream) has them replaced, each key once, and ends with the same keys
// and values as the same span arriving bare; its other attributes stay.
func TestAnEnrichedSpanIsEnrichedAgainWithoutDuplicates(t *testing.T) {
	p, now := oneBusyGPU(t)

	td := ptrace.NewTraces()
	vllmSpan(td, 1, now.Add(-20*time.Second), 1, 1, 8, 200)
	stale := vllmSpan(td, 2, now.Add(-20*time.Second), 1, 1, 8, 200)
	stale.Attributes().PutDouble("gpuviz.energy", -1)
	stale.Attributes().PutStr("gpuviz.bottleneck", "stale")
	stale.Attributes().PutStr("gpuviz.phase.decode.bottleneck", "stale")
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	spans := p.spans.AllTraces()[0].ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	byTrace := map[byte]map[string]any{}
	for i := range spans.Len() {
		span := spans.At(i)
		if span.Name() != "llm_request" {
			continue
		}
		seen := map[string]int{}
		for k := range span.Attributes().All() {
			seen[k]++
			assert.Equal(t, 1, seen[k], "key %s twice", k)
		}
		byTrace[span.TraceID()[0]] = span.Attributes().AsRaw()
	}
	require.Len(t, byTrace, 2)
	bare, again := byTrace[1], byTrace[2]
	assert.Greater(t, again["gpuviz.energy"], 0.0)
	assert.Equal(t, "memory_bound", again["gpuviz.phase.decode.bottleneck"])
	assert.Equal(t, "meta-llama/Llama-3.1-8B-Instruct", again["gen_ai.request.model"])
	assert.Equal(t, bare, again, "two identical requests on one GPU, one stale-enriched: the same attributes")
}

// Requests that share a GPU share its energy: their energies sum to what
// the counter measured over the time they covered.
func TestConcurrentRequestsConserveEnergy(t *testing.T) {
	p := newPipelines(t, nil)
	now := time.Now().Truncate(time.Second)
	from := now.Add(-40 * time.Second)
	samples := repeat(busy, 41)
	for i := range samples {
		samples[i].powerW = 300 + float64(i*7%200) // varying power
	}
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("", "GPU-a", 0, from, time.Second, samples)))

	td := ptrace.NewTraces()
	reqStart := now.Add(-30 * time.Second)
	vllmSpan(td, 1, reqStart, 0, 2, 10, 100)                     // [−30 s, −18 s]
	vllmSpan(td, 2, reqStart.Add(4*time.Second), 0.5, 1, 10, 50) // [−26 s, −14.5 s]
	vllmSpan(td, 3, reqStart.Add(5*time.Second), 0, 1, 3, 10)    // [−25 s, −21 s]
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	var sum float64
	for _, a := range spanAttrs(t, p.spans, "llm_request") {
		sum += a["gpuviz.energy"].(float64)
	}
	// The counter over the union [−30 s, −14.5 s]: whole seconds −30..−15,
	// then half of the second ending at −14.
	var want float64
	for i := 11; i <= 25; i++ {
		want += samples[i].powerW
	}
	want += samples[26].powerW / 2
	assert.InDelta(t, want, sum, 1e-6)
}

func TestWithoutGPUMetricsSpansPassStraightThrough(t *testing.T) {
	p := newPipelines(t, nil)
	td := ptrace.NewTraces()
	vllmSpan(td, 1, time.Now().Add(-10*time.Second), 0, 1, 1, 10)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	assert.Equal(t, 1, p.spans.SpanCount(), "synchronously, untouched")
	assert.NotContains(t, spanAttrs(t, p.spans, "llm_request")[0], "gpuviz.energy")
}

func TestOrdinaryAndMalformedSpansPassThroughUntouched(t *testing.T) {
	p := newPipelines(t, nil)
	now := time.Now()
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("", "GPU-a", 0, now.Add(-10*time.Second), time.Second, repeat(busy, 10))))
	td := ptrace.NewTraces()
	bad := vllmSpan(td, 1, now.Add(-5*time.Second), 0, 1, 1, 10)
	bad.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", -3)
	http := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().AppendEmpty()
	http.SetName("GET /health")
	want := ptrace.NewTraces()
	td.CopyTo(want)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Equal(t, 2, p.spans.SpanCount(), "nothing to hold: passed on at once")
	assert.Equal(t, want, p.spans.AllTraces()[0])
}

func TestOverflowPassesThroughUnenriched(t *testing.T) {
	p := newPipelines(t, func(c *Config) {
		c.MaxPendingSpans = 1
		c.MaxWait = time.Hour
		c.Attribution.Horizon, c.History.Retention = 2*time.Hour, 2*time.Hour
	})
	now := time.Now()
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("", "GPU-a", 0, now.Add(-60*time.Second), time.Second, repeat(busy, 10))))
	// Samples end 50 s ago: these spans wait (max_wait is an hour).
	first := ptrace.NewTraces()
	vllmSpan(first, 1, now.Add(-5*time.Second), 0, 1, 1, 10)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), first))
	assert.Zero(t, p.spans.SpanCount(), "held")
	second := ptrace.NewTraces()
	vllmSpan(second, 2, now.Add(-5*time.Second), 0, 1, 1, 10)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), second))
	assert.Equal(t, 1, p.spans.SpanCount(), "over max_pending_spans: passed through at once")
}

func TestOverflowCountsEverySpanOfAHeldBatch(t *testing.T) {
	p := newPipelines(t, func(c *Config) {
		c.MaxPendingSpans = 3
		c.MaxWait = time.Hour
		c.Attribution.Horizon, c.History.Retention = 2*time.Hour, 2*time.Hour
	})
	now := time.Now()
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("", "GPU-a", 0, now.Add(-60*time.Second), time.Second, repeat(busy, 10))))
	// One inference span among three others: held whole, the batch counts
	// four spans against a bound of three, so it is not held.
	td := ptrace.NewTraces()
	vllmSpan(td, 1, now.Add(-5*time.Second), 0, 1, 1, 10)
	spans := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	for range 3 {
		spans.AppendEmpty().SetName("GET /health")
	}
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	assert.Equal(t, 4, p.spans.SpanCount(), "over max_pending_spans: passed through at once")
}

// hwStatus is the receiver's hw.status of GPU id at t: state is 1.
func hwStatus(id, state string, t time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("hw.status")
	dps := m.SetEmptySum().DataPoints()
	for _, st := range []string{"ok", "degraded", "failed"} {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(t))
		dp.Attributes().PutStr("hw.id", id)
		dp.Attributes().PutStr("hw.state", st)
		if st == state {
			dp.SetIntValue(1)
		}
	}
	return md
}

func TestFailedGPUIsNotWaitedFor(t *testing.T) {
	p := newPipelines(t, func(c *Config) {
		c.MaxWait = time.Hour
		c.Attribution.Horizon, c.History.Retention = 2*time.Hour, 2*time.Hour
	})
	now := time.Now()
	ctx := context.Background()
	// GPU-a's data covers the span; GPU-b's stopped 50 s ago.
	require.NoError(t, p.metrics.ConsumeMetrics(ctx, gpuMetrics("", "GPU-a", 0, now.Add(-60*time.Second), time.Second, repeat(busy, 60))))
	require.NoError(t, p.metrics.ConsumeMetrics(ctx, gpuMetrics("", "GPU-b", 1, now.Add(-60*time.Second), time.Second, repeat(busy, 10))))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, now.Add(-5*time.Second), 0, 1, 1, 10)
	require.NoError(t, p.traces.ConsumeTraces(ctx, td))
	require.NoError(t, p.metrics.ConsumeMetrics(ctx, hwStatus("GPU-b", "degraded", now)))
	time.Sleep(300 * time.Millisecond)
	assert.Zero(t, p.spans.SpanCount(), "held for GPU-b, which may yet send its data")

	require.NoError(t, p.metrics.ConsumeMetrics(ctx, hwStatus("GPU-b", "failed", now)))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 10*time.Second, 10*time.Millisecond,
		"released once GPU-b is reported failed: it sends nothing")
	attrs := spanAttrs(t, p.spans, "llm_request")
	require.Len(t, attrs, 1)
	assert.ElementsMatch(t, []any{"GPU-a", "GPU-b"}, attrs[0]["gpuviz.gpu.ids"], "still matched to both")
}

// sendSpanAt hands c, at 15 s past base, a vLLM span of one GPU (the one
// host's) that started 12 s past base.
func sendSpanAt(t *testing.T, c *core, now *time.Time, sink *consumertest.TracesSink, base time.Time) {
	t.Helper()
	*now = base.Add(15 * time.Second)
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(12*time.Second), 0, 1, 1, 10)
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
}

// leavesAsItsGroupCloses checks that sendSpanAt's span waits for nothing
// but its settle group: held at 19 s past base, let go at 20 s.
func leavesAsItsGroupCloses(t *testing.T, c *core, sink *consumertest.TracesSink, base time.Time) {
	t.Helper()
	c.tick(base.Add(19 * time.Second))
	assert.Zero(t, sink.SpanCount(), "its settle group is open")
	c.tick(base.Add(20 * time.Second))
	assert.Equal(t, 1, len(spanAttrs(t, sink, "llm_request")), "let go as its group closes, not at max_wait")
}

// A span all of whose GPUs the receiver reports failed waits for nothing
// but its settle group: their data stopped, and max_wait would only hold it.
func TestASpanOnlyOnFailedGPUsWaitsForItsSettleGroupAlone(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, nil)
	*now = base.Add(11 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 10)))
	c.ingest.consume(context.Background(), hwStatus("GPU-a", "failed", *now))
	sendSpanAt(t, c, now, sink, base)
	leavesAsItsGroupCloses(t, c, sink, base)
}

// A GPU the receiver reports failed but whose data still comes (a failed
// row remap is failed, and the GPU answers) is waited for like any other:
// only a GPU failed and silent since (lost) is not.
func TestAFailedGPUThatStillSendsIsWaitedFor(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, nil)
	*now = base.Add(11 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 5)))
	c.ingest.consume(context.Background(), hwStatus("GPU-a", "failed", base.Add(5*time.Second)))
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base.Add(5*time.Second), time.Second, repeat(busy, 5)))
	// The receiver says failed at every scrape, with the scrape's data.
	c.ingest.consume(context.Background(), hwStatus("GPU-a", "failed", base.Add(9*time.Second)))
	sendSpanAt(t, c, now, sink, base)
	c.tick(base.Add(20 * time.Second))
	assert.Zero(t, sink.SpanCount(), "held: GPU-a still sends, and its data after the span has not come")
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base.Add(10*time.Second), time.Second, repeat(busy, 15)))
	c.tick(base.Add(26 * time.Second))
	require.Len(t, spanAttrs(t, sink, "llm_request"), 1, "released once its data has come")
}

// A GPU lost a second time, after it was back and sent data, is not
// waited for: its failure is timed from the second report, not the first.
// Points of the scrape that reports it failed, stamped with the report,
// are not data sent after it.
func TestAGPULostAgainIsNotWaitedFor(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, nil)
	*now = base.Add(11 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 3)))
	c.ingest.consume(context.Background(), hwStatus("GPU-a", "failed", base.Add(3*time.Second)))
	c.ingest.consume(context.Background(), hwStatus("GPU-a", "ok", base.Add(4*time.Second)))
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base.Add(4*time.Second), time.Second, repeat(busy, 6)))
	c.ingest.consume(context.Background(), hwStatus("GPU-a", "failed", base.Add(9*time.Second)))
	sendSpanAt(t, c, now, sink, base)
	leavesAsItsGroupCloses(t, c, sink, base)
}

func TestShutdownFlushesHeldSpans(t *testing.T) {
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.MaxWait = time.Hour
	cfg.Attribution.Horizon, cfg.History.Retention = 2*time.Hour, 2*time.Hour
	sink := new(consumertest.TracesSink)
	set := processortest.NewNopSettings(metadata.Type)
	tp, err := f.CreateTraces(context.Background(), set, cfg, sink)
	require.NoError(t, err)
	mp, err := f.CreateMetrics(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	require.NoError(t, tp.Start(context.Background(), nil))
	require.NoError(t, mp.Start(context.Background(), nil))
	now := time.Now()
	require.NoError(t, mp.ConsumeMetrics(context.Background(), gpuMetrics("", "GPU-a", 0, now.Add(-60*time.Second), time.Second, repeat(busy, 58))))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, now.Add(-5*time.Second), 0.5, 1, 1, 10)
	require.NoError(t, tp.ConsumeTraces(context.Background(), td))
	require.Zero(t, sink.SpanCount())
	require.NoError(t, tp.Shutdown(context.Background()))
	require.NoError(t, mp.Shutdown(context.Background()))
	assert.Equal(t, 1+3, sink.SpanCount(), "the held span, enriched with what there was, and its phases")
}

func TestOneCorePerConfig(t *testing.T) {
	fac := &factory{cores: map[*Config]*core{}}
	set := processortest.NewNopSettings(metadata.Type)
	a, b := createDefaultConfig(), createDefaultConfig()
	ca, err := fac.coreFor(set, a)
	require.NoError(t, err)
	ca2, err := fac.coreFor(set, a)
	require.NoError(t, err)
	cb, err := fac.coreFor(set, b)
	require.NoError(t, err)
	assert.Same(t, ca, ca2, "one ID in two pipelines: one core")
	assert.NotSame(t, ca, cb, "equal settings under two IDs stay apart")

	// Shutdown without Start is safe, and the last user removes the core.
	h1, h2 := &handle{core: ca}, &handle{core: ca2}
	require.NoError(t, h1.start(context.Background(), nil))
	require.NoError(t, h2.shutdown(context.Background()))
	_, ok := fac.cores[a]
	assert.True(t, ok, "one user left")
	require.NoError(t, h1.shutdown(context.Background()))
	_, ok = fac.cores[a]
	assert.False(t, ok, "the last user removed it")
	_, ok = fac.cores[b]
	assert.True(t, ok)
}

func TestDerivedMetricsCarryExemplarsOfTheRequests(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.MaxWait = time.Second; c.Metrics.Interval = time.Millisecond })
	now := time.Now().Truncate(time.Second)
	from := now.Add(-40 * time.Second)
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, from, time.Second, repeat(busy, 41))))
	td := ptrace.NewTraces()
	span := vllmSpan(td, 7, now.Add(-30*time.Second), 0, 2, 20, 100)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	time.Sleep(2 * time.Millisecond)
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, now.Add(time.Second), time.Second, repeat(busy, 1))))
	md := p.points.AllMetrics()[len(p.points.AllMetrics())-1]
	found := map[string]bool{}
	emitted := map[string]promnames.Metric{}
	var exemplarTraces []pcommon.TraceID
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		host, _ := rms.At(i).Resource().Attributes().Get("host.name")
		for j := range ms.Len() {
			m := ms.At(j)
			found[m.Name()] = true
			kind := promnames.Gauge
			switch m.Type() {
			case pmetric.MetricTypeSum:
				kind = promnames.UpDownCounter
				if m.Sum().IsMonotonic() {
					kind = promnames.Counter
				}
			case pmetric.MetricTypeHistogram:
				kind = promnames.Histogram
			}
			if strings.HasPrefix(m.Name(), "gpuviz.") { // not the GPU metrics passing through
				emitted[m.Name()] = promnames.Metric{Name: m.Name(), Unit: m.Unit(), Kind: kind}
			}
			// Every derived series is under its GPUs' host: a gateway
			// joining many hosts must keep them apart.
			assert.Equal(t, "node-1", host.AsString(), m.Name())
			switch m.Type() {
			case pmetric.MetricTypeSum:
				for k := range m.Sum().DataPoints().Len() {
					exs := m.Sum().DataPoints().At(k).Exemplars()
					for l := range exs.Len() {
						exemplarTraces = append(exemplarTraces, exs.At(l).TraceID())
						if m.Name() == "gpuviz.gpu.bottleneck.time" {
							// Its value is the time the request's label held
							// over it: on one steadily busy GPU, all of it.
							reqSeconds := span.EndTimestamp().AsTime().Sub(span.StartTimestamp().AsTime()).Seconds()
							assert.InDelta(t, reqSeconds, exs.At(l).DoubleValue(), 1e-6)
						}
					}
				}
			case pmetric.MetricTypeHistogram:
				for k := range m.Histogram().DataPoints().Len() {
					exs := m.Histogram().DataPoints().At(k).Exemplars()
					for l := range exs.Len() {
						exemplarTraces = append(exemplarTraces, exs.At(l).TraceID())
					}
				}
			}
		}
	}
	for _, name := range []string{"gpuviz.accounting.energy", "gpuviz.accounting.gpu_time", "gpuviz.gpu.bottleneck.time", "gpuviz.gpu.bottleneck.state", "gpuviz.gpu.energy", "gpuviz.gpu.energy.correction",
		"gpuviz.request.energy", "gpuviz.request.energy_per_output_token", "gpuviz.request.gpu_busy_time", "gpuviz.gpu.anomaly", "gpuviz.gpu.load_pattern"} {
		assert.True(t, found[name], name)
	}
	// The dashboards and alert rules are checked against promnames.Derived:
	// it must list exactly what the processor emits.
	assert.ElementsMatch(t, promnames.Derived(), slices.Collect(maps.Values(emitted)))
	require.NotEmpty(t, exemplarTraces)
	for _, id := range exemplarTraces {
		assert.Equal(t, span.TraceID(), id)
	}
}

// A request whose span arrives after another's was attributed (outside
// the settle window) still gets its fair share of the time they shared,
// never only the leftovers; the books count what that over-attributes as
// correction, so that attributed + idle + correction is what the GPU drew.
func TestLateSpanGetsItsFairShare(t *testing.T) {
	fac := &factory{cores: map[*Config]*core{}}
	cfg := createDefaultConfig()
	cfg.Attribution.FinalizeAfter = 5 * time.Second
	c, err := fac.coreFor(processortest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC) // in the past: spans ending in the future are malformed
	samples := repeat(busy, 41)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, samples))
	now := base.Add(41 * time.Second)
	c.now = func() time.Time { return now }
	release := func(trace byte, startS, decodeS float64) float64 {
		td := ptrace.NewTraces()
		// One token a second each: they cost alike while they share.
		span := vllmSpan(td, trace, base.Add(time.Duration(startS*float64(time.Second))), 0, 0, decodeS, int64(decodeS)+1)
		require.NoError(t, c.consumeTraces(context.Background(), td, consumertest.NewNop(), notStarted)) // released at once
		e, ok := span.Attributes().Get("gpuviz.energy")
		require.True(t, ok)
		return e.Double()
	}
	short := release(1, 10, 5) // [10 s, 15 s], alone as far as anyone knows
	long := release(2, 5, 25)  // [5 s, 30 s]: shares [10 s, 15 s] with the short one
	// The two cost alike to within their contexts' share (docs/attribution.md): 1%.
	assert.InDelta(t, 5*busy.powerW, short, 1e-6)
	assert.InEpsilon(t, 25*busy.powerW-2.5*busy.powerW, long, 0.01, "half of the shared five seconds, not none of them")
	c.tick(now)
	books := c.spans.books()
	require.Len(t, books, 1)
	tot := books[0].totals
	assert.InDelta(t, tot.Measured, tot.Attributed+tot.Idle+tot.Unsampled+tot.Correction, 1e-6)
	assert.InEpsilon(t, -2.5*busy.powerW, tot.Correction, 0.01, "what the short one got beyond its final share")
}

// In a gateway fed by many hosts, GPUs are told apart by host.name + hw.id:
// a span is matched to its own host's GPUs, and a span without host.name
// cannot be matched by host at all (it passes through, counted).
func TestGatewayKeepsHostsApart(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.MaxWait = 500 * time.Millisecond })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC) // in the past: spans ending in the future are malformed
	hot := busy
	hot.powerW = 650
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 20))))
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-2", "GPU-a", 0, base, time.Second, repeat(hot, 20))))

	td := ptrace.NewTraces()
	onNode2 := vllmSpan(td, 1, base.Add(5*time.Second), 0, 1, 4, 10)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-2")
	anonymous := ptrace.NewTraces()
	vllmSpan(anonymous, 2, base.Add(5*time.Second), 0, 1, 4, 10)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), anonymous))
	require.Eventually(t, func() bool { return len(spanAttrs(t, p.spans, "llm_request")) == 2 }, 5*time.Second, 10*time.Millisecond)

	var named, unnamed map[string]any
	for _, a := range spanAttrs(t, p.spans, "llm_request") {
		if _, ok := a["gpuviz.energy"]; ok {
			named = a
		} else {
			unnamed = a
		}
	}
	require.NotNil(t, named, "the node-2 span is enriched: %v", spanAttrs(t, p.spans, "llm_request"))
	require.NotNil(t, unnamed, "the span without host.name is not: %v", spanAttrs(t, p.spans, "llm_request"))
	assert.InDelta(t, 650.0, named["gpuviz.gpu.power.mean"], 1e-9, "node-2's GPU, not node-1's with the same hw.id")
	assert.InDelta(t, 5*650.0, named["gpuviz.energy"], 1e-6)
	assert.Equal(t, onNode2.Name(), "llm_request")
}

// With results_on: child the request span goes on at once, untouched, and
// its results follow on a child span gpu.request under a copy of its
// resource: the results the request span carries by default, with the
// phase spans under the child.
func TestResultsOnAChildSpan(t *testing.T) {
	send := func(on string) (*pipelines, ptrace.Traces) {
		p := newPipelines(t, func(c *Config) { c.ResultsOn = on })
		now := time.Now().Truncate(time.Second)
		require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, now.Add(-30*time.Second), time.Second, repeat(busy, 31))))
		td := ptrace.NewTraces()
		vllmSpan(td, 1, now.Add(-20*time.Second), 1, 1, 8, 200)
		td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().AppendEmpty().SetName("GET /health")
		sent := ptrace.NewTraces()
		td.CopyTo(sent)
		require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
		return p, sent
	}
	onRequest, _ := send(ResultsOnRequest)
	onChild, sent := send(ResultsOnChild)
	require.Eventually(t, func() bool { return onRequest.spans.SpanCount() > 0 && len(onChild.spans.AllTraces()) == 2 }, 5*time.Second, 10*time.Millisecond)

	got := onChild.spans.AllTraces()
	assert.Equal(t, sent, got[0], "handed on as it came, before its results")
	request := sent.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	children := got[1]
	require.Equal(t, 1, children.ResourceSpans().Len())
	rs := children.ResourceSpans().At(0)
	assert.Equal(t, sent.ResourceSpans().At(0).Resource().Attributes().AsRaw(), rs.Resource().Attributes().AsRaw())
	require.Equal(t, 1, rs.ScopeSpans().Len())
	assert.Equal(t, metadata.ScopeName, rs.ScopeSpans().At(0).Scope().Name())
	spans := rs.ScopeSpans().At(0).Spans()
	require.Equal(t, 4, spans.Len(), "gpu.request and its three phase spans")
	child := spans.At(0)
	assert.Equal(t, "gpu.request", child.Name())
	assert.Equal(t, request.TraceID(), child.TraceID())
	assert.Equal(t, request.SpanID(), child.ParentSpanID())
	assert.Equal(t, request.StartTimestamp(), child.StartTimestamp())
	assert.Equal(t, request.EndTimestamp(), child.EndTimestamp())
	for i := 1; i < spans.Len(); i++ {
		assert.Equal(t, child.SpanID(), spans.At(i).ParentSpanID(), spans.At(i).Name())
		assert.Equal(t, spanAttrs(t, onRequest.spans, spans.At(i).Name()), spanAttrs(t, onChild.spans, spans.At(i).Name()))
	}

	// The request's results, and its model to group them by.
	want := spanAttrs(t, onRequest.spans, "llm_request")[0]
	maps.DeleteFunc(want, func(k string, _ any) bool { return !strings.HasPrefix(k, "gpuviz.") && k != "gen_ai.request.model" })
	assert.Contains(t, want, "gpuviz.energy")
	assert.Contains(t, want, "gen_ai.request.model")
	assert.Equal(t, []map[string]any{want}, spanAttrs(t, onChild.spans, "gpu.request"))
}

// With results_on: child the derived metrics' exemplars point at the span
// that carries the results: the request's gpu.request, on its trace.
func TestResultsOnAChildSpanExemplarsPointAtIt(t *testing.T) {
	p := newPipelines(t, func(c *Config) {
		c.MaxWait, c.Metrics.Interval, c.ResultsOn = time.Second, time.Millisecond, ResultsOnChild
	})
	now := time.Now().Truncate(time.Second)
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, now.Add(-40*time.Second), time.Second, repeat(busy, 41))))
	td := ptrace.NewTraces()
	request := vllmSpan(td, 7, now.Add(-30*time.Second), 0, 2, 20, 100)
	traceID, requestID := request.TraceID(), request.SpanID()
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return len(p.spans.AllTraces()) == 2 }, 5*time.Second, 10*time.Millisecond)
	child := p.spans.AllTraces()[1].ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	require.Equal(t, requestID, child.ParentSpanID())

	time.Sleep(2 * time.Millisecond)
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, now.Add(time.Second), time.Second, repeat(busy, 1))))
	md := p.points.AllMetrics()[len(p.points.AllMetrics())-1]
	seen := 0
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if ms.At(j).Type() != pmetric.MetricTypeHistogram {
				continue
			}
			dps := ms.At(j).Histogram().DataPoints()
			for k := range dps.Len() {
				exs := dps.At(k).Exemplars()
				for l := range exs.Len() {
					assert.Equal(t, traceID, exs.At(l).TraceID(), ms.At(j).Name())
					assert.Equal(t, child.SpanID(), exs.At(l).SpanID(), ms.At(j).Name())
					seen++
				}
			}
		}
	}
	assert.Positive(t, seen)
}

// A Triton ensemble request (TensorRT-LLM backend: preprocessing,
// tensorrt_llm, postprocessing) as src/tracer.cc in
// triton-inference-server/server exports it: the ensemble's model span
// (triton.trace_parent_id 0), and under it, for every model it calls, a
// model span whose triton.trace_parent_id is the ensemble's trace and a
// compute span (the decoupled tensorrt_llm model's execute returns as soon
// as the request is enqueued). It is one request: alone on the GPU, the
// ensemble's span takes all the energy its window drew. Until the composing
// models' spans were Aggregate, each counted as a request of its own: the
// ensemble's span got half (2,250 J), tensorrt_llm's the rest.
func TestATritonEnsembleIsOneRequest(t *testing.T) {
	p, now := oneBusyGPU(t)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "triton-inference-server")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	start := now.Add(-20 * time.Second)
	at := func(d time.Duration) pcommon.Timestamp { return pcommon.NewTimestampFromTime(start.Add(d)) }
	span := func(name string, id byte, parent byte, from, to time.Duration) ptrace.Span {
		s := spans.AppendEmpty()
		s.SetName(name)
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID(pcommon.TraceID{9, 1})
		s.SetSpanID(pcommon.SpanID{9, id})
		if parent != 0 {
			s.SetParentSpanID(pcommon.SpanID{9, parent})
		}
		s.SetStartTimestamp(at(from))
		s.SetEndTimestamp(at(to))
		return s
	}
	model := func(name string, id, parent byte, traceID, parentTrace int64, from, to time.Duration) {
		s := span(name, id, parent, from, to)
		a := s.Attributes()
		a.PutStr("triton.model_name", name)
		a.PutInt("triton.model_version", 1)
		a.PutInt("triton.trace_id", traceID)
		a.PutInt("triton.trace_parent_id", parentTrace)
		for _, e := range []struct {
			name string
			at   time.Duration
		}{{"REQUEST_START", from}, {"QUEUE_START", from + 20*time.Microsecond}, {"REQUEST_END", to}} {
			ev := s.Events().AppendEmpty()
			ev.SetName(e.name)
			ev.SetTimestamp(at(e.at))
		}
	}
	compute := func(id, parent byte, from, to time.Duration) {
		s := span("compute", id, parent, from, to)
		for _, e := range []struct {
			name string
			at   time.Duration
		}{{"COMPUTE_START", from}, {"COMPUTE_INPUT_END", from}, {"COMPUTE_OUTPUT_START", to}, {"COMPUTE_END", to}} {
			ev := s.Events().AppendEmpty()
			ev.SetName(e.name)
			ev.SetTimestamp(at(e.at))
		}
	}
	ms := time.Millisecond
	span("InferRequest", 1, 0, 0, 10*time.Second)
	model("ensemble", 2, 1, 7, 0, 0, 10*time.Second)
	model("preprocessing", 3, 2, 8, 7, 0, 100*ms)
	compute(4, 3, 1*ms, 99*ms)
	model("tensorrt_llm", 5, 2, 9, 7, 100*ms, 9900*ms)
	compute(6, 5, 101*ms, 110*ms)
	model("postprocessing", 7, 2, 10, 7, 9900*ms, 10*time.Second)
	compute(8, 7, 9901*ms, 9999*ms)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	ensemble := spanAttrs(t, p.spans, "ensemble")
	require.Len(t, ensemble, 1)
	assert.InDelta(t, 4500.0, ensemble[0]["gpuviz.energy"], 1e-6, "10 s at 450 W, the only request on the GPU")
	trt := spanAttrs(t, p.spans, "tensorrt_llm")
	require.Len(t, trt, 1)
	assert.Equal(t, "triton", trt[0]["gpuviz.request.family"], "the composing model's span is still enriched")
	assert.InDelta(t, 9.8*450, trt[0]["gpuviz.energy"], 1e-6, "what the GPU drew over its window, unshared, as a compute span's")
}

// gpuviz.gpu.bottleneck.state is 1 for the label the GPU is in now (its
// latest final bin's) and 0 for every other: a GPU memory-bound for 30 s,
// then idle for 20 s, is idle now though most of its time was memory-bound.
func TestBottleneckStateIsTheCurrentLabelAlone(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.Metrics.Interval = time.Millisecond })
	now := time.Now().Truncate(time.Second)
	from := now.Add(-50 * time.Second)
	idle := sample{powerW: 80, memUsed: 60e9}
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, from, time.Second, append(repeat(busy, 31), repeat(idle, 20)...))))
	// The books finalize on the processor's tick; each batch after it
	// flushes the derived metrics.
	var state map[string]int64
	var seconds map[string]float64
	require.Eventually(t, func() bool {
		assert.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, now.Add(time.Second), time.Second, repeat(idle, 1))))
		all := p.points.AllMetrics()
		state, seconds = bottleneckPoints(t, all[len(all)-1])
		return seconds[string(bottleneck.Idle)] > 15
	}, 10*time.Second, 50*time.Millisecond, "the idle 20 s booked")
	require.Len(t, state, len(bottleneck.Labels), "a state point for every label")
	assert.Greater(t, seconds[string(bottleneck.MemoryBound)], seconds[string(bottleneck.Idle)], "most of the time was memory-bound")
	for _, l := range bottleneck.Labels {
		want := int64(0)
		if l == bottleneck.Idle {
			want = 1
		}
		assert.Equal(t, want, state[string(l)], "state of %s", l)
	}
}

// bottleneckPoints reads GPU-a's gpuviz.gpu.bottleneck.state and .time
// points of md by label.
func bottleneckPoints(t *testing.T, md pmetric.Metrics) (map[string]int64, map[string]float64) {
	state, seconds := map[string]int64{}, map[string]float64{}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			m := ms.At(j)
			if m.Name() != "gpuviz.gpu.bottleneck.state" && m.Name() != "gpuviz.gpu.bottleneck.time" {
				continue
			}
			var dps pmetric.NumberDataPointSlice
			switch m.Type() {
			case pmetric.MetricTypeGauge:
				dps = m.Gauge().DataPoints()
			case pmetric.MetricTypeSum:
				dps = m.Sum().DataPoints()
			default:
				continue
			}
			for k := range dps.Len() {
				dp := dps.At(k)
				assert.Equal(t, "GPU-a", stringAttr(dp.Attributes(), "hw.id"))
				label := stringAttr(dp.Attributes(), "gpuviz.bottleneck")
				if m.Name() == "gpuviz.gpu.bottleneck.state" {
					state[label] = dp.IntValue()
				} else {
					seconds[label] = dp.DoubleValue()
				}
			}
		}
	}
	return state, seconds
}

// A GenAI span of kind CLIENT is the application's view of a request the
// server's span accounts for (README): over the same window on one GPU it
// is enriched with the window's statistics but carries no energy, and the
// server's span, the one request, takes all its window drew: 5 s at 450 W;
// the request histograms count the server's span alone.
func TestAClientSpanTakesNoEnergy(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.Metrics.Interval = time.Millisecond })
	now := time.Now().Truncate(time.Second)
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, now.Add(-30*time.Second), time.Second, repeat(busy, 31))))
	td := ptrace.NewTraces()
	start := now.Add(-20 * time.Second)
	vllmSpan(td, 1, start, 0, 1, 4, 100)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "chat-app")
	rs.Resource().Attributes().PutStr("host.name", "node-1")
	c := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	c.SetName("chat llama")
	c.SetKind(ptrace.SpanKindClient)
	c.SetTraceID(pcommon.TraceID{1, 1})
	c.SetSpanID(pcommon.SpanID{1, 9})
	c.SetStartTimestamp(pcommon.NewTimestampFromTime(start.Add(-100 * time.Millisecond)))
	c.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(5*time.Second + 100*time.Millisecond)))
	c.Attributes().PutStr("gen_ai.operation.name", "chat")
	c.Attributes().PutStr("gen_ai.request.model", "llama")
	c.Attributes().PutInt("gen_ai.usage.input_tokens", 512)
	c.Attributes().PutInt("gen_ai.usage.output_tokens", 100)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	client := spanAttrs(t, p.spans, "chat llama")
	require.Len(t, client, 1)
	assert.Equal(t, "genai", client[0]["gpuviz.request.family"])
	assert.InDelta(t, busy.util, client[0]["gpuviz.gpu.utilization.mean"], 1e-9, "enriched with its window's statistics")
	for _, k := range []string{"gpuviz.energy", "gpuviz.energy.source", "gpuviz.energy_per_output_token"} {
		assert.NotContains(t, client[0], k, "the server's span accounts for the energy")
	}
	server := spanAttrs(t, p.spans, "llm_request")
	require.Len(t, server, 1)
	assert.InDelta(t, 5*busy.powerW, server[0]["gpuviz.energy"], 1e-6, "the one request on the GPU")

	// Nor is it counted as a request: the request histograms count one.
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, now.Add(time.Second), time.Second, repeat(busy, 1))))
	all := p.points.AllMetrics()
	counts := map[string]uint64{}
	rms := all[len(all)-1].ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if ms.At(j).Type() == pmetric.MetricTypeHistogram {
				dps := ms.At(j).Histogram().DataPoints()
				for k := range dps.Len() {
					counts[ms.At(j).Name()] += dps.At(k).Count()
				}
			}
		}
	}
	assert.Equal(t, map[string]uint64{"gpuviz.request.energy": 1, "gpuviz.request.energy_per_output_token": 1, "gpuviz.request.gpu_busy_time": 1}, counts)
}

// Each phase span carries its own phase's energy, the one its request span
// records as gpuviz.phase.<phase>.energy; the phases, which partition the
// request's window, add up to the request's energy, and each has what its
// own stretch of the GPU's draw was.
func TestPhaseSpansCarryTheirPhasesEnergy(t *testing.T) {
	p, now := oneBusyGPU(t)
	td := ptrace.NewTraces()
	vllmSpan(td, 1, now.Add(-20*time.Second), 1, 1, 3, 100)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	req := spanAttrs(t, p.spans, "llm_request")
	require.Len(t, req, 1)
	total, ok := req[0]["gpuviz.energy"].(float64)
	require.True(t, ok)
	require.Positive(t, total)
	var sum float64
	for _, phase := range []string{"queue", "prefill", "decode"} {
		spans := spanAttrs(t, p.spans, "gpu."+phase)
		require.Len(t, spans, 1, phase)
		e, ok := spans[0]["gpuviz.energy"].(float64)
		require.True(t, ok, phase)
		assert.InDelta(t, req[0]["gpuviz.phase."+phase+".energy"], e, 1e-9, "%s: the phase span's energy is the request's record of its phase", phase)
		sum += e
	}
	assert.InDelta(t, total, sum, 1e-6, "the phases add up to the request")
	// Alone on a GPU drawing a steady 450 W, each phase that runs takes
	// what the GPU drew over it; the queue runs nothing and takes nothing.
	for phase, seconds := range map[string]float64{"queue": 0, "prefill": 1, "decode": 3} {
		assert.InDelta(t, seconds*busy.powerW, spanAttrs(t, p.spans, "gpu."+phase)[0]["gpuviz.energy"], 1e-6, phase)
	}
	assert.InDelta(t, 4*busy.powerW, total, 1e-6, "prefill and decode")
}

// A phase span gpu.<phase> lies over its phase alone (vLLM's phases follow
// one another from the request's start: queue 1 s, prefill 1 s, decode
// 3 s), under its request span on the same trace, and carries the phase's
// statistics the README lists, not the request's whole-window ones
// (coverage, utilisation max, busy time, memory peak).
func TestPhaseSpansSpanTheirPhases(t *testing.T) {
	p, now := oneBusyGPU(t)
	td := ptrace.NewTraces()
	start := now.Add(-20 * time.Second)
	request := vllmSpan(td, 1, start, 1, 1, 3, 100)
	traceID, requestID := request.TraceID(), request.SpanID()
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	want := map[string][2]time.Duration{"gpu.queue": {0, time.Second}, "gpu.prefill": {time.Second, 2 * time.Second}, "gpu.decode": {2 * time.Second, 5 * time.Second}}
	seen := 0
	for _, out := range p.spans.AllTraces() {
		spans := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
		for i := range spans.Len() {
			s := spans.At(i)
			w, ok := want[s.Name()]
			if !ok {
				continue
			}
			seen++
			assert.Equal(t, traceID, s.TraceID(), s.Name())
			assert.Equal(t, requestID, s.ParentSpanID(), s.Name())
			assert.Equal(t, pcommon.NewTimestampFromTime(start.Add(w[0])), s.StartTimestamp(), s.Name())
			assert.Equal(t, pcommon.NewTimestampFromTime(start.Add(w[1])), s.EndTimestamp(), s.Name())
			a := s.Attributes().AsRaw()
			assert.InDelta(t, busy.util, a["gpuviz.gpu.utilization.mean"], 1e-9, s.Name())
			assert.InDelta(t, busy.powerW, a["gpuviz.gpu.power.mean"], 1e-9, s.Name())
			for _, k := range []string{"gpuviz.coverage", "gpuviz.gpu.utilization.max", "gpuviz.gpu.busy_time", "gpuviz.gpu.memory.peak"} {
				assert.NotContains(t, a, k, "%s: the request span's", s.Name())
			}
		}
	}
	assert.Equal(t, len(want), seen)
	// The request span has them.
	req := spanAttrs(t, p.spans, "llm_request")[0]
	assert.InDelta(t, busy.memUsed, req["gpuviz.gpu.memory.peak"], 1)
	assert.InDelta(t, 5*busy.util, req["gpuviz.gpu.busy_time"], 1e-6)
}

// A TGI batch-level prefill step is Aggregate: it and its phase take what
// the GPU drew over them, unshared, whatever requests ran. Over 2 s of a
// GPU at a steady 450 W that is 900 J on the span, its prefill phase and
// its gpu.prefill span.
func TestAnAggregateSpansPhaseTakesWhatItsWindowDrew(t *testing.T) {
	p, now := oneBusyGPU(t)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "text-generation-inference.router")
	rs.Resource().Attributes().PutStr("host.name", "node-1")
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetName("prefill")
	s.SetTraceID(pcommon.TraceID{4, 1})
	s.SetSpanID(pcommon.SpanID{4, 2})
	start := now.Add(-20 * time.Second)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(2 * time.Second)))
	s.Attributes().PutStr("code.namespace", "text_generation_router_v3::backend")
	s.Attributes().PutInt("batch_size", 4)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	step := spanAttrs(t, p.spans, "prefill")
	require.Len(t, step, 1)
	assert.InDelta(t, 2*busy.powerW, step[0]["gpuviz.energy"], 1e-6)
	assert.InDelta(t, 2*busy.powerW, step[0]["gpuviz.phase.prefill.energy"], 1e-6)
	phase := spanAttrs(t, p.spans, "gpu.prefill")
	require.Len(t, phase, 1)
	assert.InDelta(t, 2*busy.powerW, phase[0]["gpuviz.energy"], 1e-6)
}

// A span that ends exactly on a bin's edge reads no bin after it: a GPU
// busy up to that instant and fuller from it (every kernel slot, more
// memory, more power) gives the span the busy stretch's statistics alone,
// its maximum and peak included.
func TestASpanEndingOnABinEdgeReadsNothingAfterIt(t *testing.T) {
	p := newPipelines(t, nil)
	now := time.Now().Truncate(time.Second)
	from := now.Add(-40 * time.Second)
	fuller := sample{util: 1, tensor: 0.2, dram: 0.8, powerW: 600, memUsed: 75e9}
	// Sample i describes the second before it: busy up to from+20s, fuller after.
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, from, time.Second, append(repeat(busy, 21), repeat(fuller, 20)...))))
	td := ptrace.NewTraces()
	// The span, and another request running on past its end in the
	// same release, so that the bins after the edge are read too.
	edge := vllmSpan(td, 1, from.Add(15*time.Second), 0, 1, 4, 100)
	vllmSpan(td, 2, from.Add(18*time.Second), 0, 1, 6, 100)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	var a map[string]any
	for _, out := range p.spans.AllTraces() {
		spans := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
		for i := range spans.Len() {
			if spans.At(i).SpanID() == edge.SpanID() {
				a = spans.At(i).Attributes().AsRaw()
			}
		}
	}
	require.NotNil(t, a)
	assert.InDelta(t, busy.util, a["gpuviz.gpu.utilization.mean"], 1e-9)
	assert.InDelta(t, busy.util, a["gpuviz.gpu.utilization.max"], 1e-9)
	assert.InDelta(t, busy.memUsed, a["gpuviz.gpu.memory.peak"], 1)
	assert.InDelta(t, busy.powerW, a["gpuviz.gpu.power.mean"], 1e-9)
}

// A span that starts exactly on a bin's edge reads no bin before it: a GPU
// fuller up to that instant (every kernel slot, more memory, more power)
// and busy from it gives the span the busy stretch's statistics alone, its
// maximum and peak included.
func TestASpanStartingOnABinEdgeReadsNothingBeforeIt(t *testing.T) {
	p := newPipelines(t, nil)
	now := time.Now().Truncate(time.Second)
	from := now.Add(-40 * time.Second)
	fuller := sample{util: 1, tensor: 0.2, dram: 0.8, powerW: 600, memUsed: 75e9}
	// Sample i describes the second before it: fuller up to from+20s, busy after.
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, from, time.Second, append(repeat(fuller, 21), repeat(busy, 20)...))))
	td := ptrace.NewTraces()
	// The span, and another request running before its start in the same
	// release, so that the bins before the edge are read too.
	vllmSpan(td, 1, from.Add(15*time.Second), 0, 1, 6, 100)
	edge := vllmSpan(td, 2, from.Add(20*time.Second), 0, 1, 4, 100)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return p.spans.SpanCount() > 0 }, 5*time.Second, 10*time.Millisecond)

	var a map[string]any
	for _, out := range p.spans.AllTraces() {
		forEachSpan(out, func(sp ptrace.Span) {
			if sp.SpanID() == edge.SpanID() {
				a = sp.Attributes().AsRaw()
			}
		})
	}
	require.NotNil(t, a)
	assert.InDelta(t, busy.util, a["gpuviz.gpu.utilization.mean"], 1e-9)
	assert.InDelta(t, busy.util, a["gpuviz.gpu.utilization.max"], 1e-9)
	assert.InDelta(t, busy.memUsed, a["gpuviz.gpu.memory.peak"], 1)
	assert.InDelta(t, busy.powerW, a["gpuviz.gpu.power.mean"], 1e-9)
}
