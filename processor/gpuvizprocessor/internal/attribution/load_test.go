package attribution

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
)

func TestLoadModelFitsTheWeightOfActivity(t *testing.T) {
	ask := groupActivity{tensor: 0.5, dram: 0.25}
	for _, tc := range []struct {
		name         string
		weight       func(tensor, dram float64) float64
		bins         int
		noActivity   bool
		ct, cd, want float64
		ok           bool
	}{
		{name: "both signals", weight: func(x, y float64) float64 { return 2*x + 3*y }, bins: 200, ct: 2, cd: 3, want: 1.75, ok: true},
		{name: "tensor alone explains it", weight: func(x, _ float64) float64 { return 4 * x }, bins: 200, ct: 4, want: 2, ok: true},
		{name: "too few bins", weight: func(x, y float64) float64 { return x + y }, bins: minLoadBins - 1, ct: 1, cd: 1},
		{name: "no activity ever", weight: func(_, _ float64) float64 { return 1 }, bins: 200, noActivity: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m loadModel
			for k := range tc.bins {
				x, y := float64(k%7)/10, float64(k%5)/10
				if tc.noActivity {
					x, y = 0, 0
				}
				m.learn(groupActivity{tensor: float32(x), dram: float32(y), gpus: 1}, tc.weight(x, y))
			}
			assert.InDelta(t, tc.ct, m.ct, 1e-5)
			assert.InDelta(t, tc.cd, m.cd, 1e-5)
			got, ok := m.predict(ask)
			require.Equal(t, tc.ok, ok)
			assert.InDelta(t, tc.want, got, 1e-5)
		})
	}
}

// Where the joint fit would give one signal a negative weight, the other
// is fit alone: a bin with more activity never predicts less weight.
func TestLoadModelKeepsItsCoefficientsNonNegative(t *testing.T) {
	var m loadModel
	for k := range 200 {
		x, y := float64(k%7)/10, float64(k%5)/10
		m.learn(groupActivity{tensor: float32(x), dram: float32(y), gpus: 1}, max(0, 4*x-y))
	}
	assert.GreaterOrEqual(t, m.ct, 0.0)
	assert.GreaterOrEqual(t, m.cd, 0.0)
	assert.True(t, m.ct == 0 || m.cd == 0, "one signal alone: %v, %v", m.ct, m.cd)
	got, ok := m.predict(groupActivity{tensor: 0.5, dram: 0.25})
	require.True(t, ok)
	assert.Greater(t, got, 0.0)
}

// freezeActive is freeze with activity tensor and dram seconds in each
// bin of [from, to).
func freezeActive(b book, from, to, watts, tensor, dram float64) {
	lo, hi, ok := b.Unfrozen(min(b.FinalTo(), b.Index(at(from))), b.Index(at(to)))
	if !ok {
		return
	}
	for i := lo; i < hi; i++ {
		j, act := 0.0, Activity{}
		if b.Start(i) >= at(from) {
			j, act = watts*0.1, Activity{TensorSeconds: tensor, DRAMSeconds: dram, Known: true}
		}
		b.Freeze(i, j, true, bottleneck.MemoryBound, act)
	}
}

// learnedBook returns books that have learned, over 30 s of final bins of
// two requests each, that a request's 0.1 s in a bin (weight 0.1) shows as
// 0.002 tensor- and 0.001 DRAM-activity-seconds.
func learnedBook(t *testing.T) book {
	t.Helper()
	b := halfLate(t, func(b book, from, to float64) { freezeActive(b, from, to, 100, 0.004, 0.002) })
	require.GreaterOrEqual(t, b.group.load.fit.n, float64(minLoadBins), "learned")
	return b
}

// Once the books have learned how a bin's final weight follows its GPUs'
// activity, a request released while its neighbours' spans are still to
// come leaves them what the activity says they did, not what the arrival
// curve says on average.
func TestActivityEstimatesTheWeightStillToArrive(t *testing.T) {
	b := learnedBook(t)
	// Alone so far, in bins whose activity is four such requests'.
	alone := []Piece{{Start: at(40), End: at(41), Rate: 1}}
	admit(b, alone, at(41.5))
	freeze(b, 30, 40, 100)
	freezeActive(b, 40, 41, 100, 0.008, 0.004)
	s := make([]float64, 1)
	release(b, alone, at(42), s)
	assert.InDelta(t, 25, s[0], 1e-6, "a quarter of 100 J: the activity is four requests'")

	// Where a GPU measured no activity, the arrival curve answers.
	other := []Piece{{Start: at(45), End: at(46), Rate: 1}}
	admit(b, other, at(46.5))
	freeze(b, 41, 46, 100)
	s[0] = 0
	release(b, other, at(47), s)
	assert.InDelta(t, 50, s[0], 5, "about half: the arrival curve's estimate")
}

