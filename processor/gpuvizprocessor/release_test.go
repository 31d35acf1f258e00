package gpuvizprocessor

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/featuregate"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/xpdata/pref"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadatatest"
)

// spanCounter records, each time a batch is handed on, how many spans
// every batch of the release has at that moment.
type spanCounter struct {
	batches []ptrace.Traces
	seen    [][]int
}

func (s *spanCounter) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (s *spanCounter) ConsumeTraces(context.Context, ptrace.Traces) error {
	counts := make([]int, len(s.batches))
	for i, td := range s.batches {
		counts[i] = td.SpanCount()
	}
	s.seen = append(s.seen, counts)
	return nil
}

// sendThreeBatches gives c a GPU's first 21 s from base and then, from 21
// s on and apart from each other, three batches of one vLLM span each,
// ending at 2, 3 and 4 s, for next; it returns the batches.
func sendThreeBatches(t *testing.T, c *core, now *time.Time, base time.Time, apart time.Duration, next consumer.Traces) []ptrace.Traces {
	t.Helper()
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	var out []ptrace.Traces
	for i := range 3 {
		*now = base.Add(21*time.Second + time.Duration(i)*apart)
		td := ptrace.NewTraces()
		vllmSpan(td, byte(i+1), base.Add(time.Duration(2+i)*time.Second), 0.2, 0.5, 4, 100)
		out = append(out, td)
		require.NoError(t, c.consumeTraces(context.Background(), td, next, started))
	}
	return out
}

// A release computes its settle group's results together but writes them
// (phase spans, attributes) batch by batch as each leaves: the batches
// still to go are as they came, so a release of many batches never holds
// all their enriched output at once.
func TestReleaseWritesEachBatchAsItLeaves(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, nil)
	next := &spanCounter{}
	next.batches = sendThreeBatches(t, c, now, base, 0, next)
	for step := range 8 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	// One llm_request span came in each batch; each leaves with its three
	// phase spans (queue, prefill, decode).
	require.Len(t, next.seen, 3, "one release of the three batches")
	assert.Equal(t, [][]int{{4, 1, 1}, {4, 4, 1}, {4, 4, 4}}, next.seen)
}

