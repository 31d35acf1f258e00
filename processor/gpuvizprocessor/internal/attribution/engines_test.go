package attribution

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Where the engines' own counts bracket a bin, they decide whether its
// activity's excess over what was admitted waits for requests still to
// come: all of it while the engines ran a request the books have not seen,
// none once every one they ran has been admitted, whatever the bin's age.
// Without two such counts the books do as before (lateShare).
// learnedBook's bins at [40, 41) s show four requests' activity; one is
// admitted.
func TestTheEnginesCountsDecideTheWeightStillToCome(t *testing.T) {
	for _, tc := range []struct {
		name       string
		counts     [][2]float64 // (s, requests running)
		releasedAt float64      // s
		wantJ      float64
	}{
		{"no counts, young", nil, 42, 25},
		{"no counts, past finalize_after", nil, 80, 100},
		{"every running request admitted, young", [][2]float64{{40.05, 1}, {40.95, 1}}, 42, 100},
		{"three not admitted, young", [][2]float64{{40.05, 4}, {40.95, 4}}, 42, 25},
		{"three not admitted at one end", [][2]float64{{39.95, 0}, {40.95, 4}}, 42, 25},
		{"three never admitted, past finalize_after", [][2]float64{{40.05, 4}, {40.95, 4}}, 80, 25},
		{"counts that do not bracket the bins", [][2]float64{{39, 1}, {39.95, 0}}, 42, 25},
		{"counts too far apart", [][2]float64{{39.95, 0}, {39.95 + float64(EngineGap)/1e9 + 1, 0}}, 42, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := learnedBook(t)
			b.l.finalAge = 30
			alone := []Piece{{Start: at(40), End: at(41), Rate: 1}}
			admit(b, alone, at(41.5))
			for _, c := range tc.counts {
				assert.True(t, b.group.Running(at(c[0]), c[1]))
			}
			freeze(b, 30, 40, 100)
			freezeActive(b, 40, 41, 100, 0.008, 0.004)
			freeze(b, 41, tc.releasedAt-1, 100)
			s := make([]float64, 1)
			release(b, alone, at(tc.releasedAt), s)
			assert.InDelta(t, tc.wantJ, s[0], 1e-6)
		})
	}
}

func TestEngineCountsKeepOnePerBinInOrderWithinBounds(t *testing.T) {
	var ec engineCounts
	const width = 100
	assert.True(t, ec.add(1000, 1, width, 0, 3))
	assert.True(t, ec.add(1050, 2, width, 0, 3), "the same bin: replaces")
	assert.Equal(t, []engineCount{{1050, 2}}, ec.counts)
	assert.False(t, ec.add(1040, 5, width, 0, 3), "older than the newest: dropped")
	for k := range 4 {
		assert.True(t, ec.add(int64(1100+100*k), float64(k), width, 0, 3))
	}
	assert.Equal(t, []engineCount{{1200, 1}, {1300, 2}, {1400, 3}}, ec.counts, "at most limit")
	assert.True(t, ec.add(1500, 4, width, 14, 3))
	assert.Equal(t, []engineCount{{1400, 3}, {1500, 4}}, ec.counts, "none behind the window")
}

// A count says a request the books have not seen ran where it exceeds
// what was admitted to its bin by half a request or more; two counts
// bracket the times between them where they are at most EngineGap apart.
func TestEngineCountsUnseenAtTheirBounds(t *testing.T) {
	present := func(int64) (float64, bool) { return 1, true }
	for _, tc := range []struct {
		name          string
		counts        []engineCount
		t             int64
		unseen, known bool
	}{
		{"half a request more", []engineCount{{0, 1.5}}, 0, true, true},
		{"less than half", []engineCount{{0, 1.49}}, 0, false, true},
		{"bracketed at EngineGap", []engineCount{{0, 1}, {EngineGap, 2}}, 1, true, true},
		{"further apart", []engineCount{{0, 1}, {EngineGap + 1, 2}}, 1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := engineCounts{counts: tc.counts}
			unseen, known := ec.unseen(tc.t, present)
			assert.Equal(t, tc.unseen, unseen)
			assert.Equal(t, tc.known, known)
		})
	}
}
