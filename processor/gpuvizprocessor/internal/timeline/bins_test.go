package timeline

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBinsShapedByPower: bins split a counter segment by power as Window
// does.
func TestBinsShapedByPower(t *testing.T) {
	s := newStore(t, nil)
	require.True(t, s.AddEnergy(gpuA, at(0), 5e8))
	require.True(t, s.AddEnergy(gpuA, at(10), 5e8+1000))
	addSeries(t, s, gpuA, Power, steps(1, 5, 1, func(float64) float64 { return 100 })...)
	addSeries(t, s, gpuA, Power, steps(6, 10, 1, func(float64) float64 { return 300 })...)
	bins := s.Bins(gpuA, at(0), 5*time.Second, 2, nil)
	require.Len(t, bins, 2)
	for i, want := range []float64{250, 750} {
		assert.True(t, bins[i].EnergyKnown)
		assert.Equal(t, EnergyCounter, bins[i].EnergySource)
		assert.InDelta(t, want, bins[i].EnergyJ, 1e-9)
	}
	bins = s.Bins(gpuA, at(0), 10*time.Second, 1, bins[:0])
	assert.Equal(t, 1000.0, bins[0].EnergyJ, "the whole segment: exactly the counter")

	// Power that does not cover the whole segment: split by time.
	s = newStore(t, nil)
	require.True(t, s.AddEnergy(gpuA, at(0), 0))
	require.True(t, s.AddEnergy(gpuA, at(10), 1000))
	addSeries(t, s, gpuA, Power, steps(2, 10, 1, func(float64) float64 { return 300 })...) // (1, 10]
	bins = s.Bins(gpuA, at(0), 5*time.Second, 2, nil)
	assert.InDelta(t, 500, bins[0].EnergyJ, 1e-9)
	assert.InDelta(t, 500, bins[1].EnergyJ, 1e-9)
}

func TestBinsEnergySources(t *testing.T) {
	s := newStore(t, nil)
	// Counter over (0, 10] and (20, 30] with a reset between; power 200 W
	// over (0, 15] and (25, 55].
	for _, e := range [][2]float64{{0, 1000}, {10, 3000}, {20, 10}, {30, 2010}} {
		require.True(t, s.AddEnergy(gpuA, at(e[0]), e[1]))
	}
	addSeries(t, s, gpuA, Power, steps(1, 15, 1, func(float64) float64 { return 200 })...)
	addSeries(t, s, gpuA, Power, [2]float64{55, 200})
	bins := s.Bins(gpuA, at(0), 5*time.Second, 12, nil)
	require.Len(t, bins, 12)
	type want struct {
		j      float64
		source EnergySource // EnergyNone: not known
	}
	for i, w := range []want{
		{1000, EnergyCounter}, // (0, 5]: the counter, split by power
		{1000, EnergyCounter},
		{1000, EnergyPower},   // (10, 15]: the reset's segment; power covers it
		{0, EnergyNone},       // (15, 20]: nothing
		{1000, EnergyCounter}, // (20, 25]: the counter, by time: power covers only (25, 30] of its segment
		{1000, EnergyCounter},
		{1000, EnergyPower}, // (30, 35]: past the counter
		{1000, EnergyPower},
		{1000, EnergyPower},
		{1000, EnergyPower},
		{1000, EnergyPower},
		{0, EnergyNone}, // (55, 60]
	} {
		assert.Equal(t, w.source != EnergyNone, bins[i].EnergyKnown, "bin %d", i)
		assert.Equal(t, w.source, bins[i].EnergySource, "bin %d", i)
		assert.InDelta(t, w.j, bins[i].EnergyJ, 1e-9, "bin %d", i)
	}

	for _, tt := range []struct {
		name   string
		from   float64
		j      float64
		source EnergySource
	}{
		{"partly the counter, power covers all: power", 8, 1000, EnergyPower},
		{"partly the counter, partly nothing: what is known", 18, 2000 * 3 / 10.0, EnergyNone},
		{"partly power, partly nothing: what is known", 12, 200 * 3, EnergyNone},
	} {
		b := s.Bins(gpuA, at(tt.from), 5*time.Second, 1, nil)[0]
		assert.Equal(t, tt.source != EnergyNone, b.EnergyKnown, tt.name)
		assert.Equal(t, tt.source, b.EnergySource, tt.name)
		assert.InDelta(t, tt.j, b.EnergyJ, 1e-9, tt.name)
	}

	// Unknown GPU, no bins, no width: zero bins.
	assert.Equal(t, make([]Bin, 3), s.Bins(gpuB, at(0), time.Second, 3, nil))
	assert.Equal(t, make([]Bin, 3), s.Bins(gpuA, at(0), 0, 3, nil))
	assert.Empty(t, s.Bins(gpuA, at(0), time.Second, 0, nil))
	// dst is appended to.
	dst := s.Bins(gpuA, at(0), time.Second, 2, nil)
	dst = s.Bins(gpuA, at(2), time.Second, 3, dst)
	assert.Equal(t, s.Bins(gpuA, at(0), time.Second, 5, nil), dst)
	// Bins past year 2262 are zero.
	far := fromNanos(maxNanos - int64(1500*time.Millisecond))
	assert.Len(t, s.Bins(gpuA, far, time.Second, 4, nil), 4)
}