// Each batch's hold is recorded once, when it is first handed on: from
// when it came to the release of its settle group.
func TestEachBatchsHoldIsRecorded(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	next := &spanCounter{}
	sendThreeBatches(t, c, now, base, time.Second, next)
	// The settle group opened with the first batch, at 21 s, and closes
	// 5 s later: the batches that came at 21, 22 and 23 s leave at 26 s.
	for step := range 8 {
		c.tick(base.Add(time.Duration(21+step) * time.Second))
	}
	require.Len(t, next.seen, 3)
	metadatatest.AssertEqualProcessorGpuvizHoldDuration(t, tel, []metricdata.HistogramDataPoint[float64]{{
		Count:        3,
		Sum:          12,
		Min:          metricdata.NewExtrema(3.0),
		Max:          metricdata.NewExtrema(5.0),
		Bounds:       []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
		BucketCounts: []uint64{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	}}, metricdatatest.IgnoreTimestamp())
}

// The processor's own counters follow a batch: held, it counts every span
// it came with in pending_spans; released, its inference spans count as
// enriched and their phases as phase spans added, and nothing is pending.
func TestAHeldBatchIsCountedPendingThenEnriched(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	vllmSpan(td, 2, base.Add(6*time.Second), 0, 0.5, 3, 50) // no queue: two phases
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().AppendEmpty().SetName("GET /health")
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	pending := func(n int64) {
		t.Helper()
		metadatatest.AssertEqualProcessorGpuvizPendingSpans(t, tel, []metricdata.DataPoint[int64]{{Value: n}}, metricdatatest.IgnoreTimestamp())
	}
	pending(3)
	for step := range 8 {
		c.tick(base.Add(time.Duration(21+step) * time.Second))
	}
	require.Equal(t, 3+3+2, sink.SpanCount())
	pending(0)
	metadatatest.AssertEqualProcessorGpuvizSpansEnriched(t, tel, []metricdata.DataPoint[int64]{{Value: 2}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorGpuvizPhaseSpansAdded(t, tel, []metricdata.DataPoint[int64]{{Value: 3 + 2}}, metricdatatest.IgnoreTimestamp())
}

// gcWatcher, each time a batch is handed on, collects garbage and records
// which of the release's earlier batches are still alive. It keeps no
// batch itself.
type gcWatcher struct {
	held  []weak.Pointer[heldBatch]
	alive [][]bool
}

func (w *gcWatcher) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (w *gcWatcher) ConsumeTraces(context.Context, ptrace.Traces) error {
	runtime.GC()
	alive := make([]bool, len(w.alive))
	for i := range alive {
		alive[i] = w.held[i].Value() != nil
	}
	w.alive = append(w.alive, alive)
	return nil
}

// A batch handed on is let go of at once, not when the whole release is
// done: with the phase spans and attributes written on it, a release's
// batches would otherwise all stay alive until the last has left.
func TestReleaseLetsGoOfEachBatchItHandsOn(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, nil)
	next := &gcWatcher{}
	sendThreeBatches(t, c, now, base, 0, next)
	c.spans.mu.Lock()
	for _, b := range c.spans.hold.batches {
		next.held = append(next.held, weak.Make(b))
	}
	c.spans.mu.Unlock()
	require.Len(t, next.held, 3)
	for step := range 8 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	assert.Equal(t, [][]bool{{}, {false}, {false, false}}, next.alive)
}

// gate blocks the first batch handed to it until open is closed, and logs
// when it let it through.
type gate struct {
	entered, open chan struct{}
	log           func(string)
	once          bool
}

func (g *gate) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (g *gate) ConsumeTraces(context.Context, ptrace.Traces) error {
	if !g.once {
		g.once = true
		close(g.entered)
		<-g.open
		g.log("handed on")
	}
	return nil
}

// A pipeline's Shutdown waits for a release the loop is in the middle of:
// the batches it took are out of the hold, and once Shutdown has returned
// the next consumer shuts down (a batch processor then takes nothing, and
// the loop would block on it for good).
func TestShutdownWaitsForTheLoopsRelease(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	fac := &factory{cores: map[*Config]*core{}}
	var mu sync.Mutex
	var order []string
	log := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	next := &gate{entered: make(chan struct{}), open: make(chan struct{}), log: log}
	tp, err := fac.createTraces(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, next)
	require.NoError(t, err)
	c := fac.cores[cfg]
	now := base.Add(21 * time.Second)
	c.now = func() time.Time { return now }
	c.ticker = func() (<-chan time.Time, func()) { return nil, func() {} }
	require.NoError(t, tp.Start(context.Background(), componenttest.NewNopHost()))
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	for i := range 2 {
		td := ptrace.NewTraces()
		vllmSpan(td, byte(i+1), base.Add(time.Duration(2+i)*time.Second), 0.2, 0.5, 4, 100)
		require.NoError(t, tp.ConsumeTraces(context.Background(), td))
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		for step := range 8 { // as the loop would
			c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
		}
	})
	<-next.entered // the release has taken both batches and hands on the first
	wg.Go(func() {
		assert.NoError(t, tp.Shutdown(context.Background()))
		log("shut down")
	})
	time.Sleep(100 * time.Millisecond) // room for a Shutdown that does not wait to return
	close(next.open)
	wg.Wait()
	assert.Equal(t, []string{"handed on", "shut down"}, order)
}

// The results buffer is reused from release to release while spans are
// held, and let go once a release leaves nothing held, so that an idle
// collector does not keep a burst's results.
func TestTheResultsBufferIsLetGoWhenNothingIsHeld(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, nil)
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 40)))
	next := &spanCounter{}
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(2*time.Second), 0.2, 0.5, 4, 100)
	require.NoError(t, c.consumeTraces(context.Background(), td, next, started))
	// A second batch arrives after the first's settle window: it is
	// still held when the first is released.
	*now = base.Add(21*time.Second + c.cfg.Attribution.SettleWindow + time.Second)
	later := ptrace.NewTraces()
	vllmSpan(later, 2, base.Add(3*time.Second), 0.2, 0.5, 4, 100)
	require.NoError(t, c.consumeTraces(context.Background(), later, next, started))

	c.spans.release(*now, func(*heldBatch) bool { return false })
	require.Len(t, next.seen, 1, "the first batch left")
	assert.NotZero(t, cap(c.spans.results), "kept while a span is held")
	*now = now.Add(c.cfg.Attribution.SettleWindow + time.Second)
	c.spans.release(*now, func(*heldBatch) bool { return false })
	require.Len(t, next.seen, 2, "the second batch left")
	assert.Zero(t, cap(c.spans.results), "let go: nothing is held")
}

