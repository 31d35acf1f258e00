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

// book is one GPU's books, alone in its ledger.
type book struct {
	*GPU
}

func (b book) Index(t int64) int64 { return b.l.Index(t) }
func (b book) Start(i int64) int64 { return b.l.Start(i) }
func (b book) Admit(r *Request)    { b.group.Admit(r) }
func (b book) Release(r *Request, shares []float64) (bool, float64) {
	return b.group.Release(r, shares)
}

func admit(b book, pieces []Piece, now int64) {
	var r Request
	r.Cost(pieces, b.l.width, now)
	b.Admit(&r)
}

func release(b book, pieces []Piece, now int64, shares []float64) bool {
	var r Request
	r.Cost(pieces, b.l.width, now)
	known, _ := b.Release(&r, shares)
	return known
}

// longAfter is a moment long after the bins of the tests: their weight is known.
var longAfter = at(3600)

func testConfig(ratio float64) Config {
	return Config{Resolution: 100 * time.Millisecond, Horizon: time.Minute, SamplingRatio: ratio, TensorAtLimit: 0.7, DRAMAtLimit: 0.85,
		ScoreAge: 40 * time.Second}
}

func testBook(ratio float64) book {
	return book{NewLedger(testConfig(ratio)).Add()}
}

// freeze gives every bin of [from, to) s the same power, and the bins
// before, back to the first that is not final, none.
func freeze(b book, from, to float64, watts float64) {
	lo, hi, ok := b.Unfrozen(min(b.FinalTo(), b.Index(at(from))), b.Index(at(to)))
	if !ok {
		return
	}
	for i := lo; i < hi; i++ {
		j := 0.0
		if b.Start(i) >= at(from) {
			j = watts * 0.1
		}
		b.Freeze(i, j, true, bottleneck.MemoryBound, Activity{})
	}
}

func closeTo(t *testing.T, want, got float64) {
	t.Helper()
	assert.InDelta(t, want, got, 1e-9*math.Max(1, math.Abs(want)))
}

// In a bin its GPU waited through (idle, or host_bound, with requests
// present), the energy the GPU draws waiting (its floor power over the time
// it was not busy) goes by the requests' time there, the rest by cost.
// halfBusy is DRAM activity-seconds at its attainable share (0.85) for half
// a 100 ms bin, and halfWait the share of a 30 J bin a 100 W floor draws in
// the other half, as the books keep activity (float32).
const halfBusy = 0.85 * 0.05

var halfWait = 100 * (1 - float64(float32(halfBusy))/0.85/0.1) * 0.1 / 30

func TestAWaitingBinSharesItsFloorByTimeAndTheRestByCost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		label bottleneck.Label
		act   Activity
		a, b  float64 // their shares of the 300 J drawn over [1, 2) s
	}{
		// 100 W of floor over the bins' 0.1 s is a third of their 30 J.
		{"idle: a third waiting", bottleneck.Idle, Activity{}, 300 * (1.0/3/2 + 2.0/3*0.9), 300 * (1.0/3/2 + 2.0/3*0.1)},
		{"host_bound alike", bottleneck.HostBound, Activity{}, 300 * (1.0/3/2 + 2.0/3*0.9), 300 * (1.0/3/2 + 2.0/3*0.1)},
		// DRAM at its attainable share for half the bin: busy half of it, so
		// the floor is drawn waiting for the other half only (5 of 30 J).
		{"half busy", bottleneck.Idle, Activity{DRAMSeconds: halfBusy, TensorSeconds: 0.001, Known: true}, 300 * (halfWait/2 + (1-halfWait)*0.9), 300 * (halfWait/2 + (1-halfWait)*0.1)},
		{"a GPU that worked shares by cost", bottleneck.MemoryBound, Activity{}, 270, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBook(1)
			// Its floor: a second with nobody, at 100 W, made final.
			freeze(b, 0, 1, 100)
			b.Finalize(b.Index(at(1)))
			a, other := []Piece{{Start: at(1), End: at(2), Rate: 9}}, []Piece{{Start: at(1), End: at(2), Rate: 1}}
			admit(b, a, at(2))
			admit(b, other, at(2))
			for i := b.Index(at(1)); i < b.Index(at(2)); i++ {
				b.Freeze(i, 30, true, tc.label, tc.act)
			}
			sa, so := make([]float64, 1), make([]float64, 1)
			release(b, a, at(3), sa)
			release(b, other, at(3), so)
			closeTo(t, tc.a, sa[0])
			closeTo(t, tc.b, so[0])
			b.Finalize(b.Index(at(2)))
			got := b.Totals()
			closeTo(t, got.Measured, got.Attributed+got.Idle+got.Unsampled+got.Correction)
			closeTo(t, 300, got.Attributed)
		})
	}
}

// A bin a waiting GPU's requests only partly cover: the floor power of the
// part none of them covered is idle, the rest theirs as before. Four
// requests over the same 30 ms of a bin share 30% of its floor energy (not
// 100%, nor four times 30%); two requests covering its two halves share all
// of it; and the books close either way.
func TestAWaitingBinsUncoveredPartIsIdle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		windows [][2]float64 // each request's [start, end] in s
		given   float64      // J all requests get from the bin
	}{
		// 100 W floor of a 30 J bin over [1, 1.1) s: 10 J floor, 20 J rest.
		{"four over its first 30 ms", [][2]float64{{1, 1.03}, {1, 1.03}, {1, 1.03}, {1, 1.03}}, 0.3*10 + 20},
		{"one over its last 30 ms", [][2]float64{{1.07, 1.1}}, 0.3*10 + 20},
		{"two halves", [][2]float64{{1, 1.05}, {1.05, 1.1}}, 30},
		{"two with a gap between them", [][2]float64{{1.01, 1.03}, {1.06, 1.08}}, 0.7*10 + 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBook(1)
			freeze(b, 0, 1, 100) // the floor: 100 W
			b.Finalize(b.Index(at(1)))
			before := b.Totals()
			var reqs [][]Piece
			for _, w := range tc.windows {
				p := []Piece{{Start: at(w[0]), End: at(w[1]), Rate: 1}}
				reqs = append(reqs, p)
				admit(b, p, at(2))
			}
			b.Freeze(b.Index(at(1)), 30, true, bottleneck.HostBound, Activity{})
			given := 0.0
			for _, p := range reqs {
				sh := make([]float64, 1)
				release(b, p, at(3), sh)
				given += sh[0]
			}
			// Where requests lie in a bin is kept in float32: to 1e-6.
			assert.InDelta(t, tc.given, given, 1e-6)
			b.Finalize(b.Index(at(1.1)))
			got := b.Totals()
			closeTo(t, 30, got.Measured-before.Measured)
			assert.InDelta(t, 30-tc.given, got.Idle-before.Idle, 1e-6)
			assert.InDelta(t, tc.given, got.Attributed-before.Attributed, 1e-6)
			assert.InDelta(t, 0, got.Correction-before.Correction, 1e-6)
			closeTo(t, got.Measured, got.Attributed+got.Idle+got.Unsampled+got.Correction)
			assert.InDelta(t, 0.1*(30-tc.given)/30, got.IdleSeconds-before.IdleSeconds, 1e-6)
			closeTo(t, labelled(got.Seconds), got.AttributedSeconds+got.IdleSeconds+got.UnsampledSeconds+got.CorrectionSeconds)
		})
	}
}

