package gpuvizprocessor

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadatatest"
)

// sharedPair is one processor ID in a traces and a metrics pipeline, both
// started, sharing one core on a virtual clock whose loop never ticks by
// itself.
type sharedPair struct {
	fac  *factory
	cfg  *Config
	c    *core
	tp   processor.Traces
	mp   processor.Metrics
	sink *consumertest.TracesSink
	now  *time.Time
}

func newSharedPair(t *testing.T, tune func(*Config)) *sharedPair {
	t.Helper()
	cfg := virtualConfig(t, tune)
	p := &sharedPair{fac: &factory{cores: map[*Config]*core{}}, cfg: cfg, sink: new(consumertest.TracesSink), now: new(time.Time)}
	set := processortest.NewNopSettings(metadata.Type)
	var err error
	p.tp, err = p.fac.createTraces(context.Background(), set, cfg, p.sink)
	require.NoError(t, err)
	p.mp, err = p.fac.createMetrics(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	p.c = p.fac.cores[cfg]
	p.c.now = func() time.Time { return *p.now }
	p.c.ticker = func() (<-chan time.Time, func()) { return nil, func() {} }
	require.NoError(t, p.tp.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, p.mp.Start(context.Background(), componenttest.NewNopHost()))
	return p
}

// counted sums a counter of the processor's own telemetry; 0 when it was
// never recorded.
func counted(t *testing.T, tel *componenttest.Telemetry, name string) int64 {
	t.Helper()
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		n += dp.Value
	}
	return n
}

// A batch reaching the traces side after its Shutdown began, while the
// metrics side of the same ID still runs the core's loop, is not left in a
// hold that nothing will release for its pipeline: it is handed on at once.
func TestABatchArrivingAsItsPipelineShutsDownIsHandedOn(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	p := newSharedPair(t, nil)
	*p.now = base.Add(21 * time.Second)
	p.c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))

	require.NoError(t, p.tp.Shutdown(context.Background()))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	require.NoError(t, p.tp.ConsumeTraces(context.Background(), td))
	assert.Zero(t, p.c.spans.pending(), "nothing held for a pipeline that shut down")
	require.Len(t, spanAttrs(t, p.sink, "llm_request"), 1, "handed on, enriched")
	require.NoError(t, p.mp.Shutdown(context.Background()))
}

// One processor ID in two traces pipelines: the Shutdown of one lets go
// of its own pipeline's held batches, not the other's, which still wait
// for their GPUs' data.
func TestShutdownFlushesOnlyItsOwnPipelinesBatches(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	p := newSharedPair(t, nil)
	other := new(consumertest.TracesSink)
	tp2, err := p.fac.createTraces(context.Background(), processortest.NewNopSettings(metadata.Type), p.cfg, other)
	require.NoError(t, err)
	require.NoError(t, tp2.Start(context.Background(), componenttest.NewNopHost()))
	*p.now = base.Add(21 * time.Second)
	p.c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(18*time.Second), 0.5, 0.5, 3, 50) // ends at 22 s, past the GPU's data
	require.NoError(t, tp2.ConsumeTraces(context.Background(), td))

	require.NoError(t, p.tp.Shutdown(context.Background()))
	assert.Equal(t, 1, p.c.spans.pending(), "the other pipeline's batch still held")
	assert.Zero(t, other.SpanCount())
	require.NoError(t, tp2.Shutdown(context.Background()))
	assert.Len(t, spanAttrs(t, other, "llm_request"), 1, "let go by its own pipeline's Shutdown")
	require.NoError(t, p.mp.Shutdown(context.Background()))
}

// Shutdown is safe on a component already shut down: the core stays with
// the side still using it, and goes with the last.
func TestShutdownTwiceLeavesTheCoreToTheOtherSide(t *testing.T) {
	p := newSharedPair(t, nil)
	require.NoError(t, p.tp.Shutdown(context.Background()))
	require.NoError(t, p.tp.Shutdown(context.Background()))
	_, ok := p.fac.cores[p.cfg]
	assert.True(t, ok, "the metrics side still uses the core")
	assert.Equal(t, 1, p.c.running, "the metrics side still runs it")
	require.NoError(t, p.mp.Shutdown(context.Background()))
	require.NoError(t, p.mp.Shutdown(context.Background()))
	_, ok = p.fac.cores[p.cfg]
	assert.False(t, ok, "the last user let go of it")
	assert.Zero(t, p.c.users)
	assert.ErrorIs(t, p.tp.Start(context.Background(), componenttest.NewNopHost()), errStartAfterShutdown)
}

// A batch the next consumer refuses (retryably) is offered again within
// release_retry although its phase spans made it four times the spans it
// was admitted with: it counts against max_pending_spans as admitted.
func TestARefusedBatchIsRetriedAtItsAdmittedSize(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, func(cfg *Config) { cfg.MaxPendingSpans = 2 })
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	next := &flaky{refuse: 1, err: errors.New("queue full")}
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	require.NoError(t, c.consumeTraces(context.Background(), td, next, started))
	for step := range 12 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	assert.Len(t, next.seen, 2, "refused once, offered again")
	require.Len(t, next.AllTraces(), 1, "taken the second time")
	assert.Equal(t, 1+3, next.AllTraces()[0].SpanCount(), "the request and its phase spans")
	assert.Zero(t, c.spans.pending())
}