// Under pdata.useProtoPooling the service returns a batch's memory to the
// pool once the first consumer returns (service/internal/refconsumer),
// unless a component that keeps the batch references it. A held batch is
// referenced until it is handed on, or refused for good, then let go: the
// next consumer sees it whole and enriched, and the pool gets it back after.
func TestAHeldBatchIsReferencedUnderProtoPooling(t *testing.T) {
	gate := pref.UseProtoPooling
	was := gate.IsEnabled()
	require.NoError(t, featuregate.GlobalRegistry().Set(gate.ID(), true))
	t.Cleanup(func() { require.NoError(t, featuregate.GlobalRegistry().Set(gate.ID(), was)) })

	for name, answer := range map[string]error{
		"accepted":         nil,
		"refused for good": consumererror.NewPermanent(errors.New("no")),
	} {
		t.Run(name, func(t *testing.T) {
			base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
			c, now, _ := virtualCore(t, nil)
			*now = base.Add(21 * time.Second)
			c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
			var spans int
			var energy bool
			next, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
				spans = td.SpanCount()
				_, energy = td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().Get(attrEnergy)
				return answer
			})
			require.NoError(t, err)
			td := ptrace.NewTraces()
			vllmSpan(td, 1, base.Add(2*time.Second), 0.2, 0.5, 4, 100)
			// What the service's pipeline does around its first consumer.
			require.True(t, pref.MarkPipelineOwnedTraces(td))
			require.NoError(t, c.consumeTraces(context.Background(), td, next, started))
			pref.UnrefTraces(td)
			for step := range 8 {
				c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
			}
			assert.Equal(t, 4, spans, "the request span and its three phase spans")
			assert.True(t, energy, "the request span enriched")
			assert.Zero(t, td.SpanCount(), "the last reference let go: the batch went back to the pool")
		})
	}
}

