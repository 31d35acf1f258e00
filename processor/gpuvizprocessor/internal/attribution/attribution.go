// Package attribution splits the energy a GPU drew between the inference
// requests it served at the same time.
//
// The rule: each sample interval's measured energy is divided between the
// requests overlapping it in proportion to their overlap with it. A request
// alone on the GPU for a whole interval gets all of that interval's energy;
// two requests sharing it for its whole length get half each. Energy is
// conserved: the shares of an interval sum to its energy exactly (up to
// float rounding), so the requests' energies sum to what the counter
// measured over the intervals they covered. Intervals no request overlaps
// (idle time) are attributed to no one. A phase of a request gets the part
// of the request's share that falls within the phase; phases do not compete
// with requests for the denominator.
package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"

import (
	"sort"
	"time"
)

// Window is a stretch of time, in Unix nanoseconds: integer arithmetic
// keeps the per-interval work cheap.
type Window struct{ Start, End int64 }

// Span returns the window [start, end).
func Span(start, end time.Time) Window { return Window{start.UnixNano(), end.UnixNano()} }

// Interval is a stretch of GPU time with the energy measured for it.
type Interval struct {
	Window
	Joules float64
}

// Request is a request's window on the GPU and its phases' windows.
type Request struct {
	Window
	Phases []Window
}

// Share is a request's energy and its phases'.
type Share struct {
	Joules float64
	Phases []float64
}

// Overlap returns the seconds two windows share.
func Overlap(a, b Window) float64 {
	lo, hi := max(a.Start, b.Start), min(a.End, b.End)
	if hi <= lo {
		return 0
	}
	return float64(hi-lo) / 1e9
}

// Split returns each request's share of the intervals' energy. Intervals
// must be in time order and must not overlap each other (as a GPU's sample
// intervals are).
func Split(intervals []Interval, reqs []Request) []Share {
	shares := make([]Share, len(reqs))
	// Each request touches only the intervals of its own window: find them
	// by binary search, so the work grows with the requests' lengths, not
	// with requests × intervals.
	ranges := make([][2]int, len(reqs))
	total := make([]float64, len(intervals))
	for i, r := range reqs {
		shares[i].Phases = make([]float64, len(r.Phases))
		lo, hi := Range(intervals, r.Window)
		ranges[i] = [2]int{lo, hi}
		for k := lo; k < hi; k++ {
			total[k] += Overlap(intervals[k].Window, r.Window)
		}
	}
	for i, r := range reqs {
		for k := ranges[i][0]; k < ranges[i][1]; k++ {
			iv := intervals[k]
			w := iv.Window
			over := Overlap(w, r.Window)
			if over == 0 || total[k] == 0 {
				continue
			}
			perSecond := iv.Joules / total[k]
			shares[i].Joules += perSecond * over
			for p, ph := range r.Phases {
				// The phase's part of this request's overlap with the interval.
				shares[i].Phases[p] += perSecond * Overlap(w, Window{max(ph.Start, r.Start), min(ph.End, r.End)})
			}
		}
	}
	return shares
}

// Range returns the indexes [lo, hi) of the time-ordered intervals that
// window w overlaps.
func Range(intervals []Interval, w Window) (lo, hi int) {
	lo = sort.Search(len(intervals), func(k int) bool { return intervals[k].End > w.Start })
	hi = sort.Search(len(intervals), func(k int) bool { return intervals[k].Start >= w.End })
	return lo, max(lo, hi)
}