// Past finalize_after, the weight a bin's activity says is still to come
// fades as the arrival curve says little more arrives: kept for requests
// that never come, the fit's error would be taken from those that did.
// learnedBook's curve has half a bin's weight arrive at once and half ten
// seconds on.
func TestTheWeightStillToComeFadesPastFinalizeAfter(t *testing.T) {
	for _, tc := range []struct {
		name          string
		finalizeAfter float64 // s; 0: off
		releasedAt    float64 // s
		wantJ         float64
		delta         float64
	}{
		{"off", 0, 80, 25, 1e-6},
		{"younger than finalize_after", 30, 42, 25, 1e-6},
		// 40 s old: the curve has had everything in since 12 s.
		{"older than finalize_after", 30, 80, 100, 1e-6},
		// 9-10 s old against 5 s: (1 - c(age)) / (1 - c(5 s)) is 0.75 to
		// 0.5, so the bins' weight to come is 0.3 x that, not 0.3.
		{"part of the way", 5, 51, 35, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := learnedBook(t)
			b.l.finalAge = tc.finalizeAfter
			// Alone so far, in bins whose activity is four such requests'.
			alone := []Piece{{Start: at(40), End: at(41), Rate: 1}}
			admit(b, alone, at(41.5))
			freeze(b, 30, 40, 100)
			freezeActive(b, 40, 41, 100, 0.008, 0.004)
			freeze(b, 41, tc.releasedAt-1, 100)
			s := make([]float64, 1)
			release(b, alone, at(tc.releasedAt), s)
			assert.InDelta(t, tc.wantJ, s[0], tc.delta)
		})
	}
}

// neighbours returns learned books with one request admitted to each of two
// adjacent bins, [40, 40.1) s and [40.1, 40.2) s, both frozen at 100 W:
// the left one's activity is two requests', the right one's that of right
// requests (its request is not released). It returns the left request.
func neighbours(t *testing.T, right float64) (book, []Piece) {
	t.Helper()
	b := learnedBook(t)
	left := []Piece{{Start: at(40), End: at(40.1), Rate: 1}}
	admit(b, left, at(40.5))
	admit(b, []Piece{{Start: at(40.1), End: at(40.2), Rate: 1}}, at(40.5))
	freeze(b, 30, 40, 100)
	freezeActive(b, 40, 40.1, 100, 0.004, 0.002)
	freezeActive(b, 40.1, 40.2, 100, right*0.002, right*0.001)
	return b, left
}

// A tick's activity is read by every bin it touches, while each bin's
// admitted weight is its own: where a bin's activity says more than was
// admitted and a neighbour's says less, the neighbour's surplus offsets the
// excess, and only what is left waits for requests still to come. A
// neighbour's own excess adds nothing.
func TestANeighboursSurplusOffsetsABinsExcess(t *testing.T) {
	for _, tc := range []struct {
		name      string
		neighbour float64 // the right bin's activity, in requests
		more      float64 // requests admitted to the right bin beyond its one
		want      float64 // J the left request gets of its bin's 10
	}{
		{"the neighbour ran unseen what the left bin read", 0, 0, 10},
		{"half of it", 0.5, 0, 10 / 1.5},
		{"the neighbour read exactly its own", 1, 0, 5},
		{"the neighbour's excess is its own", 2, 0, 5},
		// Its surplus three times the left bin's excess: nothing is left
		// to come, and the left bin's weight is never taken below what
		// was admitted.
		{"the neighbour's surplus exceeds the excess", 0, 2, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, left := neighbours(t, tc.neighbour)
			if tc.more > 0 {
				admit(b, []Piece{{Start: at(40.1), End: at(40.2), Rate: tc.more}}, at(40.5))
			}
			s := make([]float64, 1)
			release(b, left, at(41), s)
			assert.InDelta(t, tc.want, s[0], 1e-6)
		})
	}
}