// While a span's GPUs measure activity their books have not learned to
// read yet, its batch is held (attribution.warmup_wait) rather than split by
// the arrival curve; it leaves once warmup_wait has passed since it arrived
// or since its GPUs first had to wait, learned or not, and is not
// held at all while the hold is more than half full, where the GPUs
// measure no activity, or where too few requests came, in too few bins,
// for the books to learn from.
func TestABatchIsHeldWhileItsGPUsWarmUp(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		maxPending int
		noGPM      bool
		requests   int     // 0.6 s apart: 20 teach the arrival curve
		decode     float64 // s: 5 requests decoding 0.3 s are busy in 34 bins, 2 decoding 12 s in 133
		data       int     // s of GPU samples: 70 s put the bins finalize_after behind the newest energy
		held       bool
	}{
		{"held", 1000, false, 20, 0.3, 30, true},
		{"held, a few long requests", 1000, false, 2, 12, 30, true},
		{"learned", 1000, false, 20, 0.3, 70, false},
		{"hold half full", 40, false, 20, 0.3, 30, true},
		{"hold too full", 39, false, 20, 0.3, 30, false},
		{"no activity measured", 1000, true, 20, 0.3, 30, false},
		{"too few requests", 1000, false, 5, 0.3, 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now, sink := virtualCore(t, func(cfg *Config) {
				cfg.Attribution.WarmupWait = 45 * time.Second
				cfg.MaxPendingSpans = tc.maxPending
			})
			md := gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, tc.data))
			if tc.noGPM {
				md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().RemoveIf(func(m pmetric.Metric) bool {
					return m.Name() == "nvidia.gpu.tensor.activity" || m.Name() == "nvidia.gpu.dram.activity"
				})
			}
			*now = base.Add(17 * time.Second)
			c.ingest.consume(context.Background(), md)
			td := ptrace.NewTraces()
			for i := range tc.requests {
				vllmSpan(td, byte(i+1), base.Add(3*time.Second+time.Duration(i)*600*time.Millisecond), 0.2, 0.5, tc.decode, 50)
			}
			require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
			tick := func(from, to int) {
				for s := from; s <= to; s++ {
					c.tick(base.Add(time.Duration(s) * time.Second))
				}
			}
			tick(18, 25)
			if !tc.held {
				assert.Equal(t, 4*tc.requests, sink.SpanCount(), "not held")
				return
			}
			tick(26, 61)
			assert.Zero(t, sink.SpanCount(), "held while warming up")
			tick(62, 66)
			assert.Equal(t, 4*tc.requests, sink.SpanCount(), "let go once warmup_wait has passed since it arrived")
		})
	}
}

// A span waits past its settle window, for its running time after it
// ended (past max_wait if need be, never past the longest hold, 60 s here;
// its queue time not counted), where its GPUs' forecasts of the weight still to
// come have fallen short: here because a request that ran beside an
// earlier one reported only after that one was released. Where every
// request had reported, it leaves as its window closes, unless its GPU
// waited for its host through its bins. A first request teaches the
// activity fit, whose forecasts are the ones scored.
func TestSpansWaitLongerWhereTheForecastsFellShort(t *testing.T) {
	for _, tc := range []struct {
		name      string
		late      bool
		gpu       sample  // what the GPU does throughout
		pending   int     // max_pending_spans; 0: the default
		running   float64 // the last span's running time, after 5 s queued; 0: 40 s
		leavesAtS int
	}{
		// It waits its 40 s of running time, past max_wait (20 s).
		{"a neighbour reported late", true, busy, 0, 0, 190},
		{"every neighbour on time", false, busy, 0, 0, 155},
		// Running 70 s, it waits the longest hold after it came.
		{"a neighbour reported late, a request running past the longest hold", true, busy, 0, 70, 210},
		// Where the GPU waits for its host through its bins, the split is
		// by time present, which only the arrival curve forecasts: the
		// span waits its running time too.
		{"every neighbour on time, the GPU waiting", false, starved, 0, 0, 190},
		// One span held fills the hold past half: nothing waits then.
		{"a neighbour reported late, the hold over half full", true, busy, 1, 0, 155},
		{"the GPU waiting, the hold over half full", false, starved, 1, 0, 155},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
			c, now, _ := virtualCore(t, func(cfg *Config) {
				// Forecasts are scored 60 s on (the longest hold),
				// inside the 65 s window.
				cfg.Attribution.FinalizeAfter = 5 * time.Second
				cfg.Attribution.Horizon = 65 * time.Second
				if tc.pending > 0 {
					cfg.MaxPendingSpans = tc.pending
				}
			})
			metrics := gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(tc.gpu, 220))
			sink := &releaseClock{now: now, trace: 3}
			send := func(trace byte, start, queue, decode float64, tokens int64) {
				td := ptrace.NewTraces()
				vllmSpan(td, trace, base.Add(time.Duration(start*float64(time.Second))), queue, 0.5, decode, tokens)
				require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
			}
			for s := range 220 {
				*now = base.Add(time.Duration(s) * time.Second)
				c.ingest.consume(context.Background(), pointsWhere(metrics, (*now).Equal))
				switch {
				case s == 15 || s == 30:
					// 0-15 and 15-30 s, 20 tokens a second: the fit learns
					// from the bins not yet final when each arrives.
					send(byte(s), float64(s-15), 0, 14.5, 290)
				case s == 53:
					send(1, 41, 0, 10.5, 210) // 41-52 s
				case s == 71 && tc.late:
					send(2, 41, 0, 28.5, 570) // 41-70 s
				case s == 150:
					// Queued 5 s, then running (40 s: 110-150 s).
					running := cmp.Or(tc.running, 40)
					send(3, 145-running, 5, running-0.5, int64(20*running))
				}
				c.tick(*now)
			}
			require.False(t, sink.at.IsZero(), "the last span was handed on")
			assert.Equal(t, base.Add(time.Duration(tc.leavesAtS)*time.Second), sink.at)
		})
	}
}

