package timeline

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus sec seconds.
func at(sec float64) time.Time { return t0.Add(time.Duration(math.Round(sec * float64(time.Second)))) }

var (
	gpuA = Key{Host: "node-1", GPU: "GPU-aaaa"}
	gpuB = Key{Host: "node-1", GPU: "GPU-bbbb"}
	gpuC = Key{Host: "node-2", GPU: "GPU-cccc"}
)

func newStore(t testing.TB, mod func(*Config)) *Store {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	require.NoError(t, cfg.Validate())
	return New(cfg)
}

// addSeries adds (sec, value) pairs of one signal.
func addSeries(t testing.TB, s *Store, k Key, sig Signal, pts ...[2]float64) {
	t.Helper()
	for _, p := range pts {
		require.True(t, s.Add(k, sig, at(p[0]), p[1]), "%v at %v", sig, p[0])
	}
}

// steps returns points at first, first+step, ... up to last (inclusive), with
// value f(sec).
func steps(first, last, step float64, f func(sec float64) float64) [][2]float64 {
	var pts [][2]float64
	for i := 0; ; i++ {
		sec := first + float64(i)*step
		if sec > last+1e-9 {
			return pts
		}
		pts = append(pts, [2]float64{sec, f(sec)})
	}
}

func TestConfig(t *testing.T) {
	d := DefaultConfig()
	assert.Equal(t, Config{MaxGPUs: 4096, MaxPointsPerSignal: 4096, Retention: 15 * time.Minute, MaxSpan: 30 * time.Second}, d)
	require.NoError(t, d.Validate())

	tests := []struct {
		name string
		mod  func(*Config)
		want []string
	}{
		{"max_gpus", func(c *Config) { c.MaxGPUs = 0 }, []string{"max_gpus must be at least 1, got 0"}},
		{"max_points_per_signal", func(c *Config) { c.MaxPointsPerSignal = -1 }, []string{"max_points_per_signal must be at least 2 (an energy counter measures between two readings), got -1"}},
		{"max_points_per_signal one", func(c *Config) { c.MaxPointsPerSignal = 1 }, []string{"max_points_per_signal must be at least 2 (an energy counter measures between two readings), got 1"}},
		{"retention", func(c *Config) { c.Retention = 0 }, []string{"retention must be positive, got 0s"}},
		{"max_span", func(c *Config) { c.MaxSpan = -time.Second }, []string{"max_span must be positive, got -1s"}},
		{"all", func(c *Config) { *c = Config{} }, []string{"max_gpus", "max_points_per_signal", "retention", "max_span"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	assert.PanicsWithValue(t, "timeline: max_gpus must be at least 1, got 0", func() {
		c := DefaultConfig()
		c.MaxGPUs = 0
		New(c)
	})
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for sig := range NumSignals {
		n := sig.String()
		assert.NotEmpty(t, n)
		assert.False(t, seen[n], "duplicate name %q", n)
		seen[n] = true
	}
	assert.Equal(t, "utilization", Utilization.String())
	assert.Equal(t, "thermal_throttled", ThermalThrottled.String())
	assert.Equal(t, fmt.Sprintf("Signal(%d)", int(NumSignals)), NumSignals.String())
	assert.Equal(t, "Signal(200)", Signal(200).String())
	assert.Equal(t, "none", EnergyNone.String())
	assert.Equal(t, "counter", EnergyCounter.String())
	assert.Equal(t, "power", EnergyPower.String())
	assert.Equal(t, "EnergySource(7)", EnergySource(7).String())
}

func TestWindowStepFunction(t *testing.T) {
	// Power 100, 200, ... 1000 W at t = 1..10 s: each value holds over the
	// second before it, the first one included.
	power := steps(1, 10, 1, func(sec float64) float64 { return 100 * sec })
	tests := []struct {
		name     string
		mod      func(*Config)
		pts      [][2]float64
		from, to float64
		mean     float64
		max      float64
		seconds  float64
	}{
		{"whole series", nil, power, 0, 10, 550, 1000, 10},
		{"inside, cutting stretches", nil, power, 2.5, 5.5, (0.5*300 + 400 + 500 + 0.5*600) / 3, 600, 3},
		{"one stretch", nil, power, 3.25, 3.75, 400, 400, 0.5},
		{"partial coverage", nil, power, -5, 15, 550, 1000, 10},
		{"before the first sample", nil, power, -5, 0, 0, 0, 0},
		{"after the last sample", nil, power, 10, 20, 0, 0, 0},
		{"first sample covers 1s", nil, [][2]float64{{10, 300}}, 0, 20, 300, 300, 1},
		{"first sample covers MaxSpan when shorter", func(c *Config) { c.MaxSpan = 250 * time.Millisecond },
			[][2]float64{{10, 300}}, 0, 20, 300, 300, 0.25},
		{"MaxSpan caps a long gap", nil, [][2]float64{{10, 100}, {100, 400}}, 0, 100, (100 + 30*400) / 31.0, 400, 31},
		{"gap within MaxSpan is covered", nil, [][2]float64{{10, 100}, {30, 400}}, 0, 100, (100 + 20*400) / 21.0, 400, 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, tt.mod)
			addSeries(t, s, gpuA, Power, tt.pts...)
			w := s.Window(gpuA, at(tt.from), at(tt.to))
			st := w.Stats[Power]
			assert.InDelta(t, tt.mean, st.Mean, 1e-9)
			assert.InDelta(t, tt.max, st.Max, 1e-9)
			assert.InDelta(t, tt.seconds, st.Seconds, 1e-9)
			assert.InDelta(t, tt.seconds/(tt.to-tt.from), w.Coverage, 1e-12)
			assert.True(t, w.From.Equal(at(tt.from)) && w.To.Equal(at(tt.to)))
			for sig := range NumSignals {
				if sig != Power {
					assert.Zero(t, w.Stats[sig], sig.String())
				}
			}
		})
	}
}

func TestWindowCoverage(t *testing.T) {
	s := newStore(t, nil)
	addSeries(t, s, gpuA, Utilization, steps(1, 4, 1, func(float64) float64 { return 0.5 })...) // (0, 4]
	addSeries(t, s, gpuA, Power, steps(1, 6, 1, func(float64) float64 { return 300 })...)       // (0, 6]
	addSeries(t, s, gpuA, SMActivity, steps(1, 10, 1, func(float64) float64 { return 0.2 })...) // (0, 10]: not coverage
	w := s.Window(gpuA, at(0), at(10))
	assert.InDelta(t, 0.6, w.Coverage, 1e-12, "Power covers more than Utilization")
	assert.InDelta(t, 4, w.Stats[Utilization].Seconds, 1e-12)
	assert.InDelta(t, 10, w.Stats[SMActivity].Seconds, 1e-12)

	// Unknown GPU and empty windows: nothing but the edges.
	assert.Equal(t, Window{From: at(0), To: at(10)}, s.Window(gpuB, at(0), at(10)))
	assert.Equal(t, Window{From: at(5), To: at(5)}, s.Window(gpuA, at(5), at(5)))
	assert.Equal(t, Window{From: at(6), To: at(5)}, s.Window(gpuA, at(6), at(5)))
	assert.Empty(t, s.Intervals(gpuA, at(6), at(5), nil))
	assert.Empty(t, s.Intervals(gpuB, at(0), at(10), nil))
}

func TestWindowEnergy(t *testing.T) {
	type series struct {
		sig Signal
		pts [][2]float64
	}
	counter := [][2]float64{{0, 1000}, {10, 2000}, {20, 4000}}
	watts100 := steps(1, 30, 1, func(float64) float64 { return 100 })
	tests := []struct {
		name     string
		energy   [][2]float64
		series   []series
		from, to float64
		want     float64
		source   EnergySource
		mixed    bool // intervals draw on both sources: their sum differs
	}{
		{"counter interpolated at both edges", counter, nil, 5, 15, 1500, EnergyCounter, false},
		{"counter inside one segment", counter, nil, 12.5, 17.5, 1000, EnergyCounter, false},
		{"counter at its points", counter, nil, 0, 20, 3000, EnergyCounter, false},
		{"counter preferred over power", counter, []series{{Power, watts100}}, 5, 15, 1500, EnergyCounter, false},
		{"counter does not reach from: power", counter, []series{{Power, watts100}}, -1, 5, 500, EnergyPower, false},
		{"counter does not reach to: power", counter, []series{{Power, watts100}}, 15, 25, 1000, EnergyPower, true},
		{"counter reset: power", [][2]float64{{0, 1000}, {10, 2000}, {20, 50}, {30, 1050}},
			[]series{{Power, watts100}}, 5, 25, 2000, EnergyPower, false},
		{"after a reset the counter counts again", [][2]float64{{0, 1000}, {10, 2000}, {20, 50}, {30, 1050}},
			[]series{{Power, watts100}}, 21, 29, 800, EnergyCounter, false},
		{"before a reset the counter counts", [][2]float64{{0, 1000}, {10, 2000}, {20, 50}, {30, 1050}},
			[]series{{Power, watts100}}, 5, 9, 400, EnergyCounter, false},
		{"reset and no power: none", [][2]float64{{0, 1000}, {10, 2000}, {20, 50}}, nil, 5, 15, 0, EnergyNone, false},
		{"no counter: power integral", nil,
			[]series{{Power, [][2]float64{{1, 100}, {2, 200}, {3, 400}}}}, 0.5, 2.5, 0.5*100 + 200 + 0.5*400, EnergyPower, false},
		{"power over its covered part only", nil,
			[]series{{Power, [][2]float64{{10, 100}, {11, 200}}}}, 0, 20, 300, EnergyPower, false},
		{"neither: none", nil, []series{{Utilization, steps(1, 10, 1, func(float64) float64 { return 1 })}}, 0, 10, 0, EnergyNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, nil)
			for _, p := range tt.energy {
				require.True(t, s.AddEnergy(gpuA, at(p[0]), p[1]))
			}
			for _, ser := range tt.series {
				addSeries(t, s, gpuA, ser.sig, ser.pts...)
			}
			w := s.Window(gpuA, at(tt.from), at(tt.to))
			assert.Equal(t, tt.source, w.EnergySource)
			if tt.source == EnergyCounter {
				assert.Equal(t, tt.want, w.EnergyJ, "exact") // the edges fall on exact binary fractions
			} else {
				assert.InDelta(t, tt.want, w.EnergyJ, 1e-9)
			}
			ivs := s.Intervals(gpuA, at(tt.from), at(tt.to), nil)
			if tt.source != EnergyNone && !tt.mixed {
				var sum float64
				for _, iv := range ivs {
					if iv.EnergyKnown {
						sum += iv.EnergyJ
					}
				}
				assert.InDelta(t, tt.want, sum, 1e-9, "intervals add up to the window")
			}
		})
	}
}