// How far a neighbour's surplus offsets a bin's excess follows how far the
// readings behind the bin's activity reach: a request 500 ms to the right
// whose bin read none of its work is out of a 250 ms tick's reach and in a
// 1 s scrape's; one 200 ms to the right is at the edge of a 250 ms tick's
// (two bins on each side), in it. Activity of unknown spread reaches as
// the default tick's.
func TestTheNettingReachFollowsTheReadings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spread time.Duration
		away   time.Duration // how far right of it the unread request ran
		want   float64       // J the left request gets of its bin's 10
	}{
		{"a 250 ms tick: out of reach, half is left to come", 250 * time.Millisecond, 500 * time.Millisecond, 5},
		{"unknown: as the default tick", 0, 500 * time.Millisecond, 5},
		{"a 1 s scrape: the surplus offsets the excess", time.Second, 500 * time.Millisecond, 10},
		{"a 250 ms tick: two bins away, in reach", 250 * time.Millisecond, 200 * time.Millisecond, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := learnedBook(t)
			left := []Piece{{Start: at(40), End: at(40.1), Rate: 1}}
			admit(b, left, at(41))
			right := at(40) + int64(tc.away)
			admit(b, []Piece{{Start: right, End: right + int64(100*time.Millisecond), Rate: 1}}, at(41))
			freeze(b, 30, 40, 100)
			lo, hi, ok := b.Unfrozen(b.Index(at(40)), b.Index(at(41)))
			require.True(t, ok)
			for i := lo; i < hi; i++ {
				act := Activity{Spread: tc.spread, Known: true}
				if i == b.Index(at(40)) {
					act.TensorSeconds, act.DRAMSeconds = 0.004, 0.002 // two requests' work
				}
				b.Freeze(i, 10, true, bottleneck.MemoryBound, act)
			}
			s := make([]float64, 1)
			release(b, left, at(41.5), s)
			assert.InDelta(t, tc.want, s[0], 1e-6)
		})
	}
}

// A release reads the weight still to come as the books stand: a request
// admitted after one release changes what the next one reads (the books
// compute it once per round and keep it only until they change).
func TestTheWeightStillToComeFollowsWhatIsAdmitted(t *testing.T) {
	b, left := neighbours(t, 0.5)
	s := make([]float64, 1)
	release(b, left, at(41), s)
	assert.InDelta(t, 10/1.5, s[0], 1e-6, "half the excess is the neighbour's surplus")

	// Half a request more in the left bin: its excess is now what the
	// neighbour's surplus offsets, and nothing is left to come.
	extra := []Piece{{Start: at(40), End: at(40.1), Rate: 0.5}}
	admit(b, extra, at(41))
	s[0] = 0
	release(b, extra, at(41), s)
	assert.InDelta(t, 10*0.05/0.15, s[0], 1e-6)
}

// So does a bin frozen after a release: the neighbour frozen since, whose
// activity shows a surplus, offsets the excess the first release kept.
func TestTheWeightStillToComeFollowsWhatIsFrozen(t *testing.T) {
	b := learnedBook(t)
	left := []Piece{{Start: at(40), End: at(40.1), Rate: 1}}
	admit(b, left, at(40.5))
	admit(b, []Piece{{Start: at(40.1), End: at(40.2), Rate: 1}}, at(40.5))
	freeze(b, 30, 40, 100)
	freezeActive(b, 40, 40.1, 100, 0.004, 0.002) // two requests' activity, one admitted
	s := make([]float64, 1)
	release(b, left, at(41), s)
	assert.InDelta(t, 5, s[0], 1e-6, "the neighbour not frozen yet: half is left to come")

	freezeActive(b, 40.1, 40.2, 100, 0, 0) // the neighbour read none of its request's work
	s[0] = 0
	release(b, left, at(41), s)
	assert.InDelta(t, 10, s[0], 1e-6)
}

// What a prefill still to come weighs is not what it costs: its tokens per
// second are many, its steps few. Books that learned 30 s of bins each run
// half by a prompt's chunk (weight 50) and wholly by a decode (weight 1,
// shared cost 40), all at the same activity, see a bin with that activity
// where only the chunk has arrived. The chunk takes its cost over the
// bin's final cost in its steps, as it would with the decode admitted, not
// its weight's share of the bin's final weight (50/51).
// With head sampling the visible requests stand for 1/ratio as many: the
// fit learns the final bins' cost as a release reads it, their chunks'
// time over the share of the bin the visible requests took.
func TestTheCostStillToComeIsPredictedInSteps(t *testing.T) {
	for _, ratio := range []float64{1, 0.5} {
		t.Run(fmt.Sprint(ratio), func(t *testing.T) { costStillToCome(t, ratio) })
	}
}