// A waiting bin's share is the one it froze with: its releases and its
// finalisation read the same, so a floor that moves in between changes
// neither what its requests get nor what stays idle, and leaves no
// correction.
func TestAWaitingBinKeepsTheShareItFrozeWith(t *testing.T) {
	// Its one request over the bin's first 30 ms takes 30% of the floor's
	// 10 J and the rest's 20 J, at the 100 W floor the bin froze with.
	const given = 0.3*10 + 20
	for _, move := range []struct {
		name          string
		beforeRelease bool
	}{{"after its release", false}, {"before its release", true}} {
		t.Run(move.name, func(t *testing.T) {
			b := testBook(1)
			freeze(b, 0, 1, 100) // the floor: 100 W
			b.Finalize(b.Index(at(1)))
			before := b.Totals()
			p := []Piece{{Start: at(1), End: at(1.03), Rate: 1}}
			admit(b, p, at(2))
			// 100 W over 0.1 s is a third of the bin's 30 J.
			b.Freeze(b.Index(at(1)), 30, true, bottleneck.HostBound, Activity{})
			if move.beforeRelease {
				b.learnFloor(50)
			}
			sh := make([]float64, 1)
			release(b, p, at(3), sh)
			if !move.beforeRelease {
				b.learnFloor(50)
			}
			assert.InDelta(t, given, sh[0], 1e-6)
			b.Finalize(b.Index(at(1.1)))
			got := b.Totals()
			assert.InDelta(t, 30-given, got.Idle-before.Idle, 1e-6)
			assert.InDelta(t, 0, got.Correction-before.Correction, 1e-6)
			closeTo(t, got.Measured, got.Attributed+got.Idle+got.Unsampled+got.Correction)
		})
	}
}

// The floor drops to a lower bin's power at once and creeps up towards
// higher ones, so that one busy bin does not lift it.
func TestTheFloorFollowsTheLeastPower(t *testing.T) {
	b := testBook(1)
	b.learnFloor(300)
	assert.Equal(t, 300.0, b.floorW, "the first bin sets it")
	b.learnFloor(100)
	assert.Equal(t, 100.0, b.floorW, "a lower bin lowers it at once")
	b.learnFloor(700)
	closeTo(t, 100+600*floorCreep, b.floorW)
	for range 100_000 {
		b.learnFloor(200)
	}
	assert.InDelta(t, 200, b.floorW, 1, "a floor that stays higher is followed")
}

func TestQueueTakesNoEnergyAndCostRatesShare(t *testing.T) {
	b := testBook(1)
	queued := []Piece{{Start: at(0), End: at(1)}, {Start: at(1), End: at(2), Rate: 3}}
	other := []Piece{{Start: at(0), End: at(2), Rate: 1}}
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

// A bin's shared cost (the weight read of the steps its requests shared)
// is divided among the requests present: over one second of 100 J, a
// prefill at weight 10 a bin beside decodes at weight 1 and shared cost 40
// a bin, with every request known.
func TestSharedCostIsDividedAmongTheRequestsPresent(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ratio           float64
		decodes         int
		shared          float64 // each decode's, per second
		prefill, decode float64 // J each, of the 100 J drawn
	}{
		{"nothing shared: by weight", 1, 2, 0, 100 * 10.0 / 12, 100 * 1.0 / 12},
		// Three requests present: a decode takes 1 + 40/3 a bin.
		{"two decodes and a prefill", 1, 2, 400, 100 * 10 / (10 + 2*(1+40.0/3)), 100 * (1 + 40.0/3) / (10 + 2*(1+40.0/3))},
		// Alone with the prefill, a decode pays half the read.
		{"one decode and a prefill", 1, 1, 400, 100 * 10.0 / 31, 100 * 21.0 / 31},
		// Sampling at half: the requests present are twice those seen,
		// and the seen take half the bin.
		{"sampled at half", 0.5, 2, 400, 50 * 10 / (10 + 2*(1+40.0/6)), 50 * (1 + 40.0/6) / (10 + 2*(1+40.0/6))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBook(tc.ratio)
			prefill := []Piece{{Start: at(0), End: at(1), Rate: 100}}
			decode := []Piece{{Start: at(0), End: at(1), Rate: 10, Shared: tc.shared}}
			admit(b, prefill, longAfter)
			for range tc.decodes {
				admit(b, decode, longAfter)
			}
			freeze(b, 0, 1, 100)
			sp, sd := make([]float64, 1), make([]float64, 1)
			release(b, prefill, longAfter, sp)
			for range tc.decodes {
				release(b, decode, longAfter, sd)
			}
			closeTo(t, tc.prefill, sp[0])
			closeTo(t, tc.decode*float64(tc.decodes), sd[0])
			b.Finalize(b.Index(at(1)))
			closeTo(t, 0, b.Totals().Correction)
		})
	}
}

