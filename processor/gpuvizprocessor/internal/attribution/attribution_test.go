package attribution

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(s float64) int64 { return t0.Add(time.Duration(s * float64(time.Second))).UnixNano() }

func TestSplit(t *testing.T) {
	ivs := []Interval{{Window{at(0), at(1)}, 100}, {Window{at(1), at(2)}, 200}, {Window{at(2), at(3)}, 50}}
	for _, tc := range []struct {
		name string
		reqs []Request
		want []float64
	}{
		{"alone for two intervals", []Request{{Window: Window{at(0), at(2)}}}, []float64{300}},
		{"two sharing everything", []Request{{Window: Window{at(0), at(3)}}, {Window: Window{at(0), at(3)}}}, []float64{175, 175}},
		{"half overlap", []Request{{Window: Window{at(0), at(1)}}, {Window: Window{at(0.5), at(1)}}}, []float64{100 * 1 / 1.5, 100 * 0.5 / 1.5}},
		{"idle interval unattributed", []Request{{Window: Window{at(2), at(3)}}}, []float64{50}},
		{"outside every interval", []Request{{Window: Window{at(5), at(6)}}}, []float64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(ivs, tc.reqs)
			require.Len(t, got, len(tc.want))
			for i := range got {
				assert.InDelta(t, tc.want[i], got[i].Joules, 1e-9)
			}
		})
	}
}

func TestPhasesShareTheirRequestsEnergy(t *testing.T) {
	ivs := []Interval{{Window{at(0), at(1)}, 100}, {Window{at(1), at(2)}, 200}}
	reqs := []Request{
		{Window: Window{at(0), at(2)}, Phases: []Window{{at(0), at(0.5)}, {at(0.5), at(2)}}},
		{Window: Window{at(1), at(2)}},
	}
	got := Split(ivs, reqs)
	assert.InDelta(t, 100+100, got[0].Joules, 1e-9)
	assert.InDelta(t, 50, got[0].Phases[0], 1e-9)
	assert.InDelta(t, 150, got[0].Phases[1], 1e-9)
	assert.InDelta(t, got[0].Joules, got[0].Phases[0]+got[0].Phases[1], 1e-9, "phases covering the request sum to it")
	assert.InDelta(t, 100, got[1].Joules, 1e-9)
}

// Energy is conserved: whatever the overlap, the shares sum to the energy
// of the intervals the requests touch.
func TestSplitConservesEnergy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var ivs []Interval
		cur := 0.0
		for range 1 + rng.IntN(60) {
			d := 0.05 + rng.Float64()*2
			ivs = append(ivs, Interval{Window{at(cur), at(cur + d)}, rng.Float64() * 700 * d})
			cur += d
		}
		var reqs []Request
		for range 1 + rng.IntN(30) {
			s := rng.Float64() * cur
			reqs = append(reqs, Request{Window: Window{at(s), at(s + rng.Float64()*(cur-s+1))}})
		}
		var want, got float64
		for _, iv := range ivs {
			for _, r := range reqs {
				if Overlap(iv.Window, r.Window) > 0 {
					want += iv.Joules
					break
				}
			}
		}
		for _, s := range Split(ivs, reqs) {
			got += s.Joules
		}
		assert.InDelta(t, want, got, 1e-9*math.Max(1, want))
	}
}