func chunkAt(s float64) []Piece {
	return []Piece{{Start: at(s), End: at(s + 0.05), Rate: 1000, Chunk: true}}
}

func decodeAt(s float64) []Piece {
	return []Piece{{Start: at(s), End: at(s + 0.1), Rate: 10, Shared: 400}}
}

// chunkedBook returns books that have learned 30 s of bins, each run half
// by a prompt's chunk (chunkAt) and wholly by a decode (decodeAt), all at
// the same activity.
func chunkedBook(t *testing.T, ratio float64) book {
	t.Helper()
	b := testBook(ratio)
	for k := range 300 {
		s := 0.1 * float64(k)
		admit(b, chunkAt(s), longAfter)
		admit(b, decodeAt(s), longAfter)
		freezeActive(b, s, s+0.1, 100, 0.004, 0.002)
		release(b, chunkAt(s), longAfter, make([]float64, 1))
		release(b, decodeAt(s), longAfter, make([]float64, 1))
	}
	b.Finalize(b.Index(at(30)))
	require.GreaterOrEqual(t, b.group.cost.fit.n, float64(minLoadBins), "learned")
	return b
}

func costStillToCome(t *testing.T, ratio float64) {
	b := chunkedBook(t, ratio)
	admit(b, chunkAt(40), at(40.5))
	freeze(b, 30, 40, 100)
	freezeActive(b, 40, 40.1, 100, 0.004, 0.002)
	s := make([]float64, 1)
	release(b, chunkAt(40), at(40.5), s)
	// The final bins' cost in their steps: the chunk, and the decode at
	// c = 1/2 of the bin over the ratio with the read of the steps that
	// only decode, the visible requests' part of it.
	c := min(1, 0.5/ratio)
	decode := ((1-c)*memoryBoundPower+c*decodeStepRatio)*1 + (1-c)*memoryBoundPower*ratio*40
	assert.InDelta(t, 10*ratio*50/(50+decode), s[0], 1e-6)
}

// A request whose cost in a bin is above what the fit says the bin's
// whole cost will be takes no more than the bin: the cost still to come
// is never negative. learnedBook's bins cost 0.128 at two requests'
// activity; this request's share of the steps' weight read costs 100 times
// that.
func TestACostAboveThePredictionTakesNoMoreThanTheBin(t *testing.T) {
	b := learnedBook(t)
	r := []Piece{{Start: at(40), End: at(40.1), Rate: 1, Shared: 400}}
	admit(b, r, at(40.5))
	freeze(b, 30, 40, 100)
	freezeActive(b, 40, 40.1, 100, 0.004, 0.002)
	s := make([]float64, 1)
	release(b, r, at(41), s)
	assert.InDelta(t, 10, s[0], 1e-6, "the whole bin, not more")
}

// The fits learn a bin of a group once its last GPU makes it final, and
// only where every GPU of the group measured its activity.
func TestAGroupLearnsABinOnceAllItsGPUsHaveIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		active  bool // the second GPU measured activity
		learned bool
	}{
		{"both measured", true, true},
		{"one did not", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(testConfig(1))
			first, second := book{l.Add()}, book{l.Add()}
			grp := l.Groups([]*GPU{first.GPU, second.GPU}, nil)
			require.Len(t, grp, 1)
			r := cost(first, []Piece{{Start: at(0), End: at(20), Rate: 1}})
			grp[0].Admit(r)
			freezeActive(first, 0, 20, 100, 0.004, 0.002)
			grp[0].Release(r, make([]float64, 1))
			first.Finalize(first.Index(at(20)))
			assert.False(t, grp[0].Learned(), "the second GPU has frozen nothing")
			if tc.active {
				freezeActive(second, 0, 20, 100, 0.004, 0.002)
			} else {
				freeze(second, 0, 20, 100)
			}
			second.Finalize(second.Index(at(20)))
			assert.Equal(t, tc.learned, grp[0].Learned())
		})
	}
}

