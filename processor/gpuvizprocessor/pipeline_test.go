package gpuvizprocessor

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// virtualCore returns a started core on a clock the test moves, whose
// release loop never runs by itself.
func virtualCore(t *testing.T, tune func(*Config)) (*core, *time.Time, *consumertest.TracesSink) {
	t.Helper()
	return virtualCoreWith(t, processortest.NewNopSettings(metadata.Type), tune)
}

// virtualCoreWith is virtualCore with the processor's settings (its own
// telemetry, say).
func virtualCoreWith(t testing.TB, set processor.Settings, tune func(*Config)) (*core, *time.Time, *consumertest.TracesSink) {
	t.Helper()
	cfg := virtualConfig(t, tune)
	fac := &factory{cores: map[*Config]*core{}}
	sink := new(consumertest.TracesSink)
	tp, err := fac.createTraces(context.Background(), set, cfg, sink)
	require.NoError(t, err)
	c := fac.cores[cfg]
	now := new(time.Time)
	c.now = func() time.Time { return *now }
	c.ticker = func() (<-chan time.Time, func()) { return nil, func() {} }
	require.NoError(t, tp.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return c, now, sink
}

// started and notStarted say whether the component a test's batch comes
// through is started: if so its batch waits for the release loop (the
// test's ticks), if not it is released at once.
func started() bool    { return true }
func notStarted() bool { return false }

// virtualConfig is the defaults, tuned, for a core on a virtual clock.
func virtualConfig(t testing.TB, tune func(*Config)) *Config {
	t.Helper()
	cfg := createDefaultConfig()
	// Spans are released as soon as they settle: the tests of the warm-up
	// hold ask for it.
	cfg.Attribution.WarmupWait = 0
	if tune != nil {
		tune(cfg)
	}
	require.NoError(t, cfg.Validate())
	return cfg
}

// spanEnergies returns each llm_request span's energy by trace ID byte.
func spanEnergies(t *testing.T, sink *consumertest.TracesSink) map[byte]float64 {
	out := map[byte]float64{}
	for _, td := range sink.AllTraces() {
		forEachSpan(td, func(sp ptrace.Span) {
			if sp.Name() != "llm_request" {
				return
			}
			e, ok := sp.Attributes().Get("gpuviz.energy")
			require.True(t, ok)
			out[sp.TraceID()[0]] = e.Double()
		})
	}
	return out
}

func forEachSpan(td ptrace.Traces, f func(ptrace.Span)) {
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			sl := sss.At(j).Spans()
			for k := range sl.Len() {
				f(sl.At(k))
			}
		}
	}
}

