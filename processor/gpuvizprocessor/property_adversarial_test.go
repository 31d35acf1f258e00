package gpuvizprocessor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// advSpan is one request of the adversarial property tests: a vLLM span
// on the GPUs named by gpus (gpu.uuid, comma separated; "" the host's).
type advSpan struct {
	start, queue, prefill, decode float64
	in, out                       int64
	gpus                          string
}

func advTraces(base time.Time, spans []advSpan, order []int) ptrace.Traces {
	td := ptrace.NewTraces()
	for _, i := range order {
		s := spans[i]
		sp := vllmSpan(td, byte(i+1), base.Add(time.Duration(s.start*float64(time.Second))), s.queue, s.prefill, s.decode, s.out)
		sp.Attributes().PutInt("gen_ai.usage.prompt_tokens", s.in)
		if s.gpus != "" {
			sp.Attributes().PutStr("gpu.uuid", s.gpus)
		}
	}
	return td
}

type advRun struct {
	energies map[pcommon.TraceID]float64
	books    []gpuBooks
}

// advScenario runs spans through a core with GPUs GPU-a and GPU-b, after
// training spans (their own settle group) so that the arrival curve and,
// with enough of them, the activity fits have learned; then the spans in
// order, in one batch or one at a time within the settle window.
func advScenario(t *testing.T, ratio float64, training int, spans []advSpan, order []int, oneBatch bool) advRun {
	t.Helper()
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, func(cfg *Config) {
		cfg.Attribution.SamplingRatio = ratio
	})
	rng := rand.New(rand.NewPCG(7, 7))
	for g, id := range []string{"GPU-a", "GPU-b"} {
		samples := repeat(busy, 121)
		for i := range samples {
			samples[i].powerW = 150 + 500*rng.Float64()
			samples[i].tensor = 0.1 + 0.5*rng.Float64()
			samples[i].dram = 0.1 + 0.7*rng.Float64()
		}
		*now = base.Add(121 * time.Second)
		c.ingest.consume(context.Background(), gpuMetrics("", id, int64(g), base, time.Second, samples))
	}
	if training > 0 {
		td := ptrace.NewTraces()
		for i := range training {
			gpus := []string{"GPU-a", "GPU-b", "GPU-a,GPU-b"}[i%3]
			sp := vllmSpan(td, byte(100+i%150), base.Add(time.Duration(1+i)*70*time.Second/time.Duration(training)), 0, 0.1, 0.4, 7)
			sp.Attributes().PutStr("gpu.uuid", gpus)
			sp.SetSpanID(pcommon.SpanID{byte(i), byte(i >> 8), 9})
		}
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 7 {
			c.tick(base.Add(121*time.Second + time.Duration(step)*time.Second))
		}
	}
	at := base.Add(128 * time.Second)
	if oneBatch {
		*now = at
		require.NoError(t, c.consumeTraces(context.Background(), advTraces(base, spans, order), sink, started))
	} else {
		for n, i := range order {
			*now = at.Add(time.Duration(n) * 4 * time.Second / time.Duration(len(order)))
			require.NoError(t, c.consumeTraces(context.Background(), advTraces(base, spans, []int{i}), sink, started))
		}
	}
	for step := range 10 {
		c.tick(at.Add(5*time.Second + time.Duration(step)*time.Second))
	}
	out := advRun{energies: map[pcommon.TraceID]float64{}}
	for _, td := range sink.AllTraces() {
		forEachSpan(td, func(sp ptrace.Span) {
			if sp.Name() != "llm_request" || sp.TraceID()[0] >= 100 {
				return
			}
			if e, ok := sp.Attributes().Get("gpuviz.energy"); ok {
				out.energies[sp.TraceID()] = e.Double()
			} else {
				out.energies[sp.TraceID()] = math.NaN()
			}
		})
	}
	require.Len(t, out.energies, len(spans))
	// Let every bin turn final and check each GPU's books close.
	for step := range 40 {
		c.tick(at.Add(15*time.Second + time.Duration(step)*time.Second))
	}
	out.books = c.spans.books()
	for _, b := range out.books {
		tot := b.totals
		sum := tot.Attributed + tot.Idle + tot.Unsampled + tot.Correction
		require.InDelta(t, tot.Measured, sum, 1e-9*tot.Measured, "%v: %+v", b.key, tot)
	}
	return out
}

func advCompare(t *testing.T, want, got advRun, what string) {
	t.Helper()
	for id, e := range want.energies {
		g := got.energies[id]
		if math.IsNaN(e) {
			require.True(t, math.IsNaN(g), "%s: request %d", what, id[0])
			continue
		}
		require.InDelta(t, e, g, 1e-9*math.Max(1, math.Abs(e)), "%s: request %d", what, id[0])
	}
}