// Half of a group's GPUs waiting through its busy bins is not most of
// them: one GPU of two waits for its host, the other works.
func TestHalfAGroupWaitingIsNotWaiting(t *testing.T) {
	l := NewLedger(testConfig(1))
	gpus := []*GPU{l.Add(), l.Add()}
	grp := l.Groups(gpus, nil)
	require.Len(t, grp, 1)
	r := cost(book{gpus[0]}, []Piece{{Start: at(0), End: at(20), Rate: 10}})
	grp[0].Admit(r)
	for k, g := range gpus {
		lo, hi, ok := g.Unfrozen(min(g.FinalTo(), l.Index(at(0))), l.Index(at(20)))
		require.True(t, ok)
		for i := lo; i < hi; i++ {
			label := []bottleneck.Label{bottleneck.HostBound, bottleneck.MemoryBound}[k]
			if l.Start(i) < at(0) {
				label = bottleneck.Idle
			}
			g.Freeze(i, 10, true, label, Activity{})
		}
	}
	grp[0].Release(r, make([]float64, 1))
	for _, g := range gpus {
		g.Finalize(l.Index(at(20)))
	}
	assert.False(t, grp[0].Waiting())
}

// The arrival curve is used once 20 requests have taught it, and forgets
// with a ten-minute half-life: eleven minutes on, what they taught counts
// for less than half of it. The requests are a bin long each, too few bins
// for the fits.
func TestTheArrivalCurveLearnsFromTwentyRequestsAndForgets(t *testing.T) {
	b := testBook(1)
	for k := range 20 {
		assert.False(t, b.group.Learning(), "%d requests", k)
		admit(b, []Piece{{Start: at(float64(k)), End: at(float64(k) + 0.1), Rate: 1}}, at(21)) // one round
	}
	assert.True(t, b.group.Learning(), "20 requests")
	admit(b, []Piece{{Start: at(20 + 660), End: at(20.1 + 660), Rate: 1}}, at(21+660))
	assert.False(t, b.group.Learning(), "eleven minutes on")
}

// The fits' need is counted in bins: two requests over the same 60 bins
// bring 60 of the 100 bins, not 120.
func TestRequestsOverTheSameBinsCountThemOnce(t *testing.T) {
	b := testBook(1)
	for range 2 {
		admit(b, []Piece{{Start: at(0), End: at(6), Rate: 1}}, at(6))
	}
	assert.False(t, b.group.Learning())
}

// A fit whose joint solution gives one signal a negative weight keeps the
// signal that alone explains more of the weight.
func TestLoadModelKeepsTheSignalThatExplainsMore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		weight func(tensor, dram float64) float64
		tensor bool // the tensor signal is kept
	}{
		{"tensor", func(x, y float64) float64 { return max(0, 4*x-y) }, true},
		{"DRAM", func(x, y float64) float64 { return max(0, 4*y-x) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m loadModel
			for k := range 200 {
				x, y := float64(k%7)/10, float64(k%5)/10
				m.learn(groupActivity{tensor: float32(x), dram: float32(y), gpus: 1}, tc.weight(x, y))
			}
			f := m.fit
			tensorAlone, dramAlone := f.tv*f.tv/f.tt, f.dv*f.dv/f.dd // each one's explained sum of squares
			require.Equal(t, tc.tensor, tensorAlone > dramAlone, "the case's premise")
			assert.Equal(t, tc.tensor, m.ct > 0)
			assert.Equal(t, !tc.tensor, m.cd > 0)
		})
	}
}

// A final bin with no energy measured in it (0 J) says nothing of the
// GPU's floor: the next bin does not take its place.
func TestABinOfNoEnergyLeavesTheFloor(t *testing.T) {
	b := testBook(1)
	freeze(b, 0, 1, 100)
	b.Freeze(b.Index(at(1)), 0, true, bottleneck.Idle, Activity{})
	freeze(b, 1.1, 2, 500)
	b.Finalize(b.Index(at(2)))
	assert.InDelta(t, 100, b.floorW, 1)
}