// Spans that arrive within the settle window of each other are attributed
// as if they had arrived together: every order, in one batch or one at a
// time, gives every request the same energy.
func TestAttributionIsOrderIndependentWithinTheSettleWindow(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	samples := repeat(busy, 41)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range samples {
		samples[i].powerW = 150 + 500*rng.Float64()
	}
	type shape struct{ start, queue, prefill, decode float64 }
	shapes := []shape{{2, 0.3, 0.4, 9}, {3.5, 1, 0.2, 4}, {4, 0, 0.8, 12}, {6.2, 0.5, 0.3, 3}, {7, 2, 0.6, 6.5}}
	run := func(order []int, oneBatch bool) map[byte]float64 {
		c, now, sink := virtualCore(t, nil)
		*now = base.Add(41 * time.Second)
		c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, samples))
		batch := ptrace.NewTraces()
		for n, i := range order {
			s := shapes[i]
			td := batch
			if !oneBatch {
				td = ptrace.NewTraces()
			}
			vllmSpan(td, byte(i+1), base.Add(time.Duration(s.start*float64(time.Second))), s.queue, s.prefill, s.decode, int64(20+30*i))
			if !oneBatch {
				*now = base.Add(41*time.Second + time.Duration(n)*time.Second) // 4 s from first to last: within the 5 s window
				require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
			}
		}
		if oneBatch {
			require.NoError(t, c.consumeTraces(context.Background(), batch, sink, started))
		}
		for step := range 12 {
			c.tick(base.Add(41*time.Second + time.Duration(step)*time.Second))
		}
		got := spanEnergies(t, sink)
		require.Len(t, got, len(shapes))
		return got
	}
	want := run([]int{0, 1, 2, 3, 4}, true)
	for _, oneBatch := range []bool{true, false} {
		for _, order := range permutations(len(shapes)) {
			got := run(order, oneBatch)
			for id, e := range want {
				require.InEpsilon(t, e, got[id], 1e-9, "order %v, one batch %v, request %d", order, oneBatch, id)
			}
		}
	}
}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// A span's labels and the bottleneck-time counter read the same label for
// every bin: each one-second request below lies on one kind of second, and
// the counter counts exactly those seconds under the span's label (and the
// second no request ran in as idle).
func TestSpanLabelsAndBottleneckTimeAgree(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	compute := sample{util: 1, tensor: 0.8, dram: 0.3, powerW: 650, memUsed: 60e9}
	quiet := sample{util: 0.05, tensor: 0, dram: 0.02, powerW: 120, memUsed: 60e9}
	kinds := []sample{busy, compute, quiet, busy, compute, quiet, busy}
	samples := []sample{busy} // sample i covers second i−1..i
	for _, k := range kinds {
		samples = append(samples, k)
	}
	samples = append(samples, repeat(busy, 8)...) // energy well past the last request: its bins become final
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(16 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, samples))
	td := ptrace.NewTraces()
	for i := range kinds {
		if i == 5 {
			continue // nobody ran in this quiet second: idle, not host_bound
		}
		vllmSpan(td, byte(i+1), base.Add(time.Duration(i)*time.Second), 0, 0, 1, 10)
	}
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	for step := range 8 {
		c.tick(base.Add(16*time.Second + time.Duration(step)*time.Second))
	}
	want := bottleneck.Times{}
	labels := map[byte]string{}
	for _, out := range sink.AllTraces() {
		forEachSpan(out, func(sp ptrace.Span) {
			if sp.Name() != "llm_request" {
				return
			}
			l, ok := sp.Attributes().Get(attrBottleneck)
			require.True(t, ok)
			labels[sp.TraceID()[0]] = l.Str()
			want.Add(bottleneck.Label(l.Str()), 1)
		})
	}
	require.Len(t, labels, len(kinds)-1)
	assert.Equal(t, "memory_bound", labels[1])
	assert.Equal(t, "compute_bound", labels[2])
	assert.Equal(t, "host_bound", labels[3], "a request waited on an idle GPU")
	want.Add(bottleneck.Idle, 1)
	books := c.spans.books()
	require.Len(t, books, 1)
	got := books[0].totals.Seconds
	// The counter runs over every final bin: before and after the requests
	// the GPU was busy with nobody's work.
	for i, l := range bottleneck.Labels {
		inWindow := want[i]
		switch l {
		case bottleneck.MemoryBound:
			assert.GreaterOrEqual(t, got[i]+1e-9, inWindow, l)
		default:
			assert.InDelta(t, inWindow, got[i], 1e-9, l)
		}
	}
}

// A span's bottleneck share is its label's part of the labelled GPU time
// in its window, for the request and for each phase: one compute second of
// prefill and two memory-bound seconds of decode make the request 2/3
// memory-bound and each phase wholly its own label.
func TestBottleneckShareIsTheLabelsPartOfTheSpansTime(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	compute := sample{util: 1, tensor: 0.8, dram: 0.3, powerW: 650, memUsed: 60e9}
	samples := append([]sample{busy, compute, busy, busy}, repeat(busy, 8)...) // sample i covers second i−1..i
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(12 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, samples))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base, 0, 1, 2, 10)
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	for step := range 8 {
		c.tick(base.Add(12*time.Second + time.Duration(step)*time.Second))
	}
	got := map[string]map[string]any{}
	for _, out := range sink.AllTraces() {
		forEachSpan(out, func(sp ptrace.Span) { got[sp.Name()] = sp.Attributes().AsRaw() })
	}
	require.Contains(t, got, "llm_request")
	req := got["llm_request"]
	assert.Equal(t, "memory_bound", req[attrBottleneck])
	assert.InDelta(t, 2.0/3, req[attrShare], 1e-6)
	assert.Equal(t, "compute_bound", req["gpuviz.phase.prefill.bottleneck"])
	assert.InDelta(t, 1, req["gpuviz.phase.prefill.bottleneck.share"], 1e-9)
	assert.Equal(t, "memory_bound", req["gpuviz.phase.decode.bottleneck"])
	assert.InDelta(t, 1, req["gpuviz.phase.decode.bottleneck.share"], 1e-9)
	for _, name := range []string{"gpu.prefill", "gpu.decode"} {
		require.Contains(t, got, name)
		assert.InDelta(t, 1, got[name][attrShare], 1e-9, name)
	}
}