// A batch leaves once its last span's GPU energy is in, however many of
// its spans were ready at an earlier tick: the hold goes on from the first
// span still waiting (heldBatch.passed), and must not pass over it. The
// GPU's samples stop at 30 s and resume at 50 s: a span ending at 20 s is
// ready at 38 s, as its settle window closes; one ending at 33 s waits for
// the samples after the gap.
func TestABatchLeavesWhenItsLastSpanIsReady(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	leaves := func(spans ...byte) time.Time {
		c, now, _ := virtualCore(t, nil)
		metrics := gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 80))
		sink := &releaseClock{now: now, trace: spans[len(spans)-1]}
		for s := range 80 {
			*now = base.Add(time.Duration(s) * time.Second)
			if s <= 30 || s >= 50 {
				c.ingest.consume(context.Background(), pointsWhere(metrics, (*now).Equal))
			}
			if s == 33 {
				td := ptrace.NewTraces()
				for _, trace := range spans {
					start := map[byte]float64{1: 10, 2: 23}[trace]
					vllmSpan(td, trace, base.Add(time.Duration(start*float64(time.Second))), 0, 0.5, 9.5, 190)
				}
				require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
			}
			c.tick(*now)
		}
		require.False(t, sink.at.IsZero(), "handed on")
		return sink.at
	}
	resumed := base.Add(50 * time.Second)
	assert.True(t, leaves(1).Before(resumed), "the span ending at 20 s does not wait for the gap")
	late := leaves(2)
	assert.False(t, late.Before(resumed), "the span ending at 33 s waits for the samples after the gap")
	assert.Equal(t, late, leaves(1, 2), "the batch leaves with its last span")
}

// releaseClock records when the span of trace is handed on.
type releaseClock struct {
	now   *time.Time
	trace byte
	at    time.Time
}

func (r *releaseClock) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (r *releaseClock) ConsumeTraces(_ context.Context, td ptrace.Traces) error {
	forEachSpan(td, func(sp ptrace.Span) {
		if sp.Name() == "llm_request" && sp.TraceID()[0] == r.trace {
			r.at = *r.now
		}
	})
	return nil
}

// pointsWhere is md with only its data points whose timestamp keep says.
func pointsWhere(md pmetric.Metrics, keep func(time.Time) bool) pmetric.Metrics {
	out := pmetric.NewMetrics()
	md.CopyTo(out)
	other := func(dp pmetric.NumberDataPoint) bool { return !keep(dp.Timestamp().AsTime()) }
	for _, rm := range out.ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					m.Gauge().DataPoints().RemoveIf(other)
				case pmetric.MetricTypeSum:
					m.Sum().DataPoints().RemoveIf(other)
				}
			}
		}
	}
	return out
}

// childCore is a virtual core with results_on: child that has seen 21 s
// of GPU-a busy on host from base, the clock at their end.
func childCore(t *testing.T, host string) (*core, time.Time, *consumertest.TracesSink) {
	t.Helper()
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.ResultsOn = ResultsOnChild })
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics(host, "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	return c, base, sink
}