// While a prefill runs, its engine's steps carry its chunks: the chunk
// takes the weight read of those steps, a decode counts decodeStepRatio of
// its cost in a decode-only step there, and its life factor raises its
// rate in the steps that only decode (Group.steps, Group.Life). One bin,
// 10 J, every request admitted; prefill chunks of weight 50 in all run
// where each case says, the decode (weight 1, shared cost 40) for all of
// it. Chunks that run at the same time share steps: the bin's steps
// carried chunks for their union, not their sum.
func TestAChunkedStepIsTakenByItsChunk(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunks  [][2]float64 // each chunk's start and end, s
		chunked float64      // share of the bin the chunks' steps run
	}{
		{"no chunk", nil, 0},
		{"half the bin chunked", [][2]float64{{0, 0.05}}, 0.5},
		{"every step chunked", [][2]float64{{0, 0.1}}, 1},
		{"two chunks in the same steps", [][2]float64{{0, 0.05}, {0, 0.05}}, 0.5},
		{"two chunks overlapping", [][2]float64{{0, 0.05}, {0.025, 0.075}}, 0.75},
		{"two chunks one after the other", [][2]float64{{0, 0.05}, {0.05, 0.1}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBook(1)
			var pieces [][]Piece
			for _, c := range tc.chunks {
				weight := 50 / float64(len(tc.chunks))
				pieces = append(pieces, []Piece{{Start: at(c[0]), End: at(c[1]), Rate: weight / (c[1] - c[0]), Chunk: true}})
			}
			pieces = append(pieces, []Piece{{Start: at(0), End: at(0.1), Rate: 10, Shared: 400}})
			for _, p := range pieces {
				admit(b, p, longAfter)
			}
			freeze(b, 0, 0.1, 100)
			// The round reweighs every request before it releases any.
			reqs := make([]*Request, len(pieces))
			for k, p := range pieces {
				reqs[k] = new(Request)
				reqs[k].Cost(p, b.l.width, longAfter)
				life := b.group.Life(reqs[k])
				b.group.Reweigh(reqs[k], 1, life)
				reqs[k].SetLife(life)
			}
			shares := make([][]float64, len(pieces))
			for k, r := range reqs {
				shares[k] = make([]float64, 1)
				b.Release(r, shares[k])
			}
			c := tc.chunked
			life := 1 / (1 - c*(1-decodeStepRatio))
			perDecode := (1-c)*memoryBoundPower + c*decodeStepRatio
			read := (1 - c) * memoryBoundPower // × the bin's width over the decode's time there, 1
			dec := life * (perDecode*1 + read*40)
			chunk := 0.0 // the chunks' weight
			if c > 0 {
				chunk = 50
			}
			decode := len(pieces) - 1
			closeTo(t, 10*dec/(chunk+dec), shares[decode][0])
			for k := range tc.chunks {
				closeTo(t, 10*chunk/float64(len(tc.chunks))/(chunk+dec), shares[k][0])
			}
			if c == 1 {
				closeTo(t, 10*1.0/51, shares[decode][0]) // its tokens, as if it had decoded alone
			}
			b.Finalize(b.Index(at(0.1)))
			closeTo(t, 0, b.Totals().Correction)
		})
	}
}

// A stretch of a bin covers the slots nearest its ends, at least one.
func TestBinSlots(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to float32 // s within a 0.1 s bin
		want     uint32
	}{
		{"the whole bin", 0, 0.1, 0xffffffff},
		{"its first half", 0, 0.05, 0x0000ffff},
		{"its second half", 0.05, 0.1, 0xffff0000},
		{"ends rounded to the nearest slot", 0.0040, 0.0085, 0b110}, // 1.28 and 2.72 slots
		{"a sliver takes one slot", 0.0501, 0.0502, 1 << 16},
		{"a sliver at the end takes the last", 0.0999, 0.1, 1 << 31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, binSlots(tc.from, tc.to, 0.1))
		})
	}
}

// The requests present in a bin count those still to come: where half a
// bin's weight has not arrived, the two admitted stand for four, so the
// decode's shared cost is divided by four, not two.
func TestSharedCostCountsTheRequestsStillToCome(t *testing.T) {
	b := halfLate(t, func(b book, from, to float64) { freeze(b, from, to, 100) })
	prefill, decode := []Piece{{Start: at(40), End: at(40.1), Rate: 1}}, []Piece{{Start: at(40), End: at(40.1), Rate: 1, Shared: 40}}
	admit(b, prefill, at(40.6))
	admit(b, decode, at(40.6))
	freeze(b, 30, 40.1, 100)
	sp, sd := make([]float64, 1), make([]float64, 1)
	release(b, prefill, at(40.6), sp)
	release(b, decode, at(40.6), sd)
	taken := (sp[0] + sd[0]) / 10 // of the bin's 10 J
	require.InDelta(t, 0.5, taken, 0.1, "about half the weight is still to come")
	perRequest := taken * 0.1 / 0.2 // the bin's width over the admitted requests' 0.2 s there
	assert.InDelta(t, (0.1+perRequest*4)/0.1, sd[0]/sp[0], 1e-9)
}

func TestOrderIndependentWithinTheWindow(t *testing.T) {
	orderIndependent(t, func(*testing.T) book { return testBook(1) }, 0, 500, 20, func(b book, i int64) {
		b.Freeze(i, 30+float64(i%7), true, bottleneck.ComputeBound, Activity{})
	}, true)
}

// The same where the weight still to come comes from the GPUs' activity,
// which over- and under-reads bins by turns: the netting across
// neighbours reads the round's books, whatever the order.
func TestOrderIndependentWithActivity(t *testing.T) {
	orderIndependent(t, learnedBook, 40, 2, 0.5, func(b book, i int64) {
		k := float64(i % 5) // 0 to 4 requests' activity
		b.Freeze(i, 30+float64(i%7), true, bottleneck.ComputeBound, Activity{TensorSeconds: k * 0.002, DRAMSeconds: k * 0.001, Known: true})
	}, false)
}