// An unknown label has no share: it says nothing of how dominant a
// resource was.
func TestKnownShare(t *testing.T) {
	var tm bottleneck.Times
	tm.Add(bottleneck.Unknown, 3)
	tm.Add(bottleneck.MemoryBound, 1)
	id := func(l bottleneck.Label) bottleneck.ID { return bottleneck.ID(bottleneck.Index(l)) }
	assert.Zero(t, knownShare(&tm, id(bottleneck.Unknown)))
	assert.InDelta(t, 0.25, knownShare(&tm, id(bottleneck.MemoryBound)), 1e-12)
}

// flaky refuses the first batches it is offered, then takes them, and
// remembers the client metadata each came with.
type flaky struct {
	consumertest.TracesSink
	refuse int
	err    error
	seen   []client.Info
}

func (f *flaky) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	f.seen = append(f.seen, client.FromContext(ctx))
	if f.refuse > 0 {
		f.refuse--
		return f.err
	}
	return f.TracesSink.ConsumeTraces(ctx, td)
}

// Nothing accepted is lost at release: a retryable refusal is offered
// again on the next tick, with the client's metadata; a permanent one is
// counted refused.
func TestReleaseRetriesWithTheClientsMetadata(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		err       error
		delivered int
	}{
		{"retryable", errors.New("queue full"), 1},
		{"permanent", consumererror.NewPermanent(errors.New("bad data")), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now, _ := virtualCore(t, nil)
			*now = base.Add(21 * time.Second)
			c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
			next := &flaky{refuse: 1, err: tc.err}
			td := ptrace.NewTraces()
			vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
			info := client.Info{Metadata: client.NewMetadata(map[string][]string{"x-tenant": {"acme"}})}
			require.NoError(t, c.consumeTraces(client.NewContext(context.Background(), info), td, next, started))
			for step := range 12 {
				c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
			}
			assert.Equal(t, tc.delivered, len(next.AllTraces()))
			require.NotEmpty(t, next.seen)
			for _, got := range next.seen {
				assert.Equal(t, []string{"acme"}, got.Metadata.Get("x-tenant"))
			}
			c.spans.mu.Lock()
			assert.Zero(t, c.spans.hold.n, "nothing left held")
			c.spans.mu.Unlock()
		})
	}
}

// Simulated data stays marked: spans enriched from a simulated GPU and the
// derived metrics say gpuviz.backend=simulated.
func TestSimulatedDataStaysMarked(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	md := gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 21))
	md.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", "simulated")
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), md)
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	c.tick(base.Add(27 * time.Second))
	require.Len(t, sink.AllTraces(), 1)
	forEachSpan(sink.AllTraces()[0], func(sp ptrace.Span) {
		v, ok := sp.Attributes().Get(attrBackend)
		require.True(t, ok, sp.Name())
		assert.Equal(t, "simulated", v.Str(), sp.Name())
	})
	out := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), out, base.Add(28*time.Second))
	require.Positive(t, out.ResourceMetrics().Len())
	for i := range out.ResourceMetrics().Len() {
		v, ok := out.ResourceMetrics().At(i).Resource().Attributes().Get("gpuviz.backend")
		require.True(t, ok)
		assert.Equal(t, "simulated", v.Str())
	}
}

// oneRequestReleased is a core that has seen 21 s of GPU-a busy on
// node-1 from base and released one vLLM request from then to next.
func oneRequestReleased(t *testing.T, next consumer.Traces) (*core, time.Time) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, nil)
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	require.NoError(t, c.consumeTraces(context.Background(), td, next, started))
	c.tick(base.Add(27 * time.Second))
	return c, base
}

// exemplarCount is how many exemplars md's sums and histograms carry.
func exemplarCount(md pmetric.Metrics) (n int) {
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			m := ms.At(j)
			switch m.Type() {
			case pmetric.MetricTypeSum:
				for k := range m.Sum().DataPoints().Len() {
					n += m.Sum().DataPoints().At(k).Exemplars().Len()
				}
			case pmetric.MetricTypeHistogram:
				for k := range m.Histogram().DataPoints().Len() {
					n += m.Histogram().DataPoints().At(k).Exemplars().Len()
				}
			}
		}
	}
	return n
}