func TestIntervalsBoundaries(t *testing.T) {
	s := newStore(t, nil)
	addSeries(t, s, gpuA, Power, steps(1, 3, 1, func(sec float64) float64 { return 100 * sec })...)
	addSeries(t, s, gpuA, Utilization, steps(0.5, 3.5, 1, func(sec float64) float64 { return sec / 10 })...)
	ivs := s.Intervals(gpuA, at(1), at(3), nil)
	type row struct {
		start, end  float64
		power, util float64
	}
	want := []row{{1, 1.5, 200, 0.15}, {1.5, 2, 200, 0.25}, {2, 2.5, 300, 0.25}, {2.5, 3, 300, 0.35}}
	require.Len(t, ivs, len(want))
	for i, w := range want {
		iv := ivs[i]
		assert.Equal(t, at(w.start), iv.Start, "start %d", i)
		assert.Equal(t, at(w.end), iv.End, "end %d", i)
		assert.True(t, iv.Has[Power] && iv.Has[Utilization])
		assert.InDelta(t, w.power, iv.Values[Power], 1e-12)
		assert.InDelta(t, w.util, iv.Values[Utilization], 1e-12)
		assert.True(t, iv.EnergyKnown)
		assert.InDelta(t, w.power*(w.end-w.start), iv.EnergyJ, 1e-9)
		for sig := range NumSignals {
			if sig != Power && sig != Utilization {
				assert.False(t, iv.Has[sig])
				assert.Zero(t, iv.Values[sig])
			}
		}
	}

	// dst is appended to, and can be reused.
	buf := s.Intervals(gpuA, at(1), at(2), ivs[:0])
	assert.Len(t, buf, 2)
	assert.Same(t, &ivs[0], &buf[0])
	buf = s.Intervals(gpuA, at(2), at(3), buf)
	assert.Len(t, buf, 4)
	assert.Equal(t, ivs, buf)

	// A stretch nobody covers is left out; a MaxSpan cap and a first sample
	// cut intervals where no sample is.
	s = newStore(t, nil)
	addSeries(t, s, gpuA, Power, [2]float64{10, 100}, [2]float64{11, 100}, [2]float64{100, 200})
	ivs = s.Intervals(gpuA, at(0), at(100), nil)
	require.Len(t, ivs, 3)
	assert.Equal(t, [2]time.Time{at(9), at(10)}, [2]time.Time{ivs[0].Start, ivs[0].End})
	assert.Equal(t, [2]time.Time{at(10), at(11)}, [2]time.Time{ivs[1].Start, ivs[1].End})
	assert.Equal(t, [2]time.Time{at(70), at(100)}, [2]time.Time{ivs[2].Start, ivs[2].End})
	assert.InDelta(t, 200*30, ivs[2].EnergyJ, 1e-9)
}