func TestBinsSignals(t *testing.T) {
	s := newStore(t, nil)
	addSeries(t, s, gpuA, Power, steps(1, 10, 1, func(sec float64) float64 { return 100 * sec })...)
	addSeries(t, s, gpuA, Utilization, [2]float64{10, 0.5}, [2]float64{100, 0.25}) // (9, 10], (70, 100]
	bins := s.Bins(gpuA, at(0.5), 2*time.Second, 5, nil)
	// Power: (0.5, 1] at 100, (1, 2] at 200, (2, 2.5] at 300 in the first bin.
	assert.InDelta(t, 0.5*100+200+0.5*300, bins[0].Integral[Power], 1e-9)
	assert.InDelta(t, 2, bins[0].Covered[Power], 1e-12)
	assert.Equal(t, 300.0, bins[0].Max[Power])
	assert.InDelta(t, 0.5*900+1000, bins[4].Integral[Power], 1e-9, "(8.5, 9] and (9, 10]")
	assert.InDelta(t, 1.5, bins[4].Covered[Power], 1e-12)
	assert.Equal(t, 0.5, bins[4].Max[Utilization])
	assert.InDelta(t, 1, bins[4].Covered[Utilization], 1e-12, "(9, 10] of (8.5, 10.5]")
	assert.Zero(t, bins[3].Max[Utilization])
	assert.Zero(t, bins[3].Covered[Utilization])
	// How far the readings reach: 1 s apart, the first one's 1 s too.
	assert.Equal(t, 1.0, bins[0].Stretch[Power])
	assert.Equal(t, 1.0, bins[4].Stretch[Utilization])
	assert.Zero(t, bins[3].Stretch[Utilization], "no reading")
	// A stretch over many bins: utilisation's (70, 100] at 0.25.
	bins = s.Bins(gpuA, at(60), 4*time.Second, 12, nil)
	for i, b := range bins {
		lo, hi := 60+4*float64(i), 64+4*float64(i)
		cov := max(0, min(hi, 100)-max(lo, 70))
		assert.InDelta(t, cov, b.Covered[Utilization], 1e-12, "bin %d", i)
		assert.InDelta(t, cov*0.25, b.Integral[Utilization], 1e-12, "bin %d", i)
		if cov > 0 {
			assert.Equal(t, 0.25, b.Max[Utilization])
			assert.Equal(t, 30.0, b.Stretch[Utilization], "bin %d: the reading at 100 s, capped at MaxSpan", i)
		}
	}
}

