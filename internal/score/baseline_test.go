package score

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// Whatever the spans, the baseline hands out exactly the energy of the
// (GPU, interval) cells some span overlaps, and a span whose phases tile
// its window gets its total back as prefill plus decode.
func TestBaselineConservesEachIntervalsEnergy(t *testing.T) {
	const gpus, bins, interval = 3, 40, int64(time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		f := newFixture(engine(infersim.MatchAttribute, 0), engine(infersim.MatchAttribute, 1, 2), engine(infersim.MatchHost, 0, 1, 2))
		for g := range gpus {
			for i := range bins {
				f.truth.Bins = append(f.truth.Bins, infersim.TruthBin{GPU: g, Start: t0 + int64(i)*100*ms, Energy: 10 * rng.Float64()})
			}
		}
		for id := range byte(1 + rng.IntN(8)) {
			e := rng.IntN(len(f.truth.Header.Engines))
			// Some start before W, some end after it, some are empty.
			from := t0 - int64(time.Second) + rng.Int64N(6*int64(time.Second))
			to := from + rng.Int64N(3*int64(time.Second))
			first := from + rng.Int64N(to-from+1)
			f.request(id, infersim.TruthRequest{Engine: e, GPUs: f.truth.Header.Engines[e].GPUs, Arrival: from, Scheduled: from, FirstToken: first, Finished: to})
			f.span(id, id, "llm_request", from, to, enriched(1))
		}

		var want float64
		for g := range gpus {
			for k := range int64(bins * 100 * ms / interval) {
				i0 := t0 + k*interval
				if !f.covered(g, i0, i0+interval) {
					continue
				}
				for _, b := range f.truth.Bins {
					if b.GPU == g && b.Start >= i0 && b.Start < i0+interval {
						want += b.Energy
					}
				}
			}
		}
		var got float64
		for i, e := range f.estimates(t, time.Duration(interval)) {
			got += e.total
			if math.Abs(e.prefill+e.decode-e.total) > 1e-9*max(1, e.total) {
				t.Fatalf("trial %d, span %d: prefill %g J + decode %g J, total %g J", trial, i, e.prefill, e.decode, e.total)
			}
		}
		if math.Abs(got-want) > 1e-9*max(1, want) {
			t.Fatalf("trial %d: the baseline handed out %g J, the intervals with spans hold %g J", trial, got, want)
		}
	}
}

// covered tells whether a request's span overlaps [from, to) on gpu, where
// a host-matched span is on every GPU.
func (f *fixture) covered(gpu int, from, to int64) bool {
	for _, r := range f.truth.Requests {
		e := f.truth.Header.Engines[r.Engine]
		if (e.Match == infersim.MatchHost || slices.Contains(r.GPUs, gpu)) && overlap(r.Arrival, r.Finished, from, to) > 0 {
			return true
		}
	}
	return false
}