func TestIntervalsSlowSignals(t *testing.T) {
	// Power and utilisation from the driver at 6/s, GPM every 10 s, as the
	// receiver sends them.
	s := newStore(t, nil)
	for i := 1; i <= 6*60; i++ {
		ts := t0.Add(time.Duration(i) * time.Second / 6)
		require.True(t, s.Add(gpuA, Power, ts, 300+float64(i%7)))
		require.True(t, s.Add(gpuA, Utilization, ts, float64(i%3)/2))
	}
	for sec := 10; sec <= 60; sec += 10 {
		require.True(t, s.Add(gpuA, SMActivity, at(float64(sec)), float64(sec)/100))
		require.True(t, s.Add(gpuA, TensorActivity, at(float64(sec)), float64(sec)/200))
	}
	ivs := s.Intervals(gpuA, at(0), at(60), nil)
	// One interval per 1/6 s: the GPM timestamps and the first GPM sample's
	// start (9 s) fall on that grid.
	require.Len(t, ivs, 360)
	var prevEnd time.Time
	for i, iv := range ivs {
		if i > 0 {
			assert.Equal(t, prevEnd, iv.Start, "intervals tile the covered part")
		}
		prevEnd = iv.End
		assert.True(t, iv.Has[Power] && iv.Has[Utilization])
		gpm := !iv.Start.Before(at(9))
		assert.Equal(t, gpm, iv.Has[SMActivity], "SM activity at %v", iv.Start.Sub(t0))
		assert.Equal(t, gpm, iv.Has[TensorActivity])
		if gpm {
			// The value in effect is the next GPM sample's.
			next := math.Ceil(iv.End.Sub(t0).Seconds()/10) * 10
			assert.InDelta(t, next/100, iv.Values[SMActivity], 1e-12, "at %v", iv.Start.Sub(t0))
		}
		assert.False(t, iv.Has[DRAMActivity])
	}
	w := s.Window(gpuA, at(0), at(60))
	assert.InDelta(t, 51, w.Stats[SMActivity].Seconds, 1e-9)
	assert.InDelta(t, (10*1+20*10+30*10+40*10+50*10+60*10)/51.0/100, w.Stats[SMActivity].Mean, 1e-12)
	assert.InDelta(t, 1, w.Coverage, 1e-12)
}

func TestIntervalsEnergyMatchesWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// One GPU with a counter, one without; power at 6/s with jitter and a few
	// long gaps, so windows see partial coverage and MaxSpan caps.
	s := newStore(t, nil)
	withCounter, powerOnly := gpuA, gpuB
	ts := t0
	energy := 5e8 // a counter since driver load is large
	for i := 0; i < 6*600; i++ {
		step := time.Duration(140+rng.IntN(60)) * time.Millisecond
		if rng.IntN(500) == 0 {
			step = time.Duration(5+rng.IntN(60)) * time.Second // a gap, sometimes past MaxSpan
		}
		ts = ts.Add(step)
		p := 100 + 600*rng.Float64()
		energy += p * step.Seconds()
		for _, k := range []Key{withCounter, powerOnly} {
			require.True(t, s.Add(k, Power, ts, p))
			if i%5 == 0 {
				require.True(t, s.Add(k, SMActivity, ts.Add(-37*time.Millisecond), rng.Float64()))
			}
		}
		if i%6 == 0 {
			require.True(t, s.AddEnergy(withCounter, ts, energy))
		}
	}
	span := ts.Sub(t0)
	check := func(k Key, want EnergySource) int {
		n := 0
		for range 200 {
			from := t0.Add(time.Duration(rng.Int64N(int64(span))))
			to := from.Add(time.Duration(rng.Int64N(int64(30 * time.Second))))
			w := s.Window(k, from, to)
			if w.EnergySource != want {
				continue
			}
			n++
			ivs := s.Intervals(k, from, to, nil)
			var sum, powerSec float64
			for i, iv := range ivs {
				if want == EnergyCounter {
					require.True(t, iv.EnergyKnown, "the counter covers every interval")
				} else {
					require.Equal(t, iv.Has[Power], iv.EnergyKnown)
				}
				sum += iv.EnergyJ
				require.True(t, iv.End.After(iv.Start))
				require.False(t, iv.Start.Before(from))
				require.False(t, iv.End.After(to))
				if i > 0 {
					require.False(t, iv.Start.Before(ivs[i-1].End))
				}
				if iv.Has[Power] {
					powerSec += iv.End.Sub(iv.Start).Seconds()
				}
			}
			assert.InEpsilon(t, w.EnergyJ, sum, 1e-9, "%v: window %v + %v", want, from.Sub(t0), to.Sub(from))
			assert.InDelta(t, w.Stats[Power].Seconds, powerSec, 1e-6)
		}
		return n
	}
	assert.Greater(t, check(withCounter, EnergyCounter), 100)
	assert.Greater(t, check(powerOnly, EnergyPower), 100)
}