// TestBinsReadingPower: a bin's ReadingPower is the power over the
// stretches its tensor readings describe, weighted by their overlap, where
// power covers them; its own Power mean stays its own.
func TestBinsReadingPower(t *testing.T) {
	s := newStore(t, nil)
	// Power every 0.1 s: 100 W over (0, 1], 300 W over (1, 2], 500 W over
	// (2, 2.5]; tensor activity read at 1 s and 2 s, then at 3 s.
	addSeries(t, s, gpuA, Power, steps(0.1, 2.5, 0.1, func(sec float64) float64 {
		switch {
		case sec <= 1+1e-9:
			return 100
		case sec <= 2+1e-9:
			return 300
		}
		return 500
	})...)
	addSeries(t, s, gpuA, TensorActivity, [2]float64{1, 0.2}, [2]float64{2, 0.4}, [2]float64{3, 0.6})
	bins := s.Bins(gpuA, at(0.5), 500*time.Millisecond, 5, nil)
	// (0.5, 1] lies in the reading (0, 1]: 100 W, as its own power is.
	assert.InDelta(t, 100, bins[0].ReadingPower[TensorActivity], 1e-9)
	// (1, 1.5] and (1.5, 2]: the reading (1, 2], 300 W.
	assert.InDelta(t, 300, bins[1].ReadingPower[TensorActivity], 1e-9)
	assert.InDelta(t, 300, bins[2].ReadingPower[TensorActivity], 1e-9)
	// (2, 2.5]: the reading (2, 3] is not covered by power: none.
	assert.Zero(t, bins[3].ReadingPower[TensorActivity])
	assert.InDelta(t, 500, bins[3].Integral[Power]/bins[3].Covered[Power], 1e-9, "its own power")
	assert.Zero(t, bins[4].ReadingPower[TensorActivity], "(2.5, 3]: no power at all")
	// A bin over two readings weighs each by its overlap: (0.75, 1.25] is
	// half (0, 1] at 100 W and half (1, 2] at 300 W.
	bins = s.Bins(gpuA, at(0.75), 500*time.Millisecond, 1, bins[:0])
	assert.InDelta(t, 200, bins[0].ReadingPower[TensorActivity], 1e-9)
	// Each signal's readings have their own: DRAM activity read every
	// 0.5 s gives (2, 2.5] the 500 W of its reading there, where the tensor
	// reading (2, 3] has none; a signal not placed has none.
	addSeries(t, s, gpuA, DRAMActivity, steps(0.5, 2.5, 0.5, func(float64) float64 { return 0.5 })...)
	bins = s.Bins(gpuA, at(2), 500*time.Millisecond, 1, bins[:0])
	assert.Zero(t, bins[0].ReadingPower[TensorActivity])
	assert.InDelta(t, 500, bins[0].ReadingPower[DRAMActivity], 1e-9)
	assert.Zero(t, bins[0].ReadingPower[Utilization])
	// Readings as fine as the power: the bin's own mean.
	s = newStore(t, nil)
	addSeries(t, s, gpuA, Power, steps(0.1, 2, 0.1, func(sec float64) float64 { return 100 * sec })...)
	addSeries(t, s, gpuA, TensorActivity, steps(0.1, 2, 0.1, func(float64) float64 { return 0.5 })...)
	bins = s.Bins(gpuA, at(0.5), 500*time.Millisecond, 3, nil)
	for i, b := range bins {
		assert.InDelta(t, b.Integral[Power]/b.Covered[Power], b.ReadingPower[TensorActivity], 1e-9, "bin %d", i)
	}
}