// Readings reach the bins they touch: a tick of 250 ms two 100 ms bins on
// each side, a 1 s scrape ten, a scrape read a hair short of its interval
// as far as the interval, and an unknown spread as the default tick's.
func TestBinsReached(t *testing.T) {
	l := NewLedger(testConfig(1))
	for _, tc := range []struct {
		spread time.Duration
		want   uint8
	}{
		{250 * time.Millisecond, 2},
		{time.Second, 10},
		{time.Second - 500*time.Nanosecond, 10},
		{0, 2},
		{time.Hour, 255},
	} {
		assert.Equal(t, tc.want, l.binsReached(tc.spread), "%v", tc.spread)
	}
}

// The chunked share falls with DRAM activity at a given tensor activity
// (a decode-only step reads, a chunked step computes): its fit keeps a
// negative coefficient, and its predictions are shares.
func TestChunkModelFitsTheChunkedShareOfActivity(t *testing.T) {
	var m chunkModel
	share := func(x, y float64) float64 { return 2*x - y }
	for k := range 200 {
		x, y := 0.2+float64(k%7)/10, float64(k%5)/10
		if _, ok := m.predict(groupActivity{tensor: float32(x), dram: float32(y)}); k < minLoadBins {
			assert.False(t, ok, "not used before it has learned %d bins", minLoadBins)
		}
		m.learn(groupActivity{tensor: float32(x), dram: float32(y), gpus: 1}, share(x, y))
	}
	assert.InDelta(t, 2, m.ct, 1e-4)
	assert.InDelta(t, -1, m.cd, 1e-4)
	for _, tc := range []struct{ tensor, dram, want float64 }{
		{0.3, 0.2, 0.4}, {0.1, 0.5, 0}, {0.8, 0.1, 1},
	} {
		got, ok := m.predict(groupActivity{tensor: float32(tc.tensor), dram: float32(tc.dram)})
		require.True(t, ok)
		assert.InDelta(t, tc.want, got, 1e-4, "tensor %v, DRAM %v", tc.tensor, tc.dram)
	}
}

// Until a group's fits have learned enough final bins, requests may be
// held back (the processor's warmup_wait), which would keep their bins from
// becoming final: so LearnAhead learns a bin once it is old enough to be
// complete, released or not, and a bin learned so is not learned again
// when it becomes final.
func TestTheFitsLearnWhileTheirRequestsAreHeld(t *testing.T) {
	b := testBook(1)
	assert.True(t, b.l.Learned(), "nothing admitted: nothing to learn")
	assert.False(t, b.group.Learning())
	var held [][]Piece
	for s := 0.0; s < 30; s += 0.5 {
		r := []Piece{{Start: at(s), End: at(s + 1), Rate: 1}}
		admit(b, r, at(s+1.5))
		held = append(held, r)
		if s == 0 {
			assert.False(t, b.group.Learning(), "one request: too few to learn from")
		}
	}
	assert.True(t, b.group.Learning(), "60 requests")
	assert.False(t, b.group.Learned())
	assert.False(t, b.l.Learned())
	freezeActive(b, 0, 30.5, 100, 0.004, 0.002)

	b.Finalize(b.Index(at(5)))
	assert.Zero(t, b.group.load.fit.n, "without LearnAhead, bins are learned as they become final")
	b.LearnAhead(b.Index(at(5)))
	b.Finalize(b.Index(at(5)))
	assert.Equal(t, b.Index(at(0)), b.FinalTo(), "held requests keep their bins from being final")
	assert.False(t, b.group.Learned(), "50 bins learned")
	assert.InDelta(t, 50, b.group.load.fit.n, 1)

	b.LearnAhead(b.Index(at(20)))
	b.Finalize(b.Index(at(20)))
	assert.True(t, b.group.Learned(), "100 bins learned")
	assert.False(t, b.group.Learning())
	assert.True(t, b.l.Learned())
	assert.InDelta(t, 100, b.group.load.fit.n, 1, "learned, it learns ahead no more")
	assert.Equal(t, b.Index(at(0)), b.FinalTo())

	for _, r := range held {
		release(b, r, at(40), make([]float64, 1))
	}
	b.Finalize(b.Index(at(20)))
	assert.Equal(t, b.Index(at(20)), b.FinalTo())
	// The first 10 s learned ahead, the next 10 s as they became final:
	// 200 bins (decayed), not 300.
	assert.InDelta(t, 200, b.group.load.fit.n, 10, "bins learned ahead are not learned again as they become final")
}