// advOrders are the orders a scenario is tried in: every permutation of
// up to 5 spans, else a few random ones.
func advOrders(n int, rng *rand.Rand) [][]int {
	if n <= 5 {
		return permutations(n)
	}
	var out [][]int
	for range 12 {
		out = append(out, rng.Perm(n))
	}
	return out
}

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func TestAdversarialOrderIndependence(t *testing.T) {
	scenarios := map[string][]advSpan{
		"tensor parallel mixed with single GPU": {
			{start: 90, prefill: 0.3, decode: 6, in: 800, out: 60, gpus: "GPU-a,GPU-b"},
			{start: 91.05, queue: 0.5, prefill: 0.2, decode: 3, in: 200, out: 90, gpus: "GPU-a"},
			{start: 92.5, prefill: 0.4, decode: 4, in: 1500, out: 30, gpus: "GPU-b"},
			{start: 93, prefill: 0.1, decode: 2.5, in: 50, out: 100, gpus: "GPU-a,GPU-b"},
			{start: 89.7, queue: 1.2, prefill: 0.25, decode: 5, in: 600, out: 40, gpus: "GPU-a"},
		},
		"identical spans": {
			{start: 90, queue: 0.2, prefill: 0.3, decode: 4, in: 500, out: 50, gpus: "GPU-a"},
			{start: 90, queue: 0.2, prefill: 0.3, decode: 4, in: 500, out: 50, gpus: "GPU-a"},
			{start: 90, queue: 0.2, prefill: 0.3, decode: 4, in: 500, out: 50, gpus: "GPU-a"},
			{start: 91, prefill: 0.5, decode: 2, in: 2000, out: 20, gpus: "GPU-a"},
			{start: 90, queue: 0.2, prefill: 0.3, decode: 4, in: 500, out: 50, gpus: "GPU-a,GPU-b"},
		},
		"degenerate spans": {
			{start: 90, queue: 3, gpus: "GPU-a"},                                 // all queue
			{start: 90.5, prefill: 0.3, decode: 3, in: 0, out: 0, gpus: "GPU-a"}, // no tokens
			{start: 91, gpus: "GPU-a"},                                           // no time
			{start: 89, queue: 2.2, prefill: 0.2, decode: 1, in: 100, out: 1, gpus: "GPU-a"},
			{start: 90.05, prefill: 0.001, decode: 0.002, in: 1, out: 2, gpus: "GPU-a,GPU-b"},
		},
	}
	for _, ratio := range []float64{1, 0.5} {
		for _, training := range []int{0, 300} {
			for name, spans := range scenarios {
				t.Run(fmt.Sprintf("%s,ratio=%v,training=%d", name, ratio, training), func(t *testing.T) {
					want := advScenario(t, ratio, training, spans, identity(len(spans)), true)
					if name == "identical spans" {
						for i := 1; i < 3; i++ {
							require.InDelta(t, want.energies[pcommon.TraceID{1, 1}], want.energies[pcommon.TraceID{byte(i + 1), 1}], 1e-9*want.energies[pcommon.TraceID{1, 1}], "identical requests, alike")
						}
					}
					rng := rand.New(rand.NewPCG(1, 2))
					for _, oneBatch := range []bool{true, false} {
						for k, order := range advOrders(len(spans), rng) {
							if k%7 != 0 && training == 300 {
								continue // the long setups: a sample of the orders
							}
							advCompare(t, want, advScenario(t, ratio, training, spans, order, oneBatch), fmt.Sprint("order ", order, " one batch ", oneBatch))
						}
					}
				})
			}
		}
	}
}

// pointsBetween keeps md's data points stamped in [from, to).
func pointsBetween(md pmetric.Metrics, from, to time.Time) pmetric.Metrics {
	out := pmetric.NewMetrics()
	md.CopyTo(out)
	ms := out.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range ms.Len() {
		m := ms.At(i)
		keep := func(dp pmetric.NumberDataPoint) bool {
			ts := dp.Timestamp().AsTime()
			return ts.Before(from) || !ts.Before(to)
		}
		switch m.Type() {
		case pmetric.MetricTypeGauge:
			m.Gauge().DataPoints().RemoveIf(keep)
		case pmetric.MetricTypeSum:
			m.Sum().DataPoints().RemoveIf(keep)
		}
	}
	return out
}

