package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"

import "sort"

// Ledger remembers, for one GPU, the stretches of time whose energy has
// already been given to requests. Requests are released in rounds (each
// when the GPU samples covering its end have arrived); a request released
// later that overlaps time already given away gets only the energy of the
// time that is left, so that across rounds too the requests' energies never
// add up to more than the GPU drew. Within a round, Split shares fairly.
//
// Ranges are kept merged and sorted; MaxRanges bounds them (the oldest go
// first), and Forget drops what is too old to be claimed again.
type Ledger struct {
	ranges []Window // sorted, non-overlapping, non-adjacent
}

// MaxRanges bounds a ledger's memory: separate stretches of claimed time
// only arise between idle gaps, so a GPU rarely has more than a few per
// minute.
const MaxRanges = 4096

// Unclaimed returns the fraction of w not yet claimed, 0..1.
func (l *Ledger) Unclaimed(w Window) float64 {
	if w.End <= w.Start {
		return 0
	}
	var claimed int64
	i := sort.Search(len(l.ranges), func(i int) bool { return l.ranges[i].End > w.Start })
	for ; i < len(l.ranges) && l.ranges[i].Start < w.End; i++ {
		claimed += min(l.ranges[i].End, w.End) - max(l.ranges[i].Start, w.Start)
	}
	return 1 - float64(claimed)/float64(w.End-w.Start)
}

// Claim marks w as given away.
func (l *Ledger) Claim(w Window) {
	if w.End <= w.Start {
		return
	}
	// The ranges that touch w merge with it.
	lo := sort.Search(len(l.ranges), func(i int) bool { return l.ranges[i].End >= w.Start })
	hi := lo
	for hi < len(l.ranges) && l.ranges[hi].Start <= w.End {
		w.Start, w.End = min(w.Start, l.ranges[hi].Start), max(w.End, l.ranges[hi].End)
		hi++
	}
	l.ranges = append(l.ranges[:lo], append([]Window{w}, l.ranges[hi:]...)...)
	if n := len(l.ranges) - MaxRanges; n > 0 {
		l.ranges = append(l.ranges[:0], l.ranges[n:]...)
	}
}

// Forget drops the claims that end before t.
func (l *Ledger) Forget(t int64) {
	i := sort.Search(len(l.ranges), func(i int) bool { return l.ranges[i].End >= t })
	l.ranges = append(l.ranges[:0], l.ranges[i:]...)
}

// Len returns the number of separate claimed stretches.
func (l *Ledger) Len() int { return len(l.ranges) }
