package attribution

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano()

func at(s float64) int64 { return t0 + int64(s*1e9) }

func admit(b *Book, pieces []Piece, now int64) {
	var r Request
	r.Cost(pieces, b.width, now)
	b.Admit(&r)
}

func release(b *Book, pieces []Piece, now int64, shares []float64) bool {
	var r Request
	r.Cost(pieces, b.width, now)
	known, _ := b.Release(&r, shares)
	return known
}

// longAfter is a moment long after the bins of the tests: their weight is known.
var longAfter = at(3600)

func testBook(ratio float64) *Book {
	return NewBook(Config{Resolution: 100 * time.Millisecond, Horizon: time.Minute, SamplingRatio: ratio})
}

// freeze gives every bin of [from, to) s the same power, and the bins
// before, back to the first that is not final, none.
func freeze(b *Book, from, to float64, watts float64) {
	lo, hi, ok := b.Unfrozen(min(b.FinalTo(), b.Index(at(from))), b.Index(at(to)))
	if !ok {
		return
	}
	for i := lo; i < hi; i++ {
		j := 0.0
		if b.Start(i) >= at(from) {
			j = watts * 0.1
		}
		b.Freeze(i, j, true, bottleneck.MemoryBound)
	}
}

func closeTo(t *testing.T, want, got float64) {
	t.Helper()
	assert.InDelta(t, want, got, 1e-9*math.Max(1, math.Abs(want)))
}

func TestQueueTakesNoEnergyAndCostRatesShare(t *testing.T) {
	b := testBook(1)
	queued := []Piece{{at(0), at(1), 0}, {at(1), at(2), 3}}
	other := []Piece{{at(0), at(2), 1}}
	admit(b, queued, longAfter)
	admit(b, other, longAfter)
	freeze(b, 0, 2, 100) // 100 W: 100 J per second
	s1, s2 := make([]float64, 2), make([]float64, 1)
	release(b, queued, longAfter, s1)
	release(b, other, longAfter, s2)
	closeTo(t, 0, s1[0])
	closeTo(t, 75, s1[1]) // 3:1 in the second second
	closeTo(t, 100+25, s2[0])
	b.Finalize(b.Index(at(2)))
	tot := b.Totals()
	closeTo(t, 200, tot.Measured)
	closeTo(t, 200, tot.Attributed)
	closeTo(t, 0, tot.Idle)
	closeTo(t, 0, tot.Correction)
}

func TestOrderIndependentWithinTheWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([][]Piece, 12)
	for i := range reqs {
		s := rng.Float64() * 5
		q, p, d := s+rng.Float64(), 0.0, 0.0
		p = q + 0.05 + rng.Float64()*0.3
		d = p + 0.5 + rng.Float64()*3
		reqs[i] = []Piece{{at(s), at(q), 0}, {at(q), at(p), 500 + rng.Float64()*1000}, {at(p), at(d), 20 + rng.Float64()*10}}
	}
	run := func(order []int) []float64 {
		b := testBook(1)
		for _, i := range order { // all arrive before any release: within the window
			admit(b, reqs[i], longAfter)
		}
		lo, hi, _ := b.Unfrozen(b.FinalTo(), b.Index(at(12)))
		for i := lo; i < hi; i++ {
			b.Freeze(i, 30+float64(i%7), true, bottleneck.ComputeBound)
		}
		out := make([]float64, len(reqs))
		for _, i := range order {
			sh := make([]float64, 3)
			release(b, reqs[i], longAfter, sh)
			out[i] = sh[0] + sh[1] + sh[2]
		}
		b.Finalize(hi)
		tot := b.Totals()
		closeTo(t, tot.Measured, tot.Attributed+tot.Idle+tot.Unsampled+tot.Correction)
		closeTo(t, 0, tot.Correction)
		return out
	}
	want := run(rng.Perm(len(reqs)))
	for range 20 {
		got := run(rng.Perm(len(reqs)))
		for i := range want {
			assert.InDelta(t, want[i], got[i], 1e-9*want[i])
		}
	}
}