// The exemplars of a request the next consumer refused for good are not
// sent: no backend has its span. Its energy stays counted.
func TestExemplarsOfRefusedSpansAreDropped(t *testing.T) {
	c, base := oneRequestReleased(t, consumertest.NewErr(consumererror.NewPermanent(errors.New("bad data"))))
	require.Zero(t, c.spans.pending())
	md := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), md, base.Add(30*time.Second))
	assert.Zero(t, exemplarCount(md))
	assert.Positive(t, readDerived(t, md).sum("gpuviz.accounting.energy", "requests"), "charged all the same")
}

// Exemplars go out with the flush after their request and not again.
func TestExemplarsAreClearedAfterAFlush(t *testing.T) {
	sink := new(consumertest.TracesSink)
	c, base := oneRequestReleased(t, sink)
	require.Len(t, sink.AllTraces(), 1)
	first, second := pmetric.NewMetrics(), pmetric.NewMetrics()
	c.flushMetrics(context.Background(), first, base.Add(30*time.Second))
	c.flushMetrics(context.Background(), second, base.Add(50*time.Second))
	assert.Positive(t, exemplarCount(first), "the request's exemplars")
	assert.Zero(t, exemplarCount(second), "sent once")
	assert.Positive(t, second.ResourceMetrics().Len(), "the series themselves go on")
}

// NVLink throughput over the capacity the receiver reports reaches the
// classifier: a GPU moving most of what its links carry is interconnect
// bound, one moving little is not.
func TestNVLinkCapacityMakesAFraction(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		bytes float64
		want  bottleneck.Label
	}{
		{"links near capacity", 400e9, bottleneck.InterconnectBound},
		{"links quiet", 20e9, bottleneck.MemoryBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now, _ := virtualCore(t, nil)
			*now = base.Add(time.Minute)
			md := gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 5))
			ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
			for _, m := range []struct {
				name string
				v    float64
			}{{"nvidia.gpu.nvlink.throughput", tc.bytes}, {"nvidia.gpu.nvlink.capacity", 478.1e9}} {
				g := ms.AppendEmpty()
				g.SetName(m.name)
				dps := g.SetEmptyGauge().DataPoints()
				for i := range 5 {
					p := dps.AppendEmpty()
					p.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(i) * time.Second)))
					p.SetDoubleValue(m.v)
					p.Attributes().PutStr("hw.id", "GPU-a")
					p.Attributes().PutStr("network.io.direction", "transmit")
				}
			}
			c.ingest.consume(context.Background(), md)
			k := timeline.Key{Host: "node-1", GPU: "GPU-a"}
			bins := c.spans.store.Bins(k, base.Add(2*time.Second), 100*time.Millisecond, 1, nil)
			assert.Equal(t, tc.want, c.spans.pipeline.classify(&bins[0], 0, true))
		})
	}
}

// A host's and a model's request histograms go once they have seen no
// request for metrics.idle_expiry; one that comes back starts again from 0
// at the flush before its new first value, as a cumulative series must.
func TestIdleHistogramsExpire(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	h, models := newHistograms(10*time.Minute), newBoundedValues(2)
	model, _ := models.fold("node-1", "llama", base)
	k := histKey{host: "node-1", model: model, label: bottleneck.MemoryBound}
	h.observe(histEnergy, k, 5, exemplar{}, base, pcommon.NewTimestampFromTime(base.Add(-time.Second)))
	h.expire(base.Add(9 * time.Minute))
	models.expire(base.Add(9*time.Minute), 10*time.Minute)
	assert.Equal(t, []string{"node-1"}, h.hosts())
	h.expire(base.Add(11 * time.Minute))
	models.expire(base.Add(11*time.Minute), 10*time.Minute)
	assert.Empty(t, h.hosts())
	assert.Empty(t, models.byHost, "the host's models are forgotten too")
	back := pcommon.NewTimestampFromTime(base.Add(11 * time.Minute))
	h.observe(histEnergy, k, 7, exemplar{}, base.Add(11*time.Minute+time.Second), back)
	ms := pmetric.NewMetricSlice()
	h.appendTo(ms, "node-1", pcommon.NewTimestampFromTime(base.Add(12*time.Minute)))
	require.Equal(t, 1, ms.Len())
	dp := ms.At(0).Histogram().DataPoints().At(0)
	assert.Equal(t, back, dp.StartTimestamp(), "a new start time")
	assert.Equal(t, uint64(1), dp.Count(), "from 0 again")
	assert.Equal(t, 7.0, dp.Sum())
	// With the old ones gone, new models get their own series again.
	for _, m := range []string{"a", "b", "c"} {
		got, folded := models.fold("node-1", m, base.Add(12*time.Minute))
		assert.Equal(t, m != "c", got == m && !folded, "max_models per host: %s → %s", m, got)
	}
}