func TestRingOverwrite(t *testing.T) {
	s := newStore(t, func(c *Config) { c.MaxPointsPerSignal = 8 })
	addSeries(t, s, gpuA, Power, steps(1, 20, 1, func(sec float64) float64 { return sec })...)
	w := s.Window(gpuA, at(0), at(20))
	// Points 13..20 remain; 13 still describes (12, 13], as its dropped
	// predecessor says.
	assert.InDelta(t, 8, w.Stats[Power].Seconds, 1e-12)
	assert.InDelta(t, (13+20)/2.0, w.Stats[Power].Mean, 1e-12)
	ivs := s.Intervals(gpuA, at(0), at(20), nil)
	require.Len(t, ivs, 8)
	assert.Equal(t, at(12), ivs[0].Start)

	// Late points: older than the oldest of a full ring, or than a dropped
	// point, are refused; in the middle, one is inserted and the oldest goes.
	assert.False(t, s.Add(gpuA, Power, at(12.5), 1))
	assert.False(t, s.Add(gpuA, Power, at(12), 1))
	assert.True(t, s.Add(gpuA, Power, at(15.5), 100))
	w = s.Window(gpuA, at(0), at(20))
	assert.InDelta(t, 7, w.Stats[Power].Seconds, 1e-12, "14..20 with 15.5 between")
	assert.InDelta(t, 100, w.Stats[Power].Max, 0)
	assert.InDelta(t, 14*1+15*1+100*0.5+16*0.5+17+18+19+20, w.Stats[Power].Mean*7, 1e-9)
}

func TestRingGrowth(t *testing.T) {
	s := newStore(t, func(c *Config) { c.MaxPointsPerSignal = 100 })
	addSeries(t, s, gpuA, Power, steps(1, 250, 1, func(sec float64) float64 { return sec })...)
	g := s.gpus[gpuA]
	assert.Len(t, g.sig[Power].buf, 100, "doubled up to the limit, not past it")
	assert.Equal(t, 100, g.sig[Power].n)
	assert.Nil(t, g.sig[Utilization].buf, "rings are allocated on first use")
	w := s.Window(gpuA, at(0), at(250))
	assert.InDelta(t, 100, w.Stats[Power].Seconds, 1e-12)
	assert.InDelta(t, 250, w.Stats[Power].Max, 0)

	// A slow signal under retention keeps a small ring.
	s = newStore(t, func(c *Config) { c.Retention = time.Minute })
	addSeries(t, s, gpuA, SMActivity, steps(10, 3600, 10, func(float64) float64 { return 0.5 })...)
	assert.Len(t, s.gpus[gpuA].sig[SMActivity].buf, 16)
}

func TestOutOfOrder(t *testing.T) {
	s := newStore(t, nil)
	addSeries(t, s, gpuA, Power, [2]float64{1, 100}, [2]float64{2, 200}, [2]float64{4, 400}, [2]float64{5, 500})
	assert.True(t, s.Add(gpuA, Power, at(3), 300), "late point inserted in order")
	w := s.Window(gpuA, at(0), at(5))
	assert.InDelta(t, 300, w.Stats[Power].Mean, 1e-12)
	assert.InDelta(t, 5, w.Stats[Power].Seconds, 1e-12)

	assert.True(t, s.Add(gpuA, Power, at(3), 800), "a duplicate timestamp replaces the value")
	assert.True(t, s.Add(gpuA, Power, at(5), 0), "also the newest")
	w = s.Window(gpuA, at(0), at(5))
	assert.InDelta(t, (100+200+800+400+0)/5.0, w.Stats[Power].Mean, 1e-12)
	assert.InDelta(t, 800, w.Stats[Power].Max, 0)
	assert.Len(t, s.Intervals(gpuA, at(0), at(5), nil), 5)

	assert.True(t, s.Add(gpuA, Power, at(0.5), 50), "before the first point")
	w = s.Window(gpuA, at(-1), at(5))
	assert.InDelta(t, 5.5, w.Stats[Power].Seconds, 1e-12, "(−0.5, 0.5] then (0.5, 1]...")

	// Another signal's late point counts from the GPU's newest point.
	assert.True(t, s.Add(gpuA, Utilization, at(1), 0.5))
	assert.True(t, s.Add(gpuA, Power, at(1000), 1))
	assert.False(t, s.Add(gpuA, Utilization, at(99), 0.5), "older than newest − Retention")
	assert.True(t, s.Add(gpuA, Utilization, at(100), 0.5))
	newest, ok := s.Newest(gpuA)
	assert.True(t, ok)
	assert.Equal(t, at(1000), newest)
}

func TestRefused(t *testing.T) {
	s := newStore(t, nil)
	// Huge finite values too: their running integrals would overflow.
	// Negative ones too: no signal, nor the energy counter, reads below 0.
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, -2 * MaxValue, -1, math.Copysign(0, -1) - 1e-300} {
		assert.False(t, s.Add(gpuA, Power, at(1), v))
		assert.False(t, s.AddEnergy(gpuA, at(1), v))
	}
	assert.False(t, s.Add(gpuA, NumSignals, at(1), 1), "no such signal")
	assert.False(t, s.Add(gpuA, Power, time.Time{}, 1), "zero time")
	assert.False(t, s.Add(gpuA, Power, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), 1), "past int64 nanoseconds")
	assert.Equal(t, 0, s.Len(), "refused points create no GPU")
	_, ok := s.Newest(gpuA)
	assert.False(t, ok)
	assert.True(t, s.Add(gpuA, Power, at(1), MaxValue), "any value within [0, MaxValue]")
	assert.True(t, s.AddEnergy(gpuA, at(2), 0))
	newest, ok := s.Newest(gpuA)
	assert.True(t, ok)
	assert.Equal(t, at(2), newest, "energy points count")
}

func TestMaxGPUs(t *testing.T) {
	s := newStore(t, func(c *Config) { c.MaxGPUs = 2; c.Retention = time.Minute })
	assert.True(t, s.Add(gpuA, Power, at(1), 1))
	assert.True(t, s.Add(gpuB, Power, at(1), 1))
	assert.False(t, s.Add(gpuC, Power, at(1), 1))
	assert.False(t, s.AddEnergy(gpuC, at(1), 1))
	s.SetIndex(gpuC, 0)
	s.SetProcess(gpuC, 7, at(1))
	assert.Equal(t, 2, s.Len())
	_, ok := s.ByIndex(gpuC.Host, 0)
	assert.False(t, ok)
	assert.True(t, s.Add(gpuA, Power, at(100), 1), "known GPUs still learn")
	assert.Equal(t, 1, s.Expire(at(90)))
	assert.True(t, s.Add(gpuC, Power, at(100), 1), "room again")
	assert.Equal(t, []Key{gpuA, gpuC}, s.GPUs(""))
}