// Bins whose GPUs measured no activity (no GPM) teach the fits nothing.
func TestBinsWithoutActivityTeachNothing(t *testing.T) {
	b := testBook(1)
	admit(b, []Piece{{Start: at(0), End: at(20), Rate: 1}}, at(20.5))
	freeze(b, 0, 21, 100)
	b.LearnAhead(b.Index(at(21)))
	assert.Zero(t, b.group.load.fit.n)
	assert.False(t, b.group.Learned())
}

// A forecast is of a bin's final weight, the score's weight what had
// arrived by ScoreAge: a forecast counts the part of it the arrival curve
// says arrives by then (its reach), so that requests outlasting ScoreAge
// neither hide a shortfall nor read as one. 200 bins scored alike.
func TestAForecastIsScoredOnWhatArrivesByScoreAge(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		forecast, reach, arrived float64
		bins                     int
		understated              bool
	}{
		{"right, all in by ScoreAge", 1, 1, 1, 200, false},
		{"a tenth short, all in by ScoreAge", 0.9, 1, 1, 200, true},
		{"right, a third arriving later", 1.5, 2.0 / 3, 1, 200, false},
		{"a tenth short, a third arriving later", 1.35, 2.0 / 3, 1, 200, true},
		{"a tenth short, too few bins", 0.9, 1, 1, minLoadBins / 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s forecastScore
			for range tc.bins {
				s.add(float32(tc.forecast), tc.reach, tc.arrived)
			}
			assert.Equal(t, tc.understated, s.understated())
		})
	}
}

// A bin's weight is scaled up by the arrival curve from the 20th request
// on, and by at most 20 times (docs/attribution.md: c is never taken below
// 0.05). Requests that each arrived ten seconds or more after their bins
// teach it that about nothing has arrived half a second after a bin; the
// request released then, alone in its bin so far, is the last teacher.
func TestTheArrivalCurveIsUsedFromTheTwentiethRequestWithinBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		taught int     // requests before the released one
		want   float64 // J it gets of its bin's 10
	}{
		{"19 requests: the curve is not used", 18, 10},
		{"20 requests: at most 20 times its weight", 19, 0.05 * 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBook(1)
			for k := range tc.taught {
				admit(b, []Piece{{Start: at(float64(k)), End: at(float64(k) + 0.1), Rate: 1}}, at(30))
			}
			r := []Piece{{Start: at(29.4), End: at(29.5), Rate: 0.1}}
			admit(b, r, at(30)) // the same round: nothing decays
			freeze(b, 0, 29.5, 100)
			s := make([]float64, 1)
			release(b, r, at(30), s)
			closeTo(t, tc.want, s[0])
		})
	}
}

// The share of a bin's time its steps carried chunks is the admitted
// chunks' for the part of the bin admitted (τ), and the activity's for the
// part still to come: c = τ × c_admitted + (1 − τ) × ĉ. The books learn
// from bins run half by a chunk and wholly by a decode, and bins of a
// decode alone, less busy computing; then a bin of the first kind's
// activity where only its decode has arrived.
func TestTheChunkedShareStillToComeIsTheActivitys(t *testing.T) {
	b := testBook(1)
	for k := range 300 {
		s := 0.1 * float64(k)
		reqs := [][]Piece{decodeAt(s)}
		tensor := 0.001
		if k%2 == 0 {
			reqs, tensor = append(reqs, chunkAt(s)), 0.004
		}
		for _, r := range reqs {
			admit(b, r, longAfter)
		}
		freezeActive(b, s, s+0.1, 100, tensor, 0.002)
		for _, r := range reqs {
			release(b, r, longAfter, make([]float64, 1))
		}
	}
	b.Finalize(b.Index(at(30)))
	r := cost(b, decodeAt(40))
	b.Admit(r)
	freeze(b, 30, 40, 100)
	freezeActive(b, 40, 40.1, 100, 0.004, 0.002)
	pb := &r.bins[0]
	sb := b.group.at(pb.i)
	tau := sb.weight / b.group.finalWeight(pb, sb, 1)
	require.Less(t, tau, 0.5, "the chunk, most of the bin's weight, is still to come")
	chat, ok := b.group.chunks.predict(sb.activity)
	require.True(t, ok)
	require.InDelta(t, 0.5, chat, 1e-3, "the activity of a bin half chunked")
	closeTo(t, (1-tau)*chat, b.group.steps(sb, tau).chunked) // c_admitted: no chunk
}