// orderIndependent admits twelve random overlapping requests starting at
// from s (prefill rates from prefill, decode rates from decode, per
// second), freezes their bins with freezeBin, and releases them: in every
// order the requests get the same energy, and the books close (with no
// correction where closed says every bin's weight is known).
func orderIndependent(t *testing.T, newBook func(*testing.T) book, from, prefill, decode float64, freezeBin func(book, int64), closed bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([][]Piece, 12)
	for i := range reqs {
		s := from + rng.Float64()*5
		q, p, d := s+rng.Float64(), 0.0, 0.0
		p = q + 0.05 + rng.Float64()*0.3
		d = p + 0.5 + rng.Float64()*3
		reqs[i] = []Piece{{Start: at(s), End: at(q)}, {Start: at(q), End: at(p), Rate: prefill * (1 + 2*rng.Float64())}, {Start: at(p), End: at(d)}}
		reqs[i][2].Rate = decode * (1 + 0.5*rng.Float64())
		reqs[i][2].Shared = 40 * reqs[i][2].Rate // a step's weight read, shared
	}
	run := func(order []int) []float64 {
		b := newBook(t)
		for _, i := range order { // all arrive before any release: within the window
			admit(b, reqs[i], longAfter)
		}
		lo, hi, _ := b.Unfrozen(b.FinalTo(), b.Index(at(from+12)))
		for i := lo; i < hi; i++ {
			freezeBin(b, i)
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
		if closed {
			closeTo(t, 0, tot.Correction)
		}
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
	early := []Piece{{Start: at(0), End: at(2), Rate: 1}}
	late := []Piece{{Start: at(1), End: at(2), Rate: 1}}
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
	r := []Piece{{Start: at(0), End: at(1), Rate: 1}}
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
	r := []Piece{{Start: at(0.5), End: at(1), Rate: 1}}
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
	admit(b, []Piece{{Start: at(0), End: at(1), Rate: 1}}, longAfter)
	admit(b, []Piece{{Start: at(600), End: at(601), Rate: 1}}, longAfter) // ten minutes later: the first is dropped
	lo, hi := b.l.clip(b.Index(at(0)), b.Index(at(601)))
	assert.LessOrEqual(t, hi-lo, int64(len(b.bins)))
	assert.Greater(t, lo, b.Index(at(1)))
}

// halfLate returns books over 30 s of final bins, each shared by a request
// whose span came half a second after it and one whose span came ten
// seconds after, at weight 0.1 each: half of a bin's weight arrives late.
// freezeBin freezes the bins of [from, to) s.
func halfLate(t *testing.T, freezeBin func(b book, from, to float64)) book {
	t.Helper()
	b := testBook(1)
	for k := range 300 {
		s := 0.1 * float64(k)
		early, lateOne := []Piece{{Start: at(s), End: at(s + 0.1), Rate: 1}}, []Piece{{Start: at(s), End: at(s + 0.1), Rate: 1}}
		admit(b, early, at(s+0.1+0.5))
		admit(b, lateOne, at(s+0.1+10))
		freezeBin(b, s, s+0.1)
		release(b, early, at(s+0.1+12), make([]float64, 1)) // by 12 s everything has arrived
		release(b, lateOne, at(s+0.1+12), make([]float64, 1))
	}
	b.Finalize(b.Index(at(30)))
	assert.InDelta(t, 0, b.Totals().Correction, 1e-9*b.Totals().Measured)
	return b
}

// Once final bins show that half of a bin's weight arrives ten seconds
// after it, a request released a second after its bins takes half their
// energy, leaving the other half to the requests still running.
func TestWeightStillToArriveIsLeftForIt(t *testing.T) {
	b := halfLate(t, func(b book, from, to float64) { freeze(b, from, to, 100) })
	alone := []Piece{{Start: at(40), End: at(41), Rate: 1}}
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
		queued := []Piece{{Start: at(0), End: at(1)}, {Start: at(1), End: at(2), Rate: 3}}
		other := []Piece{{Start: at(0), End: at(3), Rate: 1}}
		admit(b, queued, longAfter)
		admit(b, other, longAfter)
		// Before 0: nothing reported; [0, 2): 100 W; [2, 3): no energy, but
		// labelled; [3, 4): 5 J a bin, nobody ran.
		lo, hi, _ := b.Unfrozen(b.FinalTo(), b.Index(at(4)))
		for i := lo; i < hi; i++ {
			switch s := b.Start(i); {
			case s < at(0):
				b.Freeze(i, 0, false, "", Activity{})
			case s < at(2):
				b.Freeze(i, 10, true, bottleneck.MemoryBound, Activity{})
			default:
				b.Freeze(i, 5, s >= at(3), bottleneck.ComputeBound, Activity{})
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
	early := []Piece{{Start: at(0), End: at(2), Rate: 1}}
	late := []Piece{{Start: at(1), End: at(2), Rate: 1}}
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

func cost(b book, pieces []Piece) *Request {
	r := new(Request)
	r.Cost(pieces, b.l.width, longAfter)
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
	assert.Equal(t, uintptr(GroupBinBytes), unsafe.Sizeof(groupBin{}))
	assert.Equal(t, uintptr(GPUBinBytes), unsafe.Sizeof(gpuBin{}))
}

// A group's GPUs book exactly what each would alone: the same requests on
// the same GPUs, once in one ledger where the GPUs share groups (split as
// requests with fewer GPUs arrive) and once in one ledger per GPU, give
// every request the same energy and time and every GPU the same totals,
// with the GPUs freezing their bins at different moments and some requests
// released after their bins are final.
func TestAGroupBooksWhatItsGPUsWouldAlone(t *testing.T) {
	const numGPUs = 4
	cfg := testConfig(0.8)
	grouped := NewLedger(cfg)
	var gpus, alone [numGPUs]*GPU
	for k := range gpus {
		gpus[k] = grouped.Add()
		alone[k] = NewLedger(cfg).Add()
	}
	type request struct {
		pieces    []Piece
		set       []int
		releaseAt float64
		released  bool
	}
	rng := rand.New(rand.NewPCG(3, 4))
	// Until 20 s every request runs on all four GPUs; then some on GPU 1
	// alone and some on GPUs 2 and 3, which splits the group twice.
	sets := func(at float64) []int {
		if at < 20 || rng.IntN(3) == 0 {
			return []int{0, 1, 2, 3}
		}
		if rng.IntN(2) == 0 {
			return []int{1}
		}
		return []int{2, 3}
	}
	lag := [numGPUs]float64{1, 1, 1.5, 4} // s behind now each GPU's energy is
	var reqs []*request
	var dst []*Group
	var shares, ref [maxTestPieces]float64
	var r Request
	step := func(now float64) {
		nowNs := at(now)
		for k := range gpus {
			for _, g := range []*GPU{gpus[k], alone[k]} {
				lo, hi, ok := g.Unfrozen(min(g.FinalTo(), g.l.Index(at(0))), g.l.Index(at(now-lag[k])))
				for i := lo; ok && i < hi; i++ {
					g.Freeze(i, 20+float64(k)+float64(i%5), i%11 != 0, bottleneck.Labels[int(i)%len(bottleneck.Labels)], Activity{})
				}
				g.Finalize(g.l.Index(at(now - lag[k] - 1)))
			}
		}
		for range 3 {
			end := now
			if rng.IntN(4) == 0 {
				end -= 3 + 5*rng.Float64() // its span comes after its bins are final
			}
			s := end - 0.5 - 3*rng.Float64()
			q := s + 0.3*rng.Float64()
			p := q + 0.05 + 0.2*rng.Float64()
			rq := &request{
				pieces:    []Piece{{Start: at(s), End: at(q)}, {Start: at(q), End: at(p), Rate: 400 + 400*rng.Float64()}, {Start: at(p), End: at(end), Rate: 30}},
				set:       sets(now),
				releaseAt: now + 0.5 + 3*rng.Float64(),
			}
			reqs = append(reqs, rq)
			r.Cost(rq.pieces, int64(cfg.Resolution), nowNs)
			var set []*GPU
			for _, k := range rq.set {
				set = append(set, gpus[k])
				alone[k].group.Admit(&r)
			}
			dst = grouped.Groups(set, dst)
			for _, grp := range dst {
				grp.Admit(&r)
			}
		}
		for _, rq := range reqs {
			if rq.released || rq.releaseAt > now {
				continue
			}
			rq.released = true
			r.Cost(rq.pieces, int64(cfg.Resolution), nowNs)
			shares, ref = [maxTestPieces]float64{}, [maxTestPieces]float64{}
			var set []*GPU
			var secs, refSecs float64
			var known, refKnown bool
			for _, k := range rq.set {
				set = append(set, gpus[k])
				kn, s := alone[k].group.Release(&r, ref[:])
				refKnown, refSecs = refKnown || kn, refSecs+s
			}
			for _, grp := range grouped.Groups(set, dst) {
				kn, s := grp.Release(&r, shares[:])
				known, secs = known || kn, secs+s
			}
			assert.Equal(t, refKnown, known)
			closeTo(t, refSecs, secs)
			for i := range shares {
				closeTo(t, ref[i], shares[i])
			}
		}
	}
	for k := range gpus { // every ledger's window starts alike
		gpus[k].Unfrozen(grouped.Index(at(0)), grouped.Index(at(4)))
		alone[k].Unfrozen(grouped.Index(at(0)), grouped.Index(at(4)))
	}
	for now := 5.0; now < 60; now += 0.1 {
		step(now)
	}
	assert.Len(t, grouped.groups, 3, "{0}, {1}, {2, 3}")
	for k := range gpus {
		want, got := alone[k].Totals(), gpus[k].Totals()
		require.Greater(t, want.Measured, 0.0)
		for _, p := range [][2]float64{
			{want.Measured, got.Measured}, {want.Attributed, got.Attributed}, {want.Idle, got.Idle},
			{want.Unsampled, got.Unsampled}, {want.Correction, got.Correction},
			{want.AttributedSeconds, got.AttributedSeconds}, {want.CorrectionSeconds, got.CorrectionSeconds},
			{want.IdleSeconds, got.IdleSeconds}, {want.UnsampledSeconds, got.UnsampledSeconds},
		} {
			closeTo(t, p[0], p[1])
		}
		assert.Equal(t, want.Seconds, got.Seconds)
		closeTo(t, got.Measured, got.Attributed+got.Idle+got.Unsampled+got.Correction)
	}
}

// maxTestPieces is how many pieces the tests' requests have.
const maxTestPieces = 3

// GPUs no request ran on yet join one group; once one has, a GPU that
// joins a request's set later stays in a group of its own.
func TestGroupsMergeOnlyWhereNothingWasAdmitted(t *testing.T) {
	l := NewLedger(testConfig(1))
	a, b, c := l.Add(), l.Add(), l.Add()
	groups := l.Groups([]*GPU{a, b}, nil)
	require.Len(t, groups, 1)
	assert.Same(t, a.group, b.group)
	var r Request
	r.Cost([]Piece{{Start: at(0), End: at(1), Rate: 1}}, l.width, longAfter)
	groups[0].Admit(&r)
	v := l.Version()
	assert.Len(t, l.Groups([]*GPU{a, b}, nil), 1)
	assert.Equal(t, v, l.Version(), "nothing moved")
	groups = l.Groups([]*GPU{a, b, c}, nil)
	assert.Len(t, groups, 2)
	assert.NotSame(t, a.group, c.group)
	l.Remove(b)
	assert.Equal(t, []*GPU{a}, a.group.members)
	assert.Len(t, l.gpus, 2)
}

// The ledger keeps one window for all its GPUs. A GPU whose energy stops
// coming keeps its bins until the others carry the window a horizon past
// them; then they are booked with what they have, once, and its books
// still close, a request that was never released included.
func TestAStalledGPUsBinsAreBookedAtTheHorizon(t *testing.T) {
	l := NewLedger(testConfig(1))
	live, stalled := book{l.Add()}, book{l.Add()}
	var told []int64 // the stalled GPU's bins, as they became final
	stalled.OnFinal(func(bin int64, _ bottleneck.Label) { told = append(told, bin) })
	released := []Piece{{Start: at(2), End: at(3), Rate: 1}}
	admit(stalled, released, at(3))
	admit(stalled, []Piece{{Start: at(8), End: at(9), Rate: 1}}, at(9)) // never released
	freeze(live, 0, 10, 100)
	freeze(stalled, 0, 10, 300)
	shares := make([]float64, 1)
	require.True(t, release(stalled, released, at(12), shares))
	closeTo(t, 300, shares[0]) // alone in its bins: 300 W for 1 s
	stalled.Finalize(stalled.Index(at(10)))
	held := stalled.FinalTo()
	assert.Less(t, held, stalled.Index(at(9)), "the unreleased request holds its bins")

	for s := 10.0; s < 65; s += 5 {
		freeze(live, s, s+5, 100)
		live.Finalize(live.Index(at(s + 5)))
	}
	assert.Equal(t, held, stalled.FinalTo(), "inside the horizon, nothing of the stalled GPU moves")

	for s := 65.0; s < 130; s += 5 {
		freeze(live, s, s+5, 100)
		live.Finalize(live.Index(at(s + 5)))
	}
	assert.GreaterOrEqual(t, stalled.FinalTo(), stalled.Index(at(130-60)), "dropped past the horizon")
	// Every bin is told once, in order, those dropped at the horizon too.
	require.NotEmpty(t, told)
	assert.Equal(t, stalled.FinalTo()-told[0], int64(len(told)))
	for k := 1; k < len(told); k++ {
		require.Equal(t, told[k-1]+1, told[k], "bin %d", k)
	}
	assert.Less(t, told[0], held, "the bins final before it stalled")
	got := stalled.Totals()
	closeTo(t, 300*10, got.Measured)
	closeTo(t, 300, got.Attributed) // the released request's
	// The unreleased request's second is booked as taken and given to no
	// span: the correction says so.
	closeTo(t, 300, got.Correction)
	closeTo(t, 300*8, got.Idle)
	closeTo(t, got.Measured, got.Attributed+got.Idle+got.Unsampled+got.Correction)

	for s := 130.0; s < 200; s += 5 {
		freeze(live, s, s+5, 100)
		live.Finalize(live.Index(at(s + 5)))
	}
	assert.Equal(t, got, stalled.Totals(), "booked once")
	closeTo(t, 100*200, live.Totals().Measured)
}

// A request admitted after its first bins were final counts as present
// from where finalisation stands: the idle bins it spans that are not final
// yet read host_bound once they are, and the bins after it idle again.
// The final ones before stay as they were booked.
func TestALateRequestIsPresentFromWhereFinalisationStands(t *testing.T) {
	b := testBook(1)
	idle := func(from, to float64) {
		lo, hi, ok := b.Unfrozen(min(b.FinalTo(), b.Index(at(from))), b.Index(at(to)))
		require.True(t, ok)
		for i := lo; i < hi; i++ {
			if b.Start(i) < at(from) {
				b.Freeze(i, 0, false, "", Activity{}) // before anything was seen
				continue
			}
			b.Freeze(i, 5, true, bottleneck.Idle, Activity{})
		}
	}
	idle(0, 5)
	b.Finalize(b.Index(at(5)))
	require.Equal(t, b.Index(at(5)), b.FinalTo())
	late := []Piece{{Start: at(4), End: at(8), Rate: 1}}
	admit(b, late, at(9))
	idle(5, 12)
	require.True(t, release(b, late, at(12), make([]float64, 1)))
	b.Finalize(b.Index(at(12)))
	secs := b.Totals().Seconds
	assert.InDelta(t, 3, secs.Of(bottleneck.HostBound), 1e-9, "5–8 s: present, the GPU idle")
	assert.InDelta(t, 5+4, secs.Of(bottleneck.Idle), 1e-9, "0–5 s as booked before it came, 8–12 s after it")
}

// ageBelow finds an age's class from any starting class, as a search from
// the youngest would: Cost starts each search where the last one ended.
func TestAgeBelowFindsTheClassFromAnyStart(t *testing.T) {
	reference := func(secs float64) (int, float64) {
		lo := 0.0
		for k, bound := range ageBounds {
			if secs <= bound {
				if math.IsInf(bound, 1) {
					return k, 1
				}
				return k, (secs - lo) / (bound - lo)
			}
			lo = bound
		}
		t.Fatalf("no class for %v", secs)
		return 0, 0
	}
	ages := []float64{0, 0.25, 0.5, 0.75, 1, 2.5, 4, 7, 12, 100, 128, 129, 1e6}
	for _, bound := range ageBounds[:numAges-1] {
		ages = append(ages, math.Nextafter(bound, 0), math.Nextafter(bound, math.Inf(1)))
	}
	for _, secs := range ages {
		wantK, wantF := reference(secs)
		for top := range numAges {
			k, f := ageBelow(secs, top)
			if k != wantK || f != wantF {
				t.Fatalf("ageBelow(%v, %d) = %d, %v; want %d, %v", secs, top, k, f, wantK, wantF)
			}
		}
	}
}

// A group's forecasts of its bins' final weight are scored once the bins
// are ScoreAge old (here the arrival curve's, a GPU without GPM): where a request the first release could not see (it
// was still running) brought weight later, they count as understated;
// where every request was admitted before that release, they do not.
func TestForecastsThatMissedLateRequestsAreUnderstated(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lateArrival bool
		taught      bool // the curve has learned before the release
		understated bool
	}{
		{"a request still running when its neighbour was released", true, true, true},
		{"every request known at the release", false, true, false},
		{"a forecast from before the curve learned is not scored", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBook(1)
			// Twenty earlier requests, each admitted as it ended, teach
			// the arrival curve that a bin's weight is in by then: on a
			// GPU without GPM the curve is the forecast once it has.
			taught := 0
			if tc.taught {
				taught = 20
			}
			for i := range taught {
				admit(b, []Piece{{Start: at(float64(i) - 30), End: at(float64(i) - 29.5), Rate: 10}}, at(float64(i)-29.5))
			}
			short := []Piece{{Start: at(0), End: at(12), Rate: 10}}
			long := []Piece{{Start: at(0), End: at(30), Rate: 10}}
			if !tc.lateArrival {
				admit(b, long, at(31))
			}
			admit(b, short, at(13))
			freeze(b, 0, 14, 100)
			release(b, short, at(14), make([]float64, 1))
			if tc.lateArrival {
				admit(b, long, at(31))
			}
			admit(b, []Piece{{Start: at(48), End: at(49), Rate: 10}}, at(49))
			assert.False(t, b.group.Understated(), "scored only once its bins are ScoreAge (40 s) old")
			// A request at 55 s takes the short request's bins past it,
			// still inside the one-minute window.
			admit(b, []Piece{{Start: at(54), End: at(55), Rate: 10}}, at(55))
			assert.Equal(t, tc.understated, b.group.Understated())
		})
	}
}

// A group waits for its host where its GPUs froze most of the bins
// requests ran in idle or host_bound; bins nobody ran in do not count,
// and it takes as many bins as a fit needs.
func TestAGroupWhoseGPUsWaitThroughItsBinsIsWaiting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runs    float64 // s of requests from 0
		waits   float64 // s of them frozen host_bound; the rest memory_bound
		idle    float64 // s after them nobody ran in, frozen idle
		waiting bool
	}{
		{"waited through every busy bin", 20, 20, 0, true},
		{"waited through 60% of them", 20, 12, 0, true},
		{"waited through 40% of them", 20, 8, 0, false},
		{"busy throughout", 20, 0, 0, false},
		{"busy, then idle with nobody present", 11, 0, 29, false},
		{"waited, but over too few bins", 5, 5, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBook(1)
			req := []Piece{{Start: at(0), End: at(tc.runs), Rate: 10}}
			admit(b, req, at(tc.runs))
			lo, hi, ok := b.Unfrozen(min(b.FinalTo(), b.Index(at(0))), b.Index(at(tc.runs+tc.idle)))
			require.True(t, ok)
			for i := lo; i < hi; i++ {
				label := bottleneck.MemoryBound
				switch {
				case b.Start(i) < at(0) || b.Start(i) >= at(tc.runs):
					label = bottleneck.Idle
				case b.Start(i) < at(tc.waits):
					label = bottleneck.HostBound
				}
				b.Freeze(i, 10, true, label, Activity{})
			}
			release(b, req, at(tc.runs+tc.idle), make([]float64, 1))
			b.Finalize(b.Index(at(tc.runs + tc.idle)))
			assert.Equal(t, tc.waiting, b.group.Waiting())
		})
	}
}

