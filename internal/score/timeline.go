package score

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// timeline is the truth's bins, per GPU in time order, and the window W
// they cover.
type timeline struct {
	width    int64
	from, to int64 // W: the first bin's start to the last bin's end
	byGPU    map[int][]infersim.TruthBin
	gpus     []int // the GPUs with bins, in order: sums come out the same every run
}

func newTimeline(truth *infersim.Truth) (*timeline, error) {
	width := truth.Header.BinWidthNS
	if width <= 0 {
		return nil, fmt.Errorf("truth header: bin_width_ns must be positive, not %d", width)
	}
	if len(truth.Bins) == 0 {
		return nil, errors.New("truth has no bins: nothing to score against")
	}
	tl := &timeline{width: width, from: truth.Bins[0].Start, to: truth.Bins[0].Start + width, byGPU: map[int][]infersim.TruthBin{}}
	for _, b := range truth.Bins {
		tl.byGPU[b.GPU] = append(tl.byGPU[b.GPU], b)
		tl.from, tl.to = min(tl.from, b.Start), max(tl.to, b.Start+width)
	}
	tl.gpus = slices.Sorted(maps.Keys(tl.byGPU))
	for _, bins := range tl.byGPU {
		slices.SortFunc(bins, func(a, b infersim.TruthBin) int { return cmp.Compare(a.Start, b.Start) })
	}
	return tl, nil
}

// overlapping calls fn for every bin of gpu that overlaps [from, to), with
// the overlap in nanoseconds.
func (tl *timeline) overlapping(gpu int, from, to int64, fn func(b *infersim.TruthBin, overlap int64)) {
	bins := tl.byGPU[gpu]
	for i := sort.Search(len(bins), func(i int) bool { return bins[i].Start+tl.width > from }); i < len(bins) && bins[i].Start < to; i++ {
		fn(&bins[i], overlap(bins[i].Start, bins[i].Start+tl.width, from, to))
	}
}

// overlap is the length of [a0, a1) ∩ [b0, b1), 0 when they are disjoint.
func overlap(a0, a1, b0, b1 int64) int64 {
	return max(0, min(a1, b1)-max(a0, b0))
}