// A release's results are one buffer (and, with phase spans, a second),
// live through the release (tens of thousands of spans at 20,000 spans/s):
// holding no pointer keeps the garbage collector from scanning them.
func TestSpanResultHoldsNoPointer(t *testing.T) {
	assert.Empty(t, pointerFields(reflect.TypeFor[spanResult](), "spanResult"))
	assert.Empty(t, pointerFields(reflect.TypeFor[phaseStats](), "phaseStats"))
}

// pointerFields returns the paths of t's fields that hold a pointer.
func pointerFields(t reflect.Type, path string) []string {
	switch t.Kind() {
	case reflect.Struct:
		var out []string
		for i := range t.NumField() {
			f := t.Field(i)
			out = append(out, pointerFields(f.Type, path+"."+f.Name)...)
		}
		return out
	case reflect.Array:
		return pointerFields(t.Elem(), path+"[]")
	case reflect.Pointer, reflect.String, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return []string{path + " (" + t.Kind().String() + ")"}
	}
	return nil
}

// A bin's activity for the books is each signal's mean over what it
// covered times the bin's width, and only where GPM measured both.
func TestActivityIsTheMeansOverTheBin(t *testing.T) {
	var full, half, tensorOnly timeline.Bin
	full.Integral[timeline.TensorActivity], full.Covered[timeline.TensorActivity] = 0.06, 0.1
	full.Integral[timeline.DRAMActivity], full.Covered[timeline.DRAMActivity] = 0.03, 0.1
	half.Integral[timeline.TensorActivity], half.Covered[timeline.TensorActivity] = 0.03, 0.05
	half.Integral[timeline.DRAMActivity], half.Covered[timeline.DRAMActivity] = 0.01, 0.05
	tensorOnly.Integral[timeline.TensorActivity], tensorOnly.Covered[timeline.TensorActivity] = 0.06, 0.1
	for _, tc := range []struct {
		name string
		bin  *timeline.Bin
		want attribution.Activity
	}{
		{"covered whole", &full, attribution.Activity{TensorSeconds: 0.06, DRAMSeconds: 0.03, Known: true}},
		{"covered half: the means over the width", &half, attribution.Activity{TensorSeconds: 0.06, DRAMSeconds: 0.02, Known: true}},
		{"no DRAM activity", &tensorOnly, attribution.Activity{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := activity(tc.bin, 0.1)
			assert.Equal(t, tc.want.Known, got.Known)
			assert.InDelta(t, tc.want.TensorSeconds, got.TensorSeconds, 1e-12)
			assert.InDelta(t, tc.want.DRAMSeconds, got.DRAMSeconds, 1e-12)
		})
	}
}