// A group split by a request on fewer of its GPUs keeps, in both parts,
// what its GPUs' waiting said, as it keeps the rest of its books.
func TestBothPartsOfASplitGroupKeepItsWaitScore(t *testing.T) {
	l := NewLedger(testConfig(1))
	gpus := []*GPU{l.Add(), l.Add()}
	var r Request
	r.Cost([]Piece{{Start: at(0), End: at(20), Rate: 10}}, l.width, at(20))
	groups := l.Groups(gpus, nil)
	require.Len(t, groups, 1)
	groups[0].Admit(&r)
	for _, g := range gpus {
		lo, hi, ok := g.Unfrozen(min(g.FinalTo(), l.Index(at(0))), l.Index(at(20)))
		require.True(t, ok)
		for i := lo; i < hi; i++ {
			label := bottleneck.HostBound
			if l.Start(i) < at(0) {
				label = bottleneck.Idle
			}
			g.Freeze(i, 10, true, label, Activity{})
		}
	}
	groups[0].Release(&r, make([]float64, 1))
	for _, g := range gpus {
		g.Finalize(l.Index(at(20)))
	}
	require.True(t, groups[0].Waiting())
	parts := l.Groups(gpus[:1], nil)
	require.Len(t, parts, 1)
	require.NotSame(t, parts[0], gpus[1].group, "the request on GPU 0 alone split the group")
	assert.True(t, parts[0].Waiting())
	assert.True(t, gpus[1].group.Waiting())
}