func TestPowerLimit(t *testing.T) {
	s := newStore(t, nil)
	_, ok := s.PowerLimit(gpuA)
	assert.False(t, ok, "unknown")
	s.SetPowerLimit(gpuA, 700)
	s.SetPowerLimit(gpuA, 0)           // not a limit
	s.SetPowerLimit(gpuA, math.NaN())  // nor this
	s.SetPowerLimit(gpuA, math.Inf(1)) // nor this
	w, ok := s.PowerLimit(gpuA)
	assert.True(t, ok)
	assert.Equal(t, 700.0, w)
	s.SetPowerLimit(gpuA, 420) // capped: the newest holds
	w, _ = s.PowerLimit(gpuA)
	assert.Equal(t, 420.0, w)
	_, ok = s.PowerLimit(gpuB)
	assert.False(t, ok, "another GPU's is its own")
}

// TestBinsMatchWindow: on random GPUs, bins add up to the window over their
// union, each bin is the window over itself, and a bin's energy follows the
// rules: the counter where Window takes it, Power where it covers the bin,
// else what Intervals know.
func TestBinsMatchWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		min  [3]int // bins of each energy case at least
	}{
		{"defaults", nil, [3]int{50, 50, 50}},
		{"small rings", func(c *Config) { c.MaxPointsPerSignal = 100; c.Retention = 2 * time.Minute }, [3]int{50, 0, 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
			s := newStore(t, tc.mod)
			const span = 5 * time.Minute
			evs := randomEvents(rng, span, 0.01)
			addEvents(s, gpuA, evs)
			var bins []Bin
			var cases [3]int // counter, power, unknown
			for range 300 {
				from, _ := randomWindow(rng, evs, span)
				width := time.Duration(1 + rng.Int64N(int64([]time.Duration{time.Millisecond, time.Second, 10 * time.Second}[rng.IntN(3)])))
				n := 1 + rng.IntN(60)
				bins = s.Bins(gpuA, from, width, n, bins[:0])
				require.Len(t, bins, n)
				to := from.Add(time.Duration(n) * width)
				w := s.Window(gpuA, from, to)
				var integral, covered, maxes [NumSignals]float64
				var seen [NumSignals]bool
				for i, b := range bins {
					lo := from.Add(time.Duration(i) * width)
					hi := lo.Add(width)
					bw := s.Window(gpuA, lo, hi)
					msg := lo.Sub(t0).String() + " + " + width.String()
					for sig := range NumSignals {
						integral[sig] += b.Integral[sig]
						covered[sig] += b.Covered[sig]
						if b.Covered[sig] > 0 && (!seen[sig] || b.Max[sig] > maxes[sig]) {
							maxes[sig], seen[sig] = b.Max[sig], true
						}
						st := bw.Stats[sig]
						require.InDelta(t, st.Seconds, b.Covered[sig], 1e-12, "%s %v: covered", msg, sig)
						require.InDelta(t, st.Mean*st.Seconds, b.Integral[sig], relDelta(st.Mean*st.Seconds), "%s %v: integral", msg, sig)
						require.Equal(t, st.Max, b.Max[sig], "%s %v: max", msg, sig)
					}
					switch {
					case bw.EnergySource == EnergyCounter:
						cases[0]++
						require.True(t, b.EnergyKnown, msg)
						require.Equal(t, EnergyCounter, b.EnergySource, msg)
						require.InDelta(t, bw.EnergyJ, b.EnergyJ, relDelta(bw.EnergyJ), msg)
					case math.Round(bw.Stats[Power].Seconds*float64(time.Second)) == float64(width):
						cases[1]++
						require.True(t, b.EnergyKnown, msg)
						require.Equal(t, EnergyPower, b.EnergySource, msg)
						require.InDelta(t, bw.EnergyJ, b.EnergyJ, relDelta(bw.EnergyJ), msg)
					default:
						cases[2]++
						require.False(t, b.EnergyKnown, msg)
						require.Equal(t, EnergyNone, b.EnergySource, msg)
						var known float64
						for _, iv := range s.Intervals(gpuA, lo, hi, nil) {
							known += iv.EnergyJ
						}
						require.InDelta(t, known, b.EnergyJ, relDelta(known), "%s: what is known", msg)
					}
				}
				for sig := range NumSignals {
					st := w.Stats[sig]
					require.InDelta(t, st.Seconds, covered[sig], 1e-9, "%v: covered", sig)
					require.InDelta(t, st.Mean*st.Seconds, integral[sig], relDelta(st.Mean*st.Seconds), "%v: integral", sig)
					require.Equal(t, st.Max, maxes[sig], "%v: max", sig)
				}
			}
			t.Logf("bins by energy case (counter, power, unknown): %v", cases)
			for i, c := range cases {
				assert.GreaterOrEqual(t, c, tc.min[i], "energy case %d is exercised", i)
			}
		})
	}
}