// The driver's 20 ms power samples place each bin within its 250 ms GPM
// tick (bottleneck rule 0): a tick mixing a prompt's chunk into decodes
// reads memory bound on average, and the bin that drew the chunk's power
// reads compute bound, once the power limit says how far watts go.
func TestPowerSamplesPlaceBinsWithinTheirTick(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	mixed := sample{util: 0.7, tensor: 0.2, dram: 0.4, powerW: 460, memUsed: 60e9}
	for _, tc := range []struct {
		name       string
		limit      float64 // 0: none reported
		chunk, dec bottleneck.Label
	}{
		{"with the power limit", 700, bottleneck.ComputeBound, bottleneck.MemoryBound},
		{"without it", 0, bottleneck.MemoryBound, bottleneck.MemoryBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now, _ := virtualCore(t, nil)
			*now = base.Add(time.Minute)
			md := gpuMetrics("node-1", "GPU-a", 0, base, 250*time.Millisecond, repeat(mixed, 9))
			ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
			gauge := func(name string) pmetric.NumberDataPointSlice {
				m := ms.AppendEmpty()
				m.SetName(name)
				return m.SetEmptyGauge().DataPoints()
			}
			add := func(dps pmetric.NumberDataPointSlice, ts time.Time, v float64) {
				p := dps.AppendEmpty()
				p.SetTimestamp(pcommon.NewTimestampFromTime(ts))
				p.SetDoubleValue(v)
				p.Attributes().PutStr("hw.id", "GPU-a")
			}
			if tc.limit > 0 {
				add(gauge("nvidia.gpu.power.limit"), base, tc.limit)
			}
			// Every 20 ms: 550 W in the 100 ms from 1 s (the chunk's
			// steps), 400 W otherwise; the tick's mean stays 460 W.
			samples := gauge("nvidia.gpu.samples.power")
			for i := 1; i <= 100; i++ {
				at := time.Duration(i) * 20 * time.Millisecond
				w := 400.0
				if at > time.Second && at <= 1100*time.Millisecond {
					w = 550
				}
				add(samples, base.Add(at), w)
			}
			c.ingest.consume(context.Background(), md)
			k := timeline.Key{Host: "node-1", GPU: "GPU-a"}
			limit, _ := c.spans.store.PowerLimit(k)
			bins := c.spans.store.Bins(k, base.Add(time.Second), 100*time.Millisecond, 2, nil)
			assert.Equal(t, tc.chunk, c.spans.pipeline.classify(&bins[0], limit, true), "the chunk's bin")
			assert.Equal(t, tc.dec, c.spans.pipeline.classify(&bins[1], limit, true), "a decode bin")
		})
	}
}

// The gpuviz receiver's flush sends the energy counter stamped at its read
// with the driver's 20 ms power samples up to just before it: the sample
// covering the last few ms before the read comes a flush later. A span
// released as soon as the counter passes its end (its GPU data came after
// its settle window: a metrics pipeline batching longer, a host clock
// ahead) has its bins frozen then. They must split the counter by the
// power samples, as when the next flush is in first: a request drawing 600
// W in seconds that average 285 W gets its 600 W.
func TestASpansEnergyFollowsThePowerSamplesWhenFrozenAtItsCounter(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	watts := func(sample time.Duration) float64 {
		if sample%time.Second <= 300*time.Millisecond {
			return 600
		}
		return 150
	}
	// Scrape-time readings and the counter at 0.05 s, 1.05 s, ...; the
	// counter's 285 J a second is the power samples' mean.
	md := gpuMetrics("", "GPU-a", 0, base.Add(50*time.Millisecond), time.Second, repeat(sample{util: 0.9, tensor: 0.6, dram: 0.3, powerW: 285, memUsed: 40e9}, 13))
	ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	ms.RemoveIf(func(m pmetric.Metric) bool { return m.Name() == "hw.power" }) // the samples say it
	m := ms.AppendEmpty()
	m.SetName("nvidia.gpu.samples.power")
	dps := m.SetEmptyGauge().DataPoints()
	for at := 15 * time.Millisecond; at < 13*time.Second; at += 20 * time.Millisecond {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(at)))
		dp.SetDoubleValue(watts(at))
		dp.Attributes().PutStr("hw.id", "GPU-a")
	}
	run := func(upTo time.Duration) float64 {
		c, now, sink := virtualCore(t, nil)
		*now = base.Add(13 * time.Second)
		c.ingest.consume(context.Background(), pointsWhere(md, func(ts time.Time) bool { return !ts.After(base.Add(upTo)) }))
		td := ptrace.NewTraces()
		vllmSpan(td, 1, base.Add(8*time.Second), 0, 0.1, 0.2, 20) // [8 s, 8.3 s] at 600 W
		assert.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 8 {
			c.tick(base.Add(13*time.Second + time.Duration(step)*time.Second))
		}
		return spanEnergies(t, sink)[1]
	}
	all := run(13 * time.Second)
	assert.InDelta(t, 0.3*600, all, 0.3*600*0.03, "read with every flush in")
	assert.InDelta(t, all, run(9050*time.Millisecond), 1e-6, "frozen at the flush after its end: the same")
}

