package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"

import (
	"cmp"
	"slices"
)

// EngineGap is the longest gap between two of a group's engine counts
// that still bounds the bins between them: a count says who was running
// at its instant only, and a request that started and ended between two
// counts further apart than this could be missed by both.
const EngineGap = int64(60e9)

// engineCount is the inference engines' own count of the requests they
// were running at t (the servers' running-request gauges the processor
// reads), summed over the engines serving a group's GPUs.
type engineCount struct {
	t int64
	n float64
}

// engineCounts are a group's engine counts in time order, at most one per
// bin (a later count in the same bin replaces the earlier), and none older
// than the ledger's window: max(bins kept) × 16 bytes.
type engineCounts struct {
	counts []engineCount
}

// add records count n at t; it reports false for a count older than the
// newest held, which is dropped (a scrape's counts arrive in order).
func (ec *engineCounts) add(t int64, n float64, width, lo int64, limit int) bool {
	if k := len(ec.counts); k > 0 {
		last := &ec.counts[k-1]
		switch {
		case t < last.t:
			return false
		case floorDiv(t, width) == floorDiv(last.t, width):
			*last = engineCount{t, n}
			return true
		}
	}
	// Drop what the window has left behind, and the oldest past limit.
	drop := 0
	for drop < len(ec.counts) && floorDiv(ec.counts[drop].t, width) < lo {
		drop++
	}
	drop = max(drop, len(ec.counts)+1-limit)
	ec.counts = append(slices.Delete(ec.counts, 0, min(drop, len(ec.counts))), engineCount{t, n})
	return true
}

// unseen says whether a request the engines were running around t had not
// been admitted: at either of the two counts that bracket t, the engines
// counted more requests running than the books had admitted to that
// instant's bin (present, in request-seconds over the bin's width), by
// half a request or more. known is
// false where no two counts within EngineGap bracket t, or where one's bin
// is outside the window.
func (ec *engineCounts) unseen(t int64, present func(t int64) (float64, bool)) (unseen, known bool) {
	k, exact := slices.BinarySearchFunc(ec.counts, t, func(c engineCount, t int64) int { return cmp.Compare(c.t, t) })
	if exact {
		return ec.unseenAt(ec.counts[k], present)
	}
	if k == 0 || k == len(ec.counts) || ec.counts[k].t-ec.counts[k-1].t > EngineGap {
		return false, false
	}
	a, b := ec.counts[k-1], ec.counts[k]
	ua, okA := ec.unseenAt(a, present)
	ub, okB := ec.unseenAt(b, present)
	return ua || ub, okA && okB
}

// unseenAt says whether count c exceeds the requests admitted to its bin
// by half a request or more; known is false where its bin is outside the
// window.
func (ec *engineCounts) unseenAt(c engineCount, present func(t int64) (float64, bool)) (unseen, known bool) {
	p, ok := present(c.t)
	return ok && c.n-p >= 0.5, ok
}