// TestBinsConserveCounterEnergy: bins that tile whole counter segments get
// exactly the counter's difference, however power splits the segments.
func TestBinsConserveCounterEnergy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := newStore(t, nil)
	energy := 4e8
	require.True(t, s.AddEnergy(gpuA, at(0), energy))
	first := energy
	for sec := 1; sec <= 120; sec++ {
		energy += 100 + 600*rng.Float64()
		require.True(t, s.AddEnergy(gpuA, at(float64(sec)), energy))
	}
	for ts := time.Duration(0); ts < 121*time.Second; ts += time.Duration(100+rng.IntN(100)) * time.Millisecond {
		require.True(t, s.Add(gpuA, Power, t0.Add(ts), 50+650*rng.Float64()))
	}
	for _, width := range []time.Duration{time.Second / 7, 250 * time.Millisecond, 3 * time.Second} {
		n := int(120 * time.Second / width)
		end := at(0).Add(time.Duration(n) * width)
		bins := s.Bins(gpuA, at(0), width, n, nil)
		var sum float64
		for _, b := range bins {
			require.True(t, b.EnergyKnown)
			require.Equal(t, EnergyCounter, b.EnergySource)
			sum += b.EnergyJ
		}
		w := s.Window(gpuA, at(0), end)
		assert.InDelta(t, w.EnergyJ, sum, 1e-9*w.EnergyJ, "width %v", width)
		if end.Equal(at(120)) {
			assert.InDelta(t, energy-first, sum, 1e-9*(energy-first), "width %v", width)
			assert.Equal(t, energy-first, w.EnergyJ, "the window over whole segments: exactly the counter")
		}
	}
}

// TestBinsFrozenAsTheCounterArrivesConserve: the gpuviz receiver's flush
// brings the energy counter stamped at its read with the driver's 20 ms
// power samples up to just before it; the sample that covers the last few
// ms before the read comes a flush later. The pipeline freezes each bin
// once the counter has passed its end: a segment's bins as its end point
// arrives, the bin across that point a flush later. The bins frozen so must
// add up to the counter as the bins read once everything is in do, and
// take the split the power samples give, not a linear one.
func TestBinsFrozenAsTheCounterArrivesConserve(t *testing.T) {
	const width = 100 * time.Millisecond
	s := newStore(t, nil)
	// Power samples at x.015, x.035, …, each the mean of the 20 ms before
	// it: 600 W in the first 300 ms of each second, 150 W after. The
	// counter, read at x.050, integrates them exactly.
	watts := func(sample time.Duration) float64 {
		if sample%time.Second <= 300*time.Millisecond {
			return 600
		}
		return 150
	}
	counterAt := func(k int) time.Duration { return time.Duration(k)*time.Second + 50*time.Millisecond }
	energy, next := 1e9, 15*time.Millisecond // the next power sample to send
	require.True(t, s.AddEnergy(gpuA, t0.Add(counterAt(0)), energy))
	frozen := map[int]float64{} // bin index from t0 → its energy when frozen
	for k := 1; k <= 20; k++ {
		q := counterAt(k)
		for ms := counterAt(k-1) + time.Millisecond; ms <= q; ms += time.Millisecond {
			sample := 15*time.Millisecond + (ms-15*time.Millisecond+19*time.Millisecond)/(20*time.Millisecond)*(20*time.Millisecond)
			energy += watts(sample) / 1000
		}
		for ; next <= q; next += 20 * time.Millisecond {
			require.True(t, s.Add(gpuA, Power, t0.Add(next), watts(next)))
		}
		require.True(t, s.AddEnergy(gpuA, t0.Add(q), energy))
		// Freeze the bins after the first counter point that end by q.
		for i, b := range s.Bins(gpuA, t0, width, int(q/width), nil) {
			if _, ok := frozen[i]; !ok && i >= 1 {
				require.True(t, b.EnergyKnown, "bin %d", i)
				frozen[i] = b.EnergyJ
			}
		}
	}
	final := s.Bins(gpuA, t0, width, 200, nil)
	var got, want float64
	for i := 1; i < 200; i++ {
		got += frozen[i]
		want += final[i].EnergyJ
	}
	assert.InDelta(t, want, got, 1e-9*want, "frozen as the counter came, the bins add up as those read at the end")
	assert.InDelta(t, 60, frozen[31], 60*0.02, "bin 3.1–3.2 s drew 600 W")
	assert.InDelta(t, 15, frozen[35], 15*0.02, "bin 3.5–3.6 s drew 150 W")
}