// A GPU without an energy counter (before Volta, or hw.energy turned off)
// has its energy from the driver's power samples, which the receiver's
// flush sends up to just before its read, with the tick's readings stamped
// at the read. A span is released, and its bins frozen, once its GPU's
// energy has come to its last bin's end: the power samples', not the
// tick's.
func TestASpanWithoutACounterWaitsForThePowerSamples(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	// Scrape-time readings at 0.105 s, 1.105 s, ...; power samples every
	// 20 ms at 0.015 s, 0.035 s, ...: 600 W.
	md := gpuMetrics("", "GPU-a", 0, base.Add(105*time.Millisecond), time.Second, repeat(sample{util: 0.9, tensor: 0.6, dram: 0.3, powerW: 600, memUsed: 40e9}, 13))
	ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	ms.RemoveIf(func(m pmetric.Metric) bool { return m.Name() == "hw.power" || m.Name() == "hw.energy" })
	m := ms.AppendEmpty()
	m.SetName("nvidia.gpu.samples.power")
	dps := m.SetEmptyGauge().DataPoints()
	for at := 15 * time.Millisecond; at < 13*time.Second; at += 20 * time.Millisecond {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(at)))
		dp.SetDoubleValue(600)
		dp.Attributes().PutStr("hw.id", "GPU-a")
	}
	run := func(first time.Duration) float64 {
		c, now, sink := virtualCore(t, nil)
		*now = base.Add(13 * time.Second)
		c.ingest.consume(context.Background(), pointsWhere(md, func(ts time.Time) bool { return !ts.After(base.Add(first)) }))
		td := ptrace.NewTraces()
		vllmSpan(td, 1, base.Add(8750*time.Millisecond), 0, 0.1, 0.2, 20) // [8.75 s, 9.05 s]
		assert.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 8 {
			c.tick(base.Add(13*time.Second + time.Duration(step)*time.Second))
		}
		c.ingest.consume(context.Background(), pointsWhere(md, func(ts time.Time) bool { return ts.After(base.Add(first)) }))
		c.tick(base.Add(21 * time.Second))
		return spanEnergies(t, sink)[1]
	}
	// Its four bins at 600 W, each 60 J: the last one's energy is in at
	// 9.115 s, not at the tick's 9.105 s.
	assert.InDelta(t, 4*60, run(13*time.Second), 1e-6, "read with every flush in")
	assert.InDelta(t, 4*60, run(9105*time.Millisecond), 1e-6, "the flush after its end first")
}

// The driver's power samples come every 20 ms: a ring of the default
// history.max_points_per_signal (2048) holds their last 41 s, the energy
// counter's ring minutes. A request of three minutes, 600 W for its first
// minute and 200 W after, drew 331 W on average, and its power mean must
// say so rather than the mean of the power samples still held. So must a
// request across two GPUs whose rings together hold more seconds than it
// ran, each less than half of it.
func TestALongRequestsPowerMeanIsOverAllOfIt(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		gpus          int
		from, to, hot time.Duration // the request, and when its GPUs go from 600 W to 200 W
	}{
		{gpus: 1, from: time.Second, to: 181 * time.Second, hot: 60 * time.Second},
		{gpus: 2, from: 130 * time.Second, to: 190 * time.Second, hot: 150 * time.Second}, // the rings hold 159 s on
	} {
		watts := func(at time.Duration) float64 {
			if at <= tc.hot {
				return 600
			}
			return 200
		}
		c, now, sink := virtualCore(t, nil)
		*now = base.Add(200 * time.Second)
		for g, id := range []string{"GPU-a", "GPU-b"}[:tc.gpus] {
			samples := repeat(sample{util: 0.9, tensor: 0.6, dram: 0.3, memUsed: 40e9}, 200)
			for i := range samples {
				samples[i].powerW = watts(time.Duration(i) * time.Second)
			}
			md := gpuMetrics("", id, int64(g), base, time.Second, samples)
			ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
			ms.RemoveIf(func(m pmetric.Metric) bool { return m.Name() == "hw.power" }) // the samples say it
			m := ms.AppendEmpty()
			m.SetName("nvidia.gpu.samples.power")
			dps := m.SetEmptyGauge().DataPoints()
			for at := 20 * time.Millisecond; at < 200*time.Second; at += 20 * time.Millisecond {
				dp := dps.AppendEmpty()
				dp.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(at)))
				dp.SetDoubleValue(watts(at))
				dp.Attributes().PutStr("hw.id", id)
			}
			c.ingest.consume(context.Background(), md)
		}
		td := ptrace.NewTraces()
		vllmSpan(td, 1, base.Add(tc.from), 0, 1, (tc.to - tc.from - time.Second).Seconds(), 2000)
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 10 {
			c.tick(base.Add(200*time.Second + time.Duration(step)*time.Second))
		}
		attrs := spanAttrs(t, sink, "llm_request")
		require.Len(t, attrs, 1)
		require.Len(t, attrs[0]["gpuviz.gpu.ids"], tc.gpus)
		energy := float64(tc.gpus) * (600*(tc.hot-tc.from).Seconds() + 200*(tc.to-tc.hot).Seconds())
		want := energy / (tc.to - tc.from).Seconds()
		assert.InDelta(t, energy, attrs[0]["gpuviz.energy"], 1e-6, "%d GPUs", tc.gpus)
		assert.InDelta(t, want, attrs[0]["gpuviz.gpu.power.mean"], 0.01*want, "%d GPUs: the mean over the whole request", tc.gpus)
	}
}

