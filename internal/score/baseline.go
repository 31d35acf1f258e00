package score

import (
	"math"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// The naive baseline is what a deployment could say knowing only its
// spans' windows and each GPU's energy counter read once an interval: every
// interval's energy on a GPU is split between the spans overlapping it there
// in proportion to their overlap (idle time included), and a phase gets the
// part of the span's shares that falls in the phase's true window.
type naive struct {
	tl       *timeline
	interval int64
	gpus     map[int]*counter
}

// counter is one GPU's energy per interval, and the span time spent in
// each (summed over the spans overlapping it).
type counter struct {
	energy []float64
	busy   []int64
}

// naiveSpan is one request as the baseline sees it.
type naiveSpan struct {
	req      int   // index into the requests
	from, to int64 // the exported server span's window
	gpus     []int
}

// baseline returns the naive estimate of every request, NaN for those
// without a server span.
func baseline(truth *infersim.Truth, reqs []request, tl *timeline, interval int64) []estimate {
	nv := newNaive(tl, interval)
	spans := naiveSpans(truth, reqs, tl)
	for _, s := range spans {
		nv.visit(s, func(c *counter, k int, from, to int64) { c.busy[k] += to - from })
	}
	est := make([]estimate, len(reqs))
	for i := range est {
		est[i] = estimate{math.NaN(), math.NaN(), math.NaN()}
	}
	for _, s := range spans {
		t := reqs[s.req].truth
		var e estimate
		nv.visit(s, func(c *counter, k int, from, to int64) {
			perNS := c.energy[k] / float64(c.busy[k]) // > 0: this very overlap is in busy[k]
			e.total += perNS * float64(to-from)
			e.prefill += perNS * float64(overlap(from, to, t.Scheduled, t.FirstToken))
			e.decode += perNS * float64(overlap(from, to, t.FirstToken, t.Finished))
		})
		est[s.req] = e
	}
	return est
}

func newNaive(tl *timeline, interval int64) *naive {
	n := (tl.to - tl.from + interval - 1) / interval
	nv := &naive{tl: tl, interval: interval, gpus: make(map[int]*counter, len(tl.byGPU))}
	for g, bins := range tl.byGPU {
		c := &counter{energy: make([]float64, n), busy: make([]int64, n)}
		// The interval is a multiple of the bin width (Score checks), so a
		// bin lies in one interval.
		for _, b := range bins {
			c.energy[(b.Start-tl.from)/interval] += b.Energy
		}
		nv.gpus[g] = c
	}
	return nv
}

// naiveSpans are the requests with a server span, on the GPUs their
// deployment could name: their own when the engine's spans name them, every
// GPU of the node when they are matched by host.
func naiveSpans(truth *infersim.Truth, reqs []request, tl *timeline) []naiveSpan {
	var spans []naiveSpan
	for i, r := range reqs {
		if !r.hasServer {
			continue
		}
		s := naiveSpan{req: i, from: int64(r.server.StartTimestamp()), to: int64(r.server.EndTimestamp()), gpus: r.truth.GPUs}
		if truth.Header.Engines[r.truth.Engine].Match == infersim.MatchHost {
			s.gpus = tl.gpus
		}
		spans = append(spans, s)
	}
	return spans
}

// visit calls fn for each interval k the span overlaps inside W on each of
// its GPUs, with the overlap [from, to), never empty.
func (nv *naive) visit(s naiveSpan, fn func(c *counter, k int, from, to int64)) {
	from, to := max(s.from, nv.tl.from), min(s.to, nv.tl.to)
	if from >= to {
		return
	}
	first := (from - nv.tl.from) / nv.interval
	for _, g := range s.gpus {
		c := nv.gpus[g]
		if c == nil {
			continue
		}
		for k := first; nv.tl.from+k*nv.interval < to; k++ {
			start := nv.tl.from + k*nv.interval
			fn(c, int(k), max(from, start), min(to, start+nv.interval))
		}
	}
}