func TestRetention(t *testing.T) {
	s := newStore(t, func(c *Config) { c.Retention = 10 * time.Second })
	addSeries(t, s, gpuA, Utilization, steps(1, 5, 1, func(float64) float64 { return 1 })...)
	addSeries(t, s, gpuA, Power, steps(1, 30, 1, func(sec float64) float64 { return sec })...)
	w := s.Window(gpuA, at(0), at(30))
	// Power keeps 20..30; 20 describes (19, 20].
	assert.InDelta(t, 11, w.Stats[Power].Seconds, 1e-12)
	assert.InDelta(t, 25, w.Stats[Power].Mean, 1e-12)
	assert.Zero(t, w.Stats[Utilization], "utilisation stopped long ago: hidden though not yet overwritten")
	assert.False(t, s.Add(gpuA, Power, at(19), 1))
	assert.False(t, s.Add(gpuA, Utilization, at(6), 1))
	assert.True(t, s.Add(gpuA, Utilization, at(25), 1))
	assert.InDelta(t, 20, s.Window(gpuA, at(0), at(30)).Stats[Utilization].Seconds, 1e-12,
		"its dropped predecessor (5 s) still bounds its stretch, within MaxSpan")

	// Counter points past retention no longer bracket a window.
	assert.False(t, s.AddEnergy(gpuA, at(19), 0))
	require.True(t, s.AddEnergy(gpuA, at(20.5), 0))
	require.True(t, s.AddEnergy(gpuA, at(30), 100))
	w = s.Window(gpuA, at(21), at(29))
	assert.Equal(t, EnergyCounter, w.EnergySource)
	// Power (n W over (n−1, n]) covers the segment 20.5→30, so it splits the
	// segment's 100 J: ∫ over (21, 29] is 22+…+29, over (20.5, 30] 0.5·21+22+…+30.
	assert.InDelta(t, 100*204/244.5, w.EnergyJ, 1e-9)
	require.True(t, s.Add(gpuA, Power, at(31), 1)) // 20.5 is now past retention
	w = s.Window(gpuA, at(21), at(29))
	assert.Equal(t, EnergyPower, w.EnergySource)
}

func TestExpire(t *testing.T) {
	s := newStore(t, func(c *Config) { c.Retention = time.Minute })
	require.True(t, s.Add(gpuA, Power, at(100), 1))
	require.True(t, s.Add(gpuB, Power, at(200), 1))
	s.SetIndex(gpuA, 0)
	s.SetIndex(gpuB, 1)
	s.SetProcess(gpuA, 42, at(100))
	s.SetProcess(gpuB, 42, at(200))
	s.SetIndex(gpuC, 3) // known only from the directory

	assert.Equal(t, 0, s.Expire(at(159.5)))
	assert.Equal(t, 1, s.Expire(at(160)), "A has no point newer than now − Retention")
	assert.Equal(t, []Key{gpuB, gpuC}, s.GPUs(""))
	assert.Equal(t, []Key{gpuB}, s.GPUs(gpuA.Host))
	_, ok := s.ByIndex(gpuA.Host, 0)
	assert.False(t, ok, "A's index went with it")
	assert.Equal(t, []Key{gpuB}, s.ProcessGPUs(gpuA.Host, 42, time.Time{}))
	assert.Equal(t, Window{From: at(0), To: at(200)}, s.Window(gpuA, at(0), at(200)))

	// C, without points, gets Retention from the first Expire that saw it.
	assert.Equal(t, 0, s.Expire(at(219)))
	_, ok = s.ByIndex(gpuC.Host, 3)
	assert.True(t, ok)
	assert.Equal(t, 2, s.Expire(at(261)))
	assert.Equal(t, 0, s.Len())
	assert.Empty(t, s.GPUs(""))
	assert.Empty(t, s.hosts)
	assert.Empty(t, s.byIndex)

	// A forgotten GPU starts afresh.
	require.True(t, s.Add(gpuA, Power, at(10), 5))
	assert.InDelta(t, 1, s.Window(gpuA, at(0), at(300)).Stats[Power].Seconds, 1e-12)
}

func TestDirectory(t *testing.T) {
	s := newStore(t, func(c *Config) { c.Retention = time.Minute })
	a0 := Key{"node-1", "GPU-a0"}
	a1 := Key{"node-1", "GPU-a1"}
	b0 := Key{"node-2", "GPU-b0"}
	s.SetIndex(a0, 0)
	s.SetIndex(a1, 1)
	s.SetIndex(b0, 0)
	for _, tt := range []struct {
		host  string
		index int
		want  Key
		ok    bool
	}{
		{"node-1", 0, a0, true},
		{"node-1", 1, a1, true},
		{"node-2", 0, b0, true},
		{"node-2", 1, Key{}, false},
		{"node-3", 0, Key{}, false},
		{"", 0, Key{}, false},
	} {
		k, ok := s.ByIndex(tt.host, tt.index)
		assert.Equal(t, tt.ok, ok, "%s/%d", tt.host, tt.index)
		assert.Equal(t, tt.want, k, "%s/%d", tt.host, tt.index)
	}
	// Indexes are unique per host: the latest claim wins.
	s.SetIndex(a1, 0)
	k, _ := s.ByIndex("node-1", 0)
	assert.Equal(t, a1, k)
	_, ok := s.ByIndex("node-1", 1)
	assert.False(t, ok)
	s.SetIndex(a0, 1)
	k, _ = s.ByIndex("node-1", 1)
	assert.Equal(t, a0, k)
	s.SetIndex(a0, -1)
	_, ok = s.ByIndex("node-1", 1)
	assert.False(t, ok)
	k, _ = s.ByIndex("node-1", 0)
	assert.Equal(t, a1, k)

	assert.Equal(t, []Key{a0, a1}, s.GPUs("node-1"))
	assert.Equal(t, []Key{a0, a1, b0}, s.GPUs(""))
	assert.Empty(t, s.GPUs("node-3"))
}