// BenchmarkBins is the per-round pipeline: 40 bins of 250 ms.
func BenchmarkBins(b *testing.B) {
	s := benchGPU(b)
	from := at(300.05)
	var buf []Bin
	b.ReportAllocs()
	for b.Loop() {
		buf = s.Bins(gpuA, from, 250*time.Millisecond, 40, buf[:0])
	}
}

// Bins follow Window's energy rules where a counter holds still (a source
// scraped faster than the counter is updated), where Power stopped more
// than MaxSpan before the counter's point, and where a counter segment
// starts past retention (the counter's ring not trimmed yet, Power having
// moved the GPU's newest point on).
func TestBinsEnergyRulesMatchWindow(t *testing.T) {
	watts := func(w float64) func(float64) float64 { return func(float64) float64 { return w } }
	tests := []struct {
		name          string
		retention     time.Duration // 0: the default
		energy, power [][2]float64
		from          float64
		width         time.Duration
		want          []float64
		source        EnergySource
	}{
		{"a counter that holds still is no reset", 0, [][2]float64{{0, 1000}, {10, 1000}, {20, 2000}}, nil,
			0, 5 * time.Second, []float64{0, 0, 500, 500}, EnergyCounter},
		{"power stopped over max_span before the counter's point: by time", 0, [][2]float64{{0, 0}, {64, 6400}},
			append(steps(1, 5, 1, watts(500)), steps(6, 10, 1, watts(100))...),
			0, 5 * time.Second, []float64{500, 500}, EnergyCounter},
		{"a counter segment from past retention: power", 10 * time.Second, [][2]float64{{0, 0}, {5, 1000}},
			steps(1, 12, 1, watts(100)),
			3, time.Second, []float64{100, 100}, EnergyPower},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, func(c *Config) {
				if tt.retention > 0 {
					c.Retention = tt.retention
				}
			})
			for _, e := range tt.energy {
				require.True(t, s.AddEnergy(gpuA, at(e[0]), e[1]))
			}
			addSeries(t, s, gpuA, Power, tt.power...)
			bins := s.Bins(gpuA, at(tt.from), tt.width, len(tt.want), nil)
			var sum float64
			for i, want := range tt.want {
				assert.True(t, bins[i].EnergyKnown, "bin %d", i)
				assert.Equal(t, tt.source, bins[i].EnergySource, "bin %d", i)
				assert.InDelta(t, want, bins[i].EnergyJ, 1e-9, "bin %d", i)
				sum += bins[i].EnergyJ
			}
			w := s.Window(gpuA, at(tt.from), at(tt.from).Add(time.Duration(len(tt.want))*tt.width))
			assert.Equal(t, tt.source, w.EnergySource, "window")
			assert.InDelta(t, sum, w.EnergyJ, 1e-9, "window")
		})
	}
}