// A queue costs nothing in a bin its GPU waited through too: the floor's
// part goes by the time the request ran there, so the part of the bin
// under its queue is idle. Its queue over the first half of a 30 J bin at
// a 100 W floor (10 J), its decode over the second: the decode takes the
// 20 J of work and half the floor's 10 J.
func TestAQueueTakesNoEnergyInAWaitingBin(t *testing.T) {
	b := testBook(1)
	freeze(b, 0, 1, 100) // the floor: 100 W
	b.Finalize(b.Index(at(1)))
	before := b.Totals()
	p := []Piece{{Start: at(1), End: at(1.05)}, {Start: at(1.05), End: at(1.1), Rate: 1}}
	admit(b, p, at(2))
	b.Freeze(b.Index(at(1)), 30, true, bottleneck.HostBound, Activity{})
	sh := make([]float64, 2)
	release(b, p, at(3), sh)
	closeTo(t, 0, sh[0])
	assert.InDelta(t, 20+0.5*10, sh[1], 1e-6)
	b.Finalize(b.Index(at(1.1)))
	got := b.Totals()
	assert.InDelta(t, 0.5*10, got.Idle-before.Idle, 1e-6)
	closeTo(t, got.Measured, got.Attributed+got.Idle+got.Unsampled+got.Correction)
}