func TestProcessGPUs(t *testing.T) {
	s := newStore(t, func(c *Config) { c.Retention = time.Minute })
	a0 := Key{"node-1", "GPU-a0"}
	a1 := Key{"node-1", "GPU-a1"}
	a2 := Key{"node-1", "GPU-a2"}
	b0 := Key{"node-2", "GPU-b0"}
	for _, k := range []Key{a0, a1, a2, b0} {
		require.True(t, s.Add(k, Power, at(10), 100))
	}
	s.SetProcess(a2, 42, at(10))
	s.SetProcess(a0, 42, at(10))
	s.SetProcess(a1, 43, at(10))
	s.SetProcess(b0, 42, at(10))
	assert.Equal(t, []Key{a0, a2}, s.ProcessGPUs("node-1", 42, time.Time{}), "sorted by GPU id")
	assert.Equal(t, []Key{b0}, s.ProcessGPUs("node-2", 42, time.Time{}), "hosts do not mix")
	assert.Empty(t, s.ProcessGPUs("node-1", 44, time.Time{}))
	assert.Empty(t, s.ProcessGPUs("", 42, time.Time{}))
	// A request from later than MaxSpan (30 s) after the sightings: the PID
	// may be another process's by then.
	assert.Equal(t, []Key{a0, a2}, s.ProcessGPUs("node-1", 42, at(40)))
	assert.Empty(t, s.ProcessGPUs("node-1", 42, at(40.5)))

	// Forgotten once the GPU's newest point is more than Retention past the
	// last sighting; sightings refresh.
	s.SetProcess(a2, 42, at(50))
	require.True(t, s.Add(a0, Power, at(70), 100))
	require.True(t, s.Add(a2, Power, at(100), 100))
	assert.Equal(t, []Key{a0, a2}, s.ProcessGPUs("node-1", 42, time.Time{}))
	require.True(t, s.Add(a0, Power, at(70.5), 100))
	assert.Equal(t, []Key{a2}, s.ProcessGPUs("node-1", 42, time.Time{}))

	// At most 64 per GPU: the one seen longest ago goes.
	for pid := int64(1000); pid < 1000+maxProcesses; pid++ {
		s.SetProcess(b0, pid, at(float64(pid-1000)/10+20))
	}
	assert.Empty(t, s.ProcessGPUs("node-2", 42, time.Time{}), "42 was seen first")
	assert.Equal(t, []Key{b0}, s.ProcessGPUs("node-2", 1000, time.Time{}))
	s.SetProcess(b0, 1000, at(30)) // refreshed, so 1001 is now the oldest
	s.SetProcess(b0, 2000, at(30))
	assert.Len(t, s.gpus[b0].procs, maxProcesses)
	assert.Equal(t, []Key{b0}, s.ProcessGPUs("node-2", 1000, time.Time{}))
	assert.Empty(t, s.ProcessGPUs("node-2", 1001, time.Time{}))
	assert.Equal(t, []Key{b0}, s.ProcessGPUs("node-2", 2000, time.Time{}))
}

func TestAddDoesNotAllocate(t *testing.T) {
	s := newStore(t, func(c *Config) { c.MaxPointsPerSignal = 64 })
	keys := []Key{gpuA, gpuB, gpuC}
	i := 0
	add := func() {
		ts := t0.Add(time.Duration(i/len(keys)) * time.Second / 6)
		s.Add(keys[i%len(keys)], Signal(i%int(NumSignals)), ts, 1)
		s.AddEnergy(keys[i%len(keys)], ts, float64(i))
		i++
	}
	for range 64 * 3 * int(NumSignals) * 2 {
		add()
	}
	assert.Zero(t, testing.AllocsPerRun(1000, add))
}