// With results_on: child a batch the next consumer refuses is refused to
// the sender and nothing of it is held: its retry is admitted once.
func TestResultsOnAChildSpanRefusedAtOnceHoldNothing(t *testing.T) {
	c, base, sink := childCore(t, "")
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(2*time.Second), 0.2, 0.5, 4, 100)
	refused := errors.New("queue full")
	require.ErrorIs(t, c.consumeTraces(context.Background(), td, consumertest.NewErr(refused), started), refused)
	assert.Zero(t, c.spans.hold.n, "nothing held")

	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	assert.Equal(t, 1, c.spans.hold.n, "the retry's gpu.request")
	require.Len(t, sink.AllTraces(), 1)
	assert.Equal(t, 1, sink.AllTraces()[0].SpanCount(), "the request span, on at once")
	for step := range 8 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	require.Len(t, sink.AllTraces(), 2)
	assert.Len(t, spanAttrs(t, sink, "gpu.request"), 1)
	assert.Zero(t, c.spans.hold.n)
}

// With results_on: child a span that is not enriched (here: no GPU on its
// host) leaves no child: its gpu.request goes nowhere, and a batch of only
// such children is not handed on.
func TestResultsOnAChildSpanNoChildWithoutResults(t *testing.T) {
	c, base, sink := childCore(t, "node-1")
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(2*time.Second), 0.2, 0.5, 4, 100)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	elsewhere := ptrace.NewTraces()
	vllmSpan(elsewhere, 2, base.Add(2*time.Second), 0.2, 0.5, 4, 100)
	elsewhere.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-2")
	elsewhere.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	for step := range 30 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	assert.Zero(t, c.spans.hold.n)
	require.Len(t, sink.AllTraces(), 2, "the spans as they came, then the one child with results")
	children := spanAttrs(t, sink, "gpu.request")
	require.Len(t, children, 1)
	assert.Equal(t, []any{"GPU-a"}, children[0]["gpuviz.gpu.ids"])
	assert.Equal(t, 1, sink.AllTraces()[1].ResourceSpans().Len(), "no resource left without spans")

	// A batch whose only span gets no results sends nothing more.
	lone := ptrace.NewTraces()
	vllmSpan(lone, 3, base.Add(2*time.Second), 0.2, 0.5, 4, 100)
	lone.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-2")
	require.NoError(t, c.consumeTraces(context.Background(), lone, sink, started))
	for step := range 30 {
		c.tick(base.Add(51*time.Second + time.Duration(step)*time.Second))
	}
	assert.Zero(t, c.spans.hold.n)
	assert.Len(t, sink.AllTraces(), 3, "the lone span only")
}

// A span waits for the energy to the end of the books' bin it ends in, not
// only to its own end: a span ending at 10.03 s, with the counter read at
// 10.05 s, waits for the next reading (11.05 s) and gets its last bin,
// as when both had come at once.
func TestASpanWaitsForItsLastBinsEnergy(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	run := func(early int) float64 {
		c, now, sink := virtualCore(t, nil)
		*now = base.Add(12 * time.Second)
		// Samples at 0.05 s, 1.05 s, ..., 11.05 s; the first early ones
		// before the span, the rest after a tick.
		all := gpuMetrics("", "GPU-a", 0, base.Add(50*time.Millisecond), time.Second, repeat(busy, 12))
		c.ingest.consume(context.Background(), pointsWhere(all, base.Add(time.Duration(early)*time.Second).After))
		td := ptrace.NewTraces()
		vllmSpan(td, 1, base.Add(9530*time.Millisecond), 0, 0, 0.5, 20) // [9.53 s, 10.03 s]
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 8 {
			c.tick(base.Add(12*time.Second + time.Duration(step)*time.Second))
		}
		if early < 12 {
			assert.Zero(t, sink.SpanCount(), "waits for the energy past 10.1 s")
			c.ingest.consume(context.Background(), pointsWhere(all, func(ts time.Time) bool { return !ts.Before(base.Add(time.Duration(early) * time.Second)) }))
			c.tick(base.Add(20 * time.Second))
		}
		return spanEnergies(t, sink)[1]
	}
	assert.InDelta(t, run(12), run(11), 1e-6)
}