func TestLateRequestGetsItsFairShareAndTheBooksClose(t *testing.T) {
	b := testBook(1)
	early := []Piece{{at(0), at(2), 1}}
	late := []Piece{{at(1), at(2), 1}}
	admit(b, early, longAfter)
	freeze(b, 0, 3, 100)
	s := make([]float64, 1)
	release(b, early, longAfter, s)
	closeTo(t, 200, s[0]) // alone, as far as anyone knew
	b.Finalize(b.Index(at(3)))
	admit(b, late, longAfter)
	s[0] = 0
	release(b, late, longAfter, s)
	closeTo(t, 50, s[0]) // fair: half of the second second, not the leftovers (none)
	tot := b.Totals()
	closeTo(t, 300, tot.Measured)
	closeTo(t, 250, tot.Attributed)
	closeTo(t, 100, tot.Idle)
	closeTo(t, -50, tot.Correction)
	closeTo(t, tot.Measured, tot.Attributed+tot.Idle+tot.Unsampled+tot.Correction)
}

func TestSamplingRatioLeavesTheUnseenTheirShare(t *testing.T) {
	b := testBook(0.25)
	r := []Piece{{at(0), at(1), 1}}
	admit(b, r, longAfter)
	freeze(b, 0, 1, 100)
	s := make([]float64, 1)
	release(b, r, longAfter, s)
	closeTo(t, 25, s[0])
	b.Finalize(b.Index(at(1)))
	tot := b.Totals()
	closeTo(t, 75, tot.Unsampled)
	closeTo(t, 0, tot.Correction)
}

func TestWaitingRequestHoldsFinalisation(t *testing.T) {
	b := testBook(1)
	r := []Piece{{at(0.5), at(1), 1}}
	admit(b, r, longAfter)
	freeze(b, 0, 2, 100)
	b.Finalize(b.Index(at(2)))
	require.Equal(t, b.Index(at(0.5)), b.FinalTo())
	release(b, r, longAfter, make([]float64, 1))
	b.Finalize(b.Index(at(2)))
	require.Equal(t, b.Index(at(2)), b.FinalTo())
	assert.Equal(t, bottleneck.MemoryBound, b.Label(b.Index(at(0.6))))
}

func TestHorizonBoundsMemoryAndDropsOldBins(t *testing.T) {
	b := testBook(1)
	admit(b, []Piece{{at(0), at(1), 1}}, longAfter)
	admit(b, []Piece{{at(600), at(601), 1}}, longAfter) // ten minutes later: the first is dropped
	lo, hi := b.clip(b.Index(at(0)), b.Index(at(601)))
	assert.LessOrEqual(t, hi-lo, int64(len(b.bins)))
	assert.Greater(t, lo, b.Index(at(1)))
}

// Once final bins show that half of a bin's weight arrives ten seconds
// after it, a request released a second after its bins takes half their
// energy, leaving the other half to the requests still running.
func TestWeightStillToArriveIsLeftForIt(t *testing.T) {
	b := testBook(1)
	for k := range 300 { // 30 s of bins, each shared by an early and a late request
		s := 0.1 * float64(k)
		early, lateOne := []Piece{{at(s), at(s + 0.1), 1}}, []Piece{{at(s), at(s + 0.1), 1}}
		admit(b, early, at(s+0.1+0.5))
		admit(b, lateOne, at(s+0.1+10))
		freeze(b, s, s+0.1, 100)
		release(b, early, at(s+0.1+12), make([]float64, 1)) // by 12 s everything has arrived
		release(b, lateOne, at(s+0.1+12), make([]float64, 1))
	}
	b.Finalize(b.Index(at(30)))
	assert.InDelta(t, 0, b.Totals().Correction, 1e-9*b.Totals().Measured)
	alone := []Piece{{at(40), at(41), 1}}
	admit(b, alone, at(41.5))
	freeze(b, 30, 41, 100)
	s := make([]float64, 1)
	release(b, alone, at(42), s)
	assert.InDelta(t, 50, s[0], 5, "about half of 100 J: a second old, half the weight is still to come")
}