// A batch the next consumer keeps refusing (retryably) is offered again at
// each tick until release_retry has passed since its first refusal, then
// counted refused and let go: the hold does not keep it for ever.
func TestARefusedBatchIsRetriedUntilReleaseRetry(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), func(cfg *Config) { cfg.ReleaseRetry = 5 * time.Second })
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	next := &flaky{refuse: math.MaxInt, err: errors.New("queue full")}
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	require.NoError(t, c.consumeTraces(context.Background(), td, next, started))
	for step := range 20 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	assert.Equal(t, 1+5, len(next.seen), "offered at its release and at each tick of the 5 s after")
	assert.Zero(t, c.spans.pending(), "let go")
	assert.Equal(t, int64(1+3), counted(t, tel, "otelcol_processor_gpuviz_spans_refused"), "the request and its phase spans")
}

// Where no release loop runs for its pipeline, a batch is released by the
// call that brought it, and the next consumer's refusal is returned to the
// sender (and counted), not swallowed.
func TestARefusalOfABatchReleasedAtOnceIsReturned(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	refused := errors.New("queue full")
	next := &flaky{refuse: 1, err: refused}
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	require.ErrorIs(t, c.consumeTraces(context.Background(), td, next, notStarted), refused)
	assert.Len(t, next.seen, 1)
	assert.Zero(t, c.spans.pending(), "nothing left held")
	assert.Equal(t, int64(1+3), counted(t, tel, "otelcol_processor_gpuviz_spans_refused"))
}

// Spans passed through un-enriched are counted once the next consumer has
// taken them: a refusal goes back to the sender, and its retries are not
// counted again.
func TestPassedThroughSpansAreCountedOnceTaken(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, reason string
		tune         func(*Config)
		spans        int // per batch, vLLM requests
		malformed    bool
		metrics      bool
	}{
		{name: "overflow", reason: "overflow", tune: func(cfg *Config) { cfg.MaxPendingSpans = 1 }, spans: 2, metrics: true},
		{name: "overflow, results on a child span", reason: "overflow", tune: func(cfg *Config) {
			cfg.MaxPendingSpans, cfg.ResultsOn = 1, ResultsOnChild
		}, spans: 2, metrics: true},
		{name: "no_gpu", reason: "no_gpu", spans: 1},
		{name: "malformed", reason: "malformed_negative_latency", malformed: true, metrics: true},
		// The request is held as its child span; the batch went on at once.
		{name: "malformed, results on a child span", reason: "malformed_negative_latency",
			tune: func(cfg *Config) { cfg.ResultsOn = ResultsOnChild }, spans: 1, malformed: true, metrics: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel := componenttest.NewTelemetry()
			t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
			c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), tc.tune)
			*now = base.Add(21 * time.Second)
			if tc.metrics {
				c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
			}
			next := &flaky{refuse: 2, err: errors.New("queue full")}
			td := ptrace.NewTraces()
			for i := range tc.spans {
				vllmSpan(td, byte(i+1), base.Add(5*time.Second), 0.5, 0.5, 3, 50)
			}
			if tc.malformed {
				vllmSpan(td, 9, base.Add(5*time.Second), 0.5, 0.5, 3, 50).Attributes().PutDouble("gen_ai.latency.time_in_queue", -1)
			}
			want := max(tc.spans, 1)
			if tc.malformed {
				want = 1
			}
			for range 3 { // the sender retries until taken
				if err := c.consumeTraces(context.Background(), td, next, started); err == nil {
					break
				}
			}
			require.Len(t, next.seen, 3)
			m, err := tel.GetMetric("otelcol_processor_gpuviz_spans_unenriched")
			require.NoError(t, err)
			dps := m.Data.(metricdata.Sum[int64]).DataPoints
			require.Len(t, dps, 1)
			reason, _ := dps[0].Attributes.Value("reason")
			assert.Equal(t, tc.reason, reason.AsString())
			assert.Equal(t, int64(want), dps[0].Value, "counted once")
		})
	}
}

// Traces, metrics, the release loop and both Shutdowns at once, for the
// race detector; every request span accepted comes out exactly once.
func TestBothSidesAndTheLoopAtOnce(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(base.Add(21 * time.Second).UnixNano())
	p := newSharedPair(t, func(cfg *Config) {
		cfg.Metrics.Interval = time.Millisecond
		cfg.Attribution.SettleWindow = 500 * time.Millisecond
		cfg.MaxWait = time.Second
	})
	p.c.now = func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	ctx := context.Background()
	require.NoError(t, p.mp.ConsumeMetrics(ctx, gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21))))
	var wg sync.WaitGroup
	const n = 200
	wg.Go(func() {
		for i := range n {
			td := ptrace.NewTraces()
			vllmSpan(td, byte(i), base.Add(time.Duration(5+i/20)*time.Second), 0.1, 0.2, 0.5, 20)
			assert.NoError(t, p.tp.ConsumeTraces(ctx, td))
		}
	})
	wg.Go(func() {
		for i := range 100 {
			md := gpuMetrics("", "GPU-a", 0, base.Add(time.Duration(21+i)*time.Second), time.Second, repeat(busy, 1))
			assert.NoError(t, p.mp.ConsumeMetrics(ctx, md))
			clock.Add(int64(100 * time.Millisecond))
		}
	})
	wg.Go(func() {
		for range 300 {
			p.c.tick(p.c.now())
		}
	})
	wg.Go(func() {
		time.Sleep(time.Millisecond)
		assert.NoError(t, p.tp.Shutdown(ctx))
	})
	wg.Wait()
	require.NoError(t, p.mp.Shutdown(ctx))
	assert.Len(t, spanAttrs(t, p.sink, "llm_request"), n, "every accepted request span handed on exactly once")
}