// A bin drawing less than the GPU's floor was all waiting: its requests
// share it by their time there alone, whatever their cost (the waiting
// share is at most the whole bin).
func TestABinBelowTheFloorIsSharedByTime(t *testing.T) {
	b := testBook(1)
	freeze(b, 0, 1, 100) // the floor: 100 W
	b.Finalize(b.Index(at(1)))
	heavy, light := []Piece{{Start: at(1), End: at(1.1), Rate: 9}}, []Piece{{Start: at(1), End: at(1.1), Rate: 1}}
	admit(b, heavy, at(2))
	admit(b, light, at(2))
	b.Freeze(b.Index(at(1)), 5, true, bottleneck.HostBound, Activity{}) // 50 W
	sh, sl := make([]float64, 1), make([]float64, 1)
	release(b, heavy, at(3), sh)
	release(b, light, at(3), sl)
	closeTo(t, 2.5, sh[0])
	closeTo(t, 2.5, sl[0])
}

// Where part of a bin's weight is still to come, a waiting GPU's floor
// leaves it its time as the arrival curve says, as the cost share leaves
// it its cost: a request alone in its bin so far takes the same energy
// whether its GPU waited through the bin or worked.
func TestAWaitingBinLeavesTheTimeStillToComeItsFloor(t *testing.T) {
	got := map[bottleneck.Label]float64{}
	for _, label := range []bottleneck.Label{bottleneck.HostBound, bottleneck.MemoryBound} {
		b := halfLate(t, func(b book, from, to float64) { freeze(b, from, to, 100) })
		alone := []Piece{{Start: at(40), End: at(40.1), Rate: 1}}
		admit(b, alone, at(40.6))
		freeze(b, 30, 40, 100)
		b.Freeze(b.Index(at(40)), 30, true, label, Activity{}) // a third of it the 100 W floor
		s := make([]float64, 1)
		release(b, alone, at(41), s)
		got[label] = s[0]
	}
	assert.InDelta(t, 15, got[bottleneck.MemoryBound], 3, "about half the bin: half its weight is still to come")
	closeTo(t, got[bottleneck.MemoryBound], got[bottleneck.HostBound])
}