// A span from long before any sample the timeline can hold, released in
// the same round as a current one on the same GPU, is left out of the
// round (un-enriched, no_samples): the round reads the current span's bins,
// not every bin between the two.
func TestARoundLeavesOutSpansOlderThanTheTimeline(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, start := range []time.Time{base.Add(-3 * time.Hour), time.Unix(1, 0)} {
		c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
		*now = base.Add(61 * time.Second)
		c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 61)))
		td := ptrace.NewTraces()
		vllmSpan(td, 1, base.Add(20*time.Second), 1, 1, 8, 200)
		vllmSpan(td, 2, start, 1, 1, 8, 200)
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 30 {
			*now = base.Add(61*time.Second + time.Duration(step)*time.Second)
			c.tick(*now)
		}
		enriched := map[byte]bool{}
		for _, td := range sink.AllTraces() {
			forEachSpan(td, func(sp ptrace.Span) {
				_, ok := sp.Attributes().Get("gpuviz.energy")
				enriched[sp.TraceID()[0]] = enriched[sp.TraceID()[0]] || ok
			})
		}
		assert.Equal(t, map[byte]bool{1: true, 2: false}, enriched, "the current span enriched, the old one handed on without samples")
		for k, g := range c.spans.pipeline.gpus {
			assert.LessOrEqual(t, cap(g.bins), 1000, "%v: bins read for the current span alone", k)
		}
	}
}

// A host with a real GPU and a simulated one: a request that ran on the
// simulated GPU puts simulated energy into the host's request series
// (histograms, accounting), which must say so, not go out under the real
// GPU's resource marked nvml alone.
func TestRequestSeriesOfAMixedHostAreMarkedSimulated(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(21 * time.Second)
	real := gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 21))
	real.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", "nvml")
	c.ingest.consume(context.Background(), real)
	sim := gpuMetrics("node-1", "GPU-b", 1, base, time.Second, repeat(busy, 21))
	sim.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", "simulated")
	c.ingest.consume(context.Background(), sim)
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("gpu.uuid", "GPU-b")
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	c.tick(base.Add(27 * time.Second))
	spans := spanAttrs(t, sink, "llm_request")
	require.Len(t, spans, 1)
	require.Equal(t, "simulated", spans[0]["gpuviz.backend"])
	out := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), out, base.Add(28*time.Second))
	seen := 0
	for i := range out.ResourceMetrics().Len() {
		rm := out.ResourceMetrics().At(i)
		backend := stringAttr(rm.Resource().Attributes(), "gpuviz.backend")
		for j := range rm.ScopeMetrics().Len() {
			ms := rm.ScopeMetrics().At(j).Metrics()
			for k := range ms.Len() {
				name := ms.At(k).Name()
				if strings.HasPrefix(name, "gpuviz.request.") || name == "gpuviz.accounting.energy" {
					seen++
					assert.Contains(t, strings.Split(backend, ","), "simulated", "%s on a resource marked %q", name, backend)
				}
			}
		}
	}
	assert.Positive(t, seen)
}