// Two spans of one settle group, a long request's and a short one's: the
// long one's first bins are about finalize_after behind the newest energy.
// Whether the energy that arrives between the two spans lets those bins
// turn final (and teach the activity fits) before the long span is
// admitted must not change what either span gets: the order in which they
// arrive within the settle window must not matter, also where batches the
// next consumer refused are offered again behind the open group's.
func TestOrderIndependenceWhileBinsTurnFinalWithinTheSettleWindow(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(9, 9))
	samples := repeat(busy, 131)
	for i := range samples {
		samples[i].powerW = 150 + 500*rng.Float64()
		samples[i].tensor = 0.1 + 0.5*rng.Float64()
		samples[i].dram = 0.1 + 0.7*rng.Float64()
	}
	md := gpuMetrics("", "GPU-a", 0, base, time.Second, samples)
	long := advSpan{start: 80, prefill: 0.5, decode: 39.5, in: 3000, out: 400}
	short := advSpan{start: 117, prefill: 0.2, decode: 2.5, in: 300, out: 60}
	spans := []advSpan{long, short}
	run := func(order []int, refusing bool) map[byte]float64 {
		c, now, sink := virtualCore(t, nil)
		var to consumer.Traces = sink
		refuser := &refusingUntil{TracesSink: sink, now: now}
		if refusing {
			// Batches released from 115 s are refused until 131 s: each
			// tick puts them back in the hold, behind the open group.
			refuser.from, refuser.until = base.Add(115*time.Second), base.Add(131*time.Second)
			to = refuser
		}
		// Training, as it comes: each second the energy up to the second
		// before, the short requests (every 0.3 s) that ended by then, and
		// a tick. The curve and the fits learn.
		next := 0
		for sec := 1; sec <= 127; sec++ {
			*now = base.Add(time.Duration(sec) * time.Second)
			if sec <= 121 {
				c.ingest.consume(context.Background(), pointsBetween(md, base.Add(time.Duration(sec-1)*time.Second), base.Add(time.Duration(sec)*time.Second)))
			}
			td := ptrace.NewTraces()
			for ; next < 380 && time.Duration(1+next)*300*time.Millisecond+500*time.Millisecond <= time.Duration(sec-1)*time.Second; next++ {
				sp := vllmSpan(td, byte(100+next%150), base.Add(time.Duration(1+next)*300*time.Millisecond), 0, 0.1, 0.4, 7)
				sp.SetSpanID(pcommon.SpanID{byte(next), byte(next >> 8), 9})
			}
			if td.SpanCount() > 0 {
				require.NoError(t, c.consumeTraces(context.Background(), td, to, started))
			}
			c.tick(*now)
		}
		require.True(t, c.spans.pipeline.ledger.Learned())
		// The first span at 128 s; 4 s of energy and a tick; the second at
		// 131 s, within the settle window.
		*now = base.Add(128 * time.Second)
		require.NoError(t, c.consumeTraces(context.Background(), advTraces(base, spans, order[:1]), to, started))
		*now = base.Add(129 * time.Second)
		c.ingest.consume(context.Background(), pointsBetween(md, base.Add(121*time.Second), base.Add(125*time.Second)))
		*now = base.Add(130 * time.Second)
		c.tick(*now)
		*now = base.Add(131 * time.Second)
		require.NoError(t, c.consumeTraces(context.Background(), advTraces(base, spans, order[1:]), to, started))
		c.ingest.consume(context.Background(), pointsBetween(md, base.Add(125*time.Second), base.Add(131*time.Second)))
		for step := range 6 {
			*now = base.Add(133*time.Second + time.Duration(step)*time.Second)
			c.tick(*now)
		}
		out := map[byte]float64{}
		for _, td := range sink.AllTraces() {
			forEachSpan(td, func(sp ptrace.Span) {
				if sp.Name() == "llm_request" && sp.TraceID()[0] < 100 {
					e, ok := sp.Attributes().Get("gpuviz.energy")
					require.True(t, ok)
					out[sp.TraceID()[0]] = e.Double()
				}
			})
		}
		require.Len(t, out, 2)
		if refusing {
			require.NotZero(t, refuser.refused, "no batch was refused")
		}
		return out
	}
	for _, refusing := range []bool{false, true} {
		a, b := run([]int{0, 1}, refusing), run([]int{1, 0}, refusing)
		for id, e := range a {
			require.InEpsilon(t, e, b[id], 1e-9, "refusing %v, request %d: long span first %v, short first %v", refusing, id, a, b)
		}
	}
}

// refusingUntil refuses every batch offered from from until until, by the
// test's clock, as a full queue would, and takes the others.
type refusingUntil struct {
	*consumertest.TracesSink
	now         *time.Time
	from, until time.Time
	refused     int
}

func (r *refusingUntil) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	if !r.now.Before(r.from) && r.now.Before(r.until) {
		r.refused++
		return errors.New("queue full")
	}
	return r.TracesSink.ConsumeTraces(ctx, td)
}