func TestConcurrent(t *testing.T) {
	s := newStore(t, func(c *Config) { c.MaxPointsPerSignal = 256; c.Retention = 20 * time.Second; c.MaxGPUs = 6 })
	const writers, points = 4, 3000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range points {
				k := Key{Host: fmt.Sprintf("node-%d", w%2), GPU: fmt.Sprintf("GPU-%d-%d", w, i%2)}
				ts := at(float64(i) / 6)
				s.Add(k, Signal(i%int(NumSignals)), ts, float64(i))
				s.AddEnergy(k, ts, float64(i))
				if i%100 == 0 {
					s.SetIndex(k, i%8)
					s.SetProcess(k, int64(i%5), ts)
				}
			}
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Go(func() {
			var buf []Interval
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				k := Key{Host: fmt.Sprintf("node-%d", r%2), GPU: fmt.Sprintf("GPU-%d-%d", r, i%2)}
				from := at(float64(i%500) / 6)
				w := s.Window(k, from, from.Add(5*time.Second))
				assert.LessOrEqual(t, w.Coverage, 1.0)
				buf = s.Intervals(k, from, from.Add(5*time.Second), buf[:0])
				s.GPUs("")
				s.GPUs(k.Host)
				s.ByIndex(k.Host, i%8)
				s.ProcessGPUs(k.Host, int64(i%5), time.Time{})
				s.Newest(k)
				s.Len()
				if i%50 == 0 {
					s.Expire(at(float64(i) / 10))
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	assert.LessOrEqual(t, s.Len(), 6)
}

// BenchmarkAdd is the metrics side in steady state: full rings wrapping,
// 1024 GPUs on 128 hosts, every signal, points in time order the way a batch
// carries them (runs of one GPU).
func BenchmarkAdd(b *testing.B) {
	s := newStore(b, func(c *Config) { c.MaxPointsPerSignal = 256 })
	var keys []Key
	for h := range 128 {
		for g := range 8 {
			keys = append(keys, Key{Host: fmt.Sprintf("gpu-node-%03d.cluster.local", h), GPU: fmt.Sprintf("GPU-%08x-1234-5678-9abc-def012345678", h*8+g)})
		}
	}
	// Keys from a batch are fresh strings, not the ones the store holds.
	probe := make([]Key, len(keys))
	for i, k := range keys {
		probe[i] = Key{Host: string([]byte(k.Host)), GPU: string([]byte(k.GPU))}
	}
	i := 0
	add := func() {
		// One GPU's 16 series in a run, then the next GPU; a round of all
		// GPUs per 1/6 s.
		n := i / (int(NumSignals) + 1)
		k := probe[n%len(probe)]
		ts := t0.Add(time.Duration(n/len(probe)) * time.Second / 6)
		if sig := Signal(i % (int(NumSignals) + 1)); sig < NumSignals {
			s.Add(k, sig, ts, 0.5)
		} else {
			s.AddEnergy(k, ts, float64(i))
		}
		i++
	}
	for range len(keys) * (int(NumSignals) + 1) * 300 {
		add()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		add()
	}
}

// BenchmarkAddScattered is Add with every point on another GPU than the
// previous one: no run to exploit.
func BenchmarkAddScattered(b *testing.B) {
	s := newStore(b, func(c *Config) { c.MaxPointsPerSignal = 256 })
	var keys []Key
	for h := range 128 {
		for g := range 8 {
			keys = append(keys, Key{Host: fmt.Sprintf("gpu-node-%03d.cluster.local", h), GPU: fmt.Sprintf("GPU-%08x-1234-5678-9abc-def012345678", h*8+g)})
		}
	}
	i := 0
	add := func() {
		ts := t0.Add(time.Duration(i/len(keys)/int(NumSignals)) * time.Second / 6)
		s.Add(keys[i%len(keys)], Signal((i/len(keys))%int(NumSignals)), ts, 0.5)
		i++
	}
	for range len(keys) * int(NumSignals) * 300 {
		add()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		add()
	}
}

// benchGPU fills one GPU the way the receiver does for 11 minutes: driver
// samples at 6/s, everything else every 10 s, the energy counter per scrape.
func benchGPU(b *testing.B) *Store {
	s := newStore(b, nil)
	for i := 1; i <= 6*660; i++ {
		ts := t0.Add(time.Duration(i) * time.Second / 6)
		s.Add(gpuA, Utilization, ts, float64(i%10)/10)
		s.Add(gpuA, MemoryController, ts, float64(i%7)/10)
		s.Add(gpuA, Power, ts, 300+float64(i%50))
		if i%60 == 0 {
			for sig := SMActivity; sig < NumSignals; sig++ {
				if sig != Power {
					s.Add(gpuA, sig, ts, float64(i%13))
				}
			}
			s.AddEnergy(gpuA, ts, 1e8+float64(i)*50)
		}
	}
	return s
}

// BenchmarkWindow is the traces side: a 10 s window over 6/s samples.
func BenchmarkWindow(b *testing.B) {
	s := benchGPU(b)
	from := at(300.05)
	to := from.Add(10 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		w := s.Window(gpuA, from, to)
		if w.EnergySource != EnergyCounter {
			b.Fatal(w.EnergySource)
		}
	}
}

// BenchmarkIntervals cuts the same 10 s window into its ~60 intervals.
func BenchmarkIntervals(b *testing.B) {
	s := benchGPU(b)
	from := at(300.05)
	to := from.Add(10 * time.Second)
	var buf []Interval
	b.ReportAllocs()
	for b.Loop() {
		buf = s.Intervals(gpuA, from, to, buf[:0])
	}
}

// Settled follows the energy counter, not a series stamped ahead of it: a
// receiver's scrape (utilisation at 2 s) arrives before its sampling
// clock's ticks for the same time (energy to 1 s) are handed on.
func TestSettledFollowsTheEnergy(t *testing.T) {
	s := newStore(t, nil)
	_, ok := s.Settled(gpuA)
	assert.False(t, ok, "an unknown GPU has settled nowhere")
	addSeries(t, s, gpuA, Utilization, [2]float64{2, 0.9})
	got, ok := s.Settled(gpuA)
	require.True(t, ok)
	assert.Equal(t, at(2), got, "no energy counter: the newest point")
	for _, sec := range []float64{0, 0.25, 0.5, 0.75, 1} {
		require.True(t, s.AddEnergy(gpuA, at(sec), 1000+100*sec))
	}
	got, _ = s.Settled(gpuA)
	assert.Equal(t, at(1), got)
	newest, _ := s.Newest(gpuA)
	assert.Equal(t, at(2), newest)
}

func TestPodGPUs(t *testing.T) {
	s := newStore(t, func(c *Config) { c.Retention = 10 * time.Minute })
	a0, a1 := Key{"node-1", "GPU-a0"}, Key{"node-1", "GPU-a1"}
	b0 := Key{"node-2", "GPU-b0"}
	for _, k := range []Key{a0, a1, b0} {
		require.True(t, s.Add(k, Power, at(0), 100))
		require.True(t, s.Add(k, Power, at(300), 100))
	}
	vllm0 := Pod{UID: "uid-0", Namespace: "llm", Name: "vllm-0"}
	// vllm-0 holds a1 and a0 from 10 s to 100 s, seen every 10 s; then the
	// pod is recreated under the same name (a StatefulSet) on b0.
	for sec := 10.0; sec <= 100; sec += 10 {
		s.SetPod(a1, vllm0, at(sec))
		s.SetPod(a0, Pod{Namespace: "llm", Name: "vllm-0"}, at(sec)) // the allocation names no UID
	}
	for sec := 200.0; sec <= 300; sec += 10 {
		s.SetPod(b0, Pod{UID: "uid-1", Namespace: "llm", Name: "vllm-0"}, at(sec))
	}
	byName := Pod{Namespace: "llm", Name: "vllm-0"}
	for _, tc := range []struct {
		pod      Pod
		from, to float64
		want     []Key
	}{
		{byName, 50, 60, []Key{a0, a1}},        // sorted, across what each source said
		{byName, 115, 118, []Key{a0, a1}},      // within two sighting intervals of the last
		{byName, 130, 140, nil},                // neither incarnation held a GPU then
		{byName, 250, 260, []Key{b0}},          // the new one, on another host
		{Pod{UID: "uid-0"}, 50, 60, []Key{a1}}, // by UID: only what the process series said
		{vllm0, 50, 60, []Key{a1}},             // by UID where it covers the window, not by name too
		{vllm0, 250, 260, []Key{b0}},           // nothing by its UID then (a process series may lapse): by name
		{Pod{UID: "uid-9", Namespace: "llm", Name: "vllm-0"}, 250, 260, []Key{b0}}, // unknown UID: by name
		{Pod{Namespace: "other", Name: "vllm-0"}, 50, 60, nil},
		{Pod{}, 50, 60, nil},
	} {
		assert.Equal(t, tc.want, s.PodGPUs(tc.pod, at(tc.from), at(tc.to)), "%+v over [%v, %v]", tc.pod, tc.from, tc.to)
	}

	// At most 64 pods per GPU, the one seen longest ago making room; a
	// forgotten GPU leaves the index.
	for i := range maxHolders {
		s.SetPod(b0, Pod{Namespace: "batch", Name: fmt.Sprint(i)}, at(float64(301+i)))
	}
	assert.Len(t, s.gpus[b0].holders, maxHolders)
	assert.Empty(t, s.PodGPUs(Pod{UID: "uid-1"}, at(250), at(260)), "seen first, gone first")
	s.forget(s.gpus[b0])
	assert.Empty(t, s.PodGPUs(Pod{Namespace: "batch", Name: "5"}, at(300), at(400)))
	assert.NotContains(t, s.byHolder, holder{kind: podByName, scope: "batch", name: "5"})
}

func TestSlurmJobGPUs(t *testing.T) {
	s := newStore(t, func(c *Config) { c.Retention = 10 * time.Minute })
	a0, a1, a2 := Key{"node-1", "GPU-a0"}, Key{"node-1", "GPU-a1"}, Key{"node-1", "GPU-a2"}
	b0 := Key{"node-2", "GPU-b0"}
	for _, k := range []Key{a0, a1, a2, b0} {
		require.True(t, s.Add(k, Power, at(0), 100))
		require.True(t, s.Add(k, Power, at(300), 100))
	}
	// Job 100 spans both nodes (a0, a1, b0) from 10 s to 100 s; job 101
	// holds a2 beside it, then a0 after it from 200 s. A pod named like a
	// job is no job.
	for sec := 10.0; sec <= 100; sec += 10 {
		for _, k := range []Key{a0, a1, b0} {
			s.SetSlurmJob(k, "100", at(sec))
		}
		s.SetSlurmJob(a2, "101", at(sec))
		s.SetPod(a2, Pod{UID: "100", Namespace: "100", Name: "100"}, at(sec))
	}
	for sec := 200.0; sec <= 300; sec += 10 {
		s.SetSlurmJob(a0, "101", at(sec))
	}
	s.SetSlurmJob(a1, "", at(50)) // no job: ignored
	for _, tc := range []struct {
		job      string
		from, to float64
		want     []Key
	}{
		{"100", 50, 60, []Key{a0, a1, b0}}, // across hosts, sorted
		{"100", 115, 118, []Key{a0, a1, b0}},
		{"100", 150, 160, nil},
		{"101", 50, 60, []Key{a2}},
		{"101", 250, 260, []Key{a0}},
		{"101", 90, 250, []Key{a0, a2}},
		{"102", 50, 60, nil},
		{"", 50, 60, nil},
	} {
		assert.Equal(t, tc.want, s.SlurmJobGPUs(tc.job, at(tc.from), at(tc.to)), "job %q over [%v, %v]", tc.job, tc.from, tc.to)
	}
	assert.Equal(t, []Key{a2}, s.PodGPUs(Pod{Name: "100", Namespace: "100"}, at(50), at(60)), "pods and jobs are apart")

	// Pods and jobs share a GPU's 64 holders, the one seen longest ago
	// making room; a forgotten GPU leaves the index.
	for i := range maxHolders {
		s.SetPod(a2, Pod{Namespace: "batch", Name: fmt.Sprint(i)}, at(float64(301+i)))
	}
	assert.Empty(t, s.SlurmJobGPUs("101", at(50), at(60)))
	assert.Equal(t, []*gpu{s.gpus[a0]}, s.byHolder[holder{kind: slurmJob, name: "101"}], "a2 left the index, a0 still holds 101")
	s.forget(s.gpus[b0])
	assert.Equal(t, []Key{a0, a1}, s.SlurmJobGPUs("100", at(50), at(60)))
}

// TestBinsFrozenAtSettledWithoutACounterKnowTheirEnergy: a GPU without an
// energy counter (before Volta, or hw.energy turned off) has its energy
// from Power. The receiver's flush sends the driver's 20 ms power samples
// up to just before its read and the tick's readings stamped at the read:
// the bins up to Settled, frozen then, must have their energy in, as when
// read after the next flush.
func TestBinsFrozenAtSettledWithoutACounterKnowTheirEnergy(t *testing.T) {
	const width = 100 * time.Millisecond
	s := newStore(t, nil)
	next := 15 * time.Millisecond // the next power sample to send
	frozen := map[int]Bin{}       // bin index from t0 → the bin when frozen
	for k := 1; k <= 10; k++ {
		read := time.Duration(k)*time.Second + 105*time.Millisecond
		for ; next <= read; next += 20 * time.Millisecond {
			require.True(t, s.Add(gpuA, Power, t0.Add(next), 300))
		}
		require.True(t, s.Add(gpuA, TensorActivity, t0.Add(read), 0.5))
		settled, ok := s.Settled(gpuA)
		require.True(t, ok)
		n := int(settled.Sub(t0) / width)
		for i, b := range s.Bins(gpuA, t0, width, n, nil) {
			if _, ok := frozen[i]; !ok && i >= 1 {
				frozen[i] = b
			}
		}
	}
	final := s.Bins(gpuA, t0, width, 100, nil)
	for i := 1; i < 100; i++ {
		b, ok := frozen[i]
		require.True(t, ok, "bin %d", i)
		assert.True(t, b.EnergyKnown, "bin %d (%v) frozen with its energy in", i, time.Duration(i)*width)
		assert.InDelta(t, final[i].EnergyJ, b.EnergyJ, 1e-9, "bin %d", i)
	}
}

// A sighting that arrives late (older than the newest, from another batch
// or source) neither moves a process's newest sighting back nor is lost for
// a holder's first.
func TestLateSightings(t *testing.T) {
	s := newStore(t, nil)
	require.True(t, s.Add(gpuA, Power, at(100), 100))
	s.SetProcess(gpuA, 42, at(100))
	s.SetProcess(gpuA, 42, at(10))
	assert.Equal(t, []Key{gpuA}, s.ProcessGPUs(gpuA.Host, 42, at(100)), "seen at 100 s")
	pod := Pod{Namespace: "llm", Name: "vllm-0"}
	s.SetPod(gpuA, pod, at(100))
	s.SetPod(gpuA, pod, at(10))
	assert.Equal(t, []Key{gpuA}, s.PodGPUs(pod, at(10), at(12)), "seen at 10 s too")
}