// A bin's time is split between the requests that ran in it in the same
// proportions as its energy, also where its energy is unknown (a label
// says the GPU reported): the requests' GPU-seconds add up to the busy
// time, idle bins' time is idle, and the time books close like the energy's.
func TestTimeIsSplitLikeTheEnergy(t *testing.T) {
	for _, ratio := range []float64{1, 0.5} {
		b := testBook(ratio)
		queued := []Piece{{at(0), at(1), 0}, {at(1), at(2), 3}}
		other := []Piece{{at(0), at(3), 1}}
		admit(b, queued, longAfter)
		admit(b, other, longAfter)
		// Before 0: nothing reported; [0, 2): 100 W; [2, 3): no energy, but
		// labelled; [3, 4): 5 J a bin, nobody ran.
		lo, hi, _ := b.Unfrozen(b.FinalTo(), b.Index(at(4)))
		for i := lo; i < hi; i++ {
			switch s := b.Start(i); {
			case s < at(0):
				b.Freeze(i, 0, false, "")
			case s < at(2):
				b.Freeze(i, 10, true, bottleneck.MemoryBound)
			default:
				b.Freeze(i, 5, s >= at(3), bottleneck.ComputeBound)
			}
		}
		s1, s2 := make([]float64, 2), make([]float64, 1)
		_, sec1 := b.Release(cost(b, queued), s1)
		_, sec2 := b.Release(cost(b, other), s2)
		closeTo(t, ratio*0.75, sec1)
		closeTo(t, ratio*(1+0.25+1), sec2)
		closeTo(t, ratio*75, s1[1])
		closeTo(t, ratio*125, s2[0]) // no energy from [2, 3)
		b.Finalize(b.Index(at(4)))
		tot := b.Totals()
		closeTo(t, ratio*3, tot.AttributedSeconds)
		closeTo(t, 1, tot.IdleSeconds)
		closeTo(t, (1-ratio)*3, tot.UnsampledSeconds)
		closeTo(t, 0, tot.CorrectionSeconds)
		closeTo(t, labelled(tot.Seconds), tot.AttributedSeconds+tot.IdleSeconds+tot.UnsampledSeconds+tot.CorrectionSeconds)
		closeTo(t, 5*10, tot.Idle) // ten 0.5 J bins
	}
}

// A request released after its bins are final gets its fair share of
// their time too; the time books count what that gives beyond the final
// shares as (negative) correction, and still close.
func TestLateRequestsTimeIsCorrected(t *testing.T) {
	b := testBook(1)
	early := []Piece{{at(0), at(2), 1}}
	late := []Piece{{at(1), at(2), 1}}
	admit(b, early, longAfter)
	freeze(b, 0, 2, 100)
	_, s := b.Release(cost(b, early), make([]float64, 1))
	closeTo(t, 2, s)
	b.Finalize(b.Index(at(2)))
	admit(b, late, longAfter)
	_, s = b.Release(cost(b, late), make([]float64, 1))
	closeTo(t, 0.5, s)
	tot := b.Totals()
	closeTo(t, 2.5, tot.AttributedSeconds)
	closeTo(t, -0.5, tot.CorrectionSeconds)
	closeTo(t, labelled(tot.Seconds), tot.AttributedSeconds+tot.IdleSeconds+tot.UnsampledSeconds+tot.CorrectionSeconds)
}

func cost(b *Book, pieces []Piece) *Request {
	r := new(Request)
	r.Cost(pieces, b.width, longAfter)
	return r
}

// labelled is the time of every label.
func labelled(s bottleneck.Times) float64 {
	var sum float64
	for _, l := range bottleneck.Labels {
		sum += s.Of(l)
	}
	return sum
}

// The memory bound documented in docs/attribution.md is a bin's real size.
func TestBinBytes(t *testing.T) {
	assert.Equal(t, uintptr(BinBytes), unsafe.Sizeof(bin{}))
}