// Freezing a bin again changes nothing: its energy, label and activity are
// the ones it first froze with, and its energy is measured once.
func TestABinFrozenAgainKeepsWhatItFrozeWith(t *testing.T) {
	b := testBook(1)
	r := []Piece{{Start: at(0), End: at(1), Rate: 1}}
	admit(b, r, longAfter)
	freeze(b, 0, 1, 100)
	for i := b.Index(at(0)); i < b.Index(at(1)); i++ {
		b.Freeze(i, 50, true, bottleneck.ComputeBound, Activity{})
	}
	s := make([]float64, 1)
	release(b, r, longAfter, s)
	closeTo(t, 100, s[0])
	b.Finalize(b.Index(at(1)))
	tot := b.Totals()
	closeTo(t, 100, tot.Measured)
	closeTo(t, 100, tot.Attributed)
	closeTo(t, 0, tot.Seconds.Of(bottleneck.ComputeBound))
}

// A request's life factor reads the chunked share of its decode's bins:
// its own prefill's chunks ran in other steps than its decode.
func TestALifeFactorReadsItsDecodesBinsOnly(t *testing.T) {
	b := testBook(1)
	r := []Piece{{Start: at(0), End: at(0.5), Rate: 1000, Chunk: true}, {Start: at(0.5), End: at(1.5), Rate: 10, Shared: 400}}
	admit(b, r, longAfter)
	freeze(b, 0, 1.5, 100)
	assert.Equal(t, 1.0, b.group.Life(cost(b, r)), "no chunk in its decode's bins")
}

// Until the bins are final, a frozen idle bin reads as the bottleneck-time
// counter will count it: host_bound where an admitted request is present
// (its first and last bins too), idle elsewhere.
func TestLabelsReadAsTheBinsWillBeBooked(t *testing.T) {
	b := testBook(1)
	admit(b, []Piece{{Start: at(1), End: at(1.25)}, {Start: at(1.25), End: at(2), Rate: 1}}, longAfter)
	lo, hi, ok := b.Unfrozen(min(b.FinalTo(), b.Index(at(0))), b.Index(at(3)))
	require.True(t, ok)
	for i := lo; i < hi; i++ {
		b.Freeze(i, 5, true, bottleneck.Idle, Activity{})
	}
	before := b.Labels(lo, hi, nil)
	var booked []bottleneck.Label
	b.OnFinal(func(_ int64, l bottleneck.Label) { booked = append(booked, l) })
	release(b, []Piece{{Start: at(1), End: at(1.25)}, {Start: at(1.25), End: at(2), Rate: 1}}, longAfter, make([]float64, 2))
	b.Finalize(hi)
	require.Len(t, booked, int(hi-lo))
	assert.Equal(t, booked, before)
	assert.Equal(t, bottleneck.HostBound, b.Label(b.Index(at(1))), "its first bin, under its queue")
	assert.Equal(t, bottleneck.Idle, b.Label(b.Index(at(2))))
}

// A request admitted to a group whose GPUs' finalisation stands at
// different bins, and released, holds none of their bins for good: every
// GPU finalises past it, and their books close.
func TestARequestOverGPUsFinalisedToDifferentBinsHoldsNone(t *testing.T) {
	l := NewLedger(testConfig(1))
	ahead, behind := book{l.Add()}, book{l.Add()}
	grp := l.Groups([]*GPU{ahead.GPU, behind.GPU}, nil)
	require.Len(t, grp, 1)
	grp[0].Admit(cost(ahead, []Piece{{Start: at(0), End: at(0.5), Rate: 1}}))
	freeze(ahead, 0, 10, 100)
	freeze(behind, 0, 10, 100)
	grp[0].Release(cost(ahead, []Piece{{Start: at(0), End: at(0.5), Rate: 1}}), make([]float64, 1))
	ahead.Finalize(ahead.Index(at(5)))
	behind.Finalize(behind.Index(at(2)))
	// A late request from where one GPU's finalisation stands to past the
	// other's.
	late := []Piece{{Start: at(5), End: at(8), Rate: 1}}
	grp[0].Admit(cost(ahead, late))
	behind.Finalize(behind.Index(at(5)))
	grp[0].Release(cost(ahead, late), make([]float64, 1))
	for _, g := range []book{ahead, behind} {
		g.Finalize(g.Index(at(10)))
		assert.Equal(t, g.Index(at(10)), g.FinalTo())
		tot := g.Totals()
		closeTo(t, 1000, tot.Measured)
		closeTo(t, 350, tot.Attributed)
		closeTo(t, 0, tot.Correction)
	}
}

// The window of bins never holds more than its memory: moving on a bin at
// a time, the oldest is dropped as the newest comes.
func TestTheWindowNeverOutgrowsItsBins(t *testing.T) {
	b := testBook(1)
	freeze(b, 0, 0.1, 100)
	for s := 0.1; s < 70; s += 0.1 {
		freeze(b, s, s+0.1, 100)
		require.LessOrEqual(t, b.l.hi-b.l.lo, int64(len(b.bins)), "at %v s", s)
	}
}
