package timeline

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reference: the store's former O(points) scans, kept here to check the
// prefix sums against, with the power-shaped counter split brute-forced on
// top.

// refVisible is the first point at or after the GPU's retention cutoff,
// found by a linear scan.
func refVisible(s *Store, g *gpu, r *ring) int {
	cutoff := g.cutoff(s.retention)
	i := 0
	for i < r.n && r.at(i).ts < cutoff {
		i++
	}
	return i
}

func refStart(r *ring, i int, maxSpan int64) int64 {
	ts := r.at(i).ts
	switch {
	case i > 0:
		return max(r.at(i-1).ts, sub(ts, maxSpan))
	case r.hasDropped:
		return max(r.dropped, sub(ts, maxSpan))
	}
	return sub(ts, min(maxSpan, int64(time.Second)))
}

// refStat integrates the step function over [a, b] point by point: the
// Stat, the covered ns and the integral in value·ns.
func refStat(r *ring, lo int, maxSpan, a, b int64) (Stat, int64, float64) {
	var (
		covered  int64
		integral float64
		st       Stat
		seen     bool
	)
	for i := lo; i < r.n; i++ {
		p := r.at(i)
		ov := min(p.ts, b) - max(refStart(r, i, maxSpan), a)
		if ov <= 0 {
			continue
		}
		covered += ov
		integral += p.v * float64(ov)
		if !seen || p.v > st.Max {
			st.Max, seen = p.v, true
		}
	}
	if covered > 0 {
		st.Mean = integral / float64(covered)
		st.Seconds = float64(covered) / float64(time.Second)
	}
	return st, covered, integral
}

// refShare is segment p→q's energy over [x, y], split by Power where
// Power's points up to q cover the segment up to the last of them with a
// positive integral (the rest, at most MaxSpan, at their mean), else
// linearly.
func refShare(pw *ring, plo int, maxSpan int64, p, q point, x, y int64) float64 {
	d := q.v - p.v
	if x == p.ts && y == q.ts {
		return d
	}
	last := int64(math.MinInt64)
	for i := plo; i < pw.n && pw.at(i).ts <= q.ts; i++ {
		last = pw.at(i).ts
	}
	if last > p.ts && q.ts-last <= maxSpan {
		if _, c, in := refStat(pw, plo, maxSpan, p.ts, last); c == last-p.ts && in > 0 {
			mean := in / float64(c)
			var w float64
			if x < last {
				_, _, w = refStat(pw, plo, maxSpan, x, min(y, last))
			}
			if y > last {
				w += mean * float64(y-max(x, last))
			}
			return d * w / (in + mean*float64(q.ts-last))
		}
	}
	return d * float64(y-x) / float64(q.ts-p.ts)
}

func refCounterEnergy(ev *ring, elo int, pw *ring, plo int, maxSpan, a, b int64) (float64, bool) {
	i := -1
	for j := elo; j < ev.n && ev.at(j).ts <= a; j++ {
		i = j
	}
	if i < 0 {
		return 0, false
	}
	var e float64
	for ; ; i++ {
		p := *ev.at(i)
		if p.ts >= b {
			return e, true
		}
		if i+1 >= ev.n {
			return 0, false
		}
		q := *ev.at(i + 1)
		if q.v < p.v {
			return 0, false
		}
		if x, y := max(p.ts, a), min(q.ts, b); y > x {
			e += refShare(pw, plo, maxSpan, p, q, x, y)
		}
	}
}

func refWindow(s *Store, k Key, from, to time.Time) Window {
	w := Window{From: from, To: to}
	a, b := clampNanos(from), clampNanos(to)
	g := s.gpus[k]
	if b <= a || g == nil {
		return w
	}
	var covered [NumSignals]int64
	var powerIntegral float64
	for sig := range NumSignals {
		r := &g.sig[sig]
		var integral float64
		w.Stats[sig], covered[sig], integral = refStat(r, refVisible(s, g, r), s.maxSpan, a, b)
		if sig == Power {
			powerIntegral = integral
		}
	}
	w.Coverage = min(1, float64(max(covered[Utilization], covered[Power]))/float64(b-a))
	pw := &g.sig[Power]
	if e, ok := refCounterEnergy(&g.energy, refVisible(s, g, &g.energy), pw, refVisible(s, g, pw), s.maxSpan, a, b); ok {
		w.EnergyJ, w.EnergySource = e, EnergyCounter
	} else if covered[Power] > 0 {
		w.EnergyJ, w.EnergySource = powerIntegral/float64(time.Second), EnergyPower
	}
	return w
}

// checkPrefixes recomputes every kept point's prefix step from its
// predecessor and compares.
func checkPrefixes(t *testing.T, s *Store, k Key) {
	t.Helper()
	g := s.gpus[k]
	check := func(name string, r *ring) {
		for i := 1; i < r.n; i++ {
			p, q := r.at(i-1), r.at(i)
			require.Less(t, p.ts, q.ts, "%s: in order", name)
			if r.counter {
				reset := int64(0)
				if q.v < p.v {
					reset = 1
				}
				require.Equal(t, reset, q.cov-p.cov, "%s point %d: resets", name, i)
				continue
			}
			span := q.ts - refStart(r, i, s.maxSpan)
			require.Equal(t, span, q.cov-p.cov, "%s point %d: covered", name, i)
			require.InDelta(t, q.v*float64(span), q.cum-p.cum, 1e-9*math.Max(1, math.Abs(q.cum)), "%s point %d: integral", name, i)
		}
	}
	for sig := range NumSignals {
		check(sig.String(), &g.sig[sig])
	}
	check("energy", &g.energy)
}

func relDelta(want float64) float64 { return 1e-9 * math.Max(1, math.Abs(want)) }

func assertWindowsEqual(t *testing.T, want, got Window, msg string) {
	t.Helper()
	require.Equal(t, want.From, got.From, msg)
	require.Equal(t, want.To, got.To, msg)
	require.InDelta(t, want.Coverage, got.Coverage, 1e-12, msg)
	for sig := range NumSignals {
		ws, gs := want.Stats[sig], got.Stats[sig]
		require.Equal(t, ws.Seconds, gs.Seconds, "%s %v: seconds", msg, sig)
		require.Equal(t, ws.Max, gs.Max, "%s %v: max", msg, sig)
		require.InDelta(t, ws.Mean, gs.Mean, relDelta(ws.Mean), "%s %v: mean", msg, sig)
	}
	require.Equal(t, want.EnergySource, got.EnergySource, "%s: energy source", msg)
	require.InDelta(t, want.EnergyJ, got.EnergyJ, relDelta(want.EnergyJ), "%s: energy", msg)
}

type event struct {
	sig Signal // energySeries for the counter
	ts  time.Duration
	v   float64
}

// randomEvents is a GPU's points over about span: power, utilisation and
// memory at ~6/s, SM activity every ~2 s, the counter every ~1 s, with
// gaps (some past MaxSpan), counter resets, points sent twice with another
// value, and a share of the points delivered late.
func randomEvents(rng *rand.Rand, span time.Duration, late float64) []event {
	var evs []event
	walk := func(sig Signal, mean time.Duration, val func() float64) {
		for ts := time.Duration(rng.Int64N(int64(mean))); ts < span; {
			evs = append(evs, event{sig, ts, val()})
			if rng.IntN(50) == 0 { // sent twice: the second value replaces the first
				evs = append(evs, event{sig, ts, val()})
			}
			step := mean/2 + time.Duration(rng.Int64N(int64(mean)))
			switch rng.IntN(200) {
			case 0:
				step = time.Duration(1+rng.IntN(20)) * time.Second
			case 1:
				step = time.Duration(31+rng.IntN(30)) * time.Second // past MaxSpan
			}
			ts += step
		}
	}
	walk(Power, time.Second/6, func() float64 {
		if rng.IntN(50) == 0 {
			return 0
		}
		return 50 + 650*rng.Float64()
	})
	walk(Utilization, time.Second/6, rng.Float64)
	walk(MemoryUsed, time.Second/6, func() float64 { return 1e9 + 7e10*rng.Float64() })
	walk(SMActivity, 2*time.Second, rng.Float64)
	energy := 3e8 * rng.Float64()
	walk(energySeries, time.Second, func() float64 {
		if rng.IntN(100) == 0 {
			energy = 1e3 * rng.Float64() // driver reload
		} else {
			energy += 700 * rng.Float64()
		}
		return energy
	})
	slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.ts, b.ts) })
	// Deliver some points late: a few places after where they belong.
	for i := len(evs) - 1; i >= 0; i-- {
		if rng.Float64() < late {
			j := min(len(evs)-1, i+1+rng.IntN(40))
			e := evs[i]
			copy(evs[i:j], evs[i+1:j+1])
			evs[j] = e
		}
	}
	return evs
}

func addEvents(s *Store, k Key, evs []event) {
	for _, e := range evs {
		if e.sig == energySeries {
			s.AddEnergy(k, t0.Add(e.ts), e.v)
		} else {
			s.Add(k, e.sig, t0.Add(e.ts), e.v)
		}
	}
}

// randomWindow is a window around [0, span]: any length from a millisecond
// to minutes, its edges sometimes on a point's timestamp.
func randomWindow(rng *rand.Rand, evs []event, span time.Duration) (time.Time, time.Time) {
	edge := func() time.Duration {
		if rng.IntN(4) == 0 {
			return evs[rng.IntN(len(evs))].ts
		}
		return time.Duration(rng.Int64N(int64(span+20*time.Second))) - 10*time.Second
	}
	from := edge()
	var length time.Duration
	switch rng.IntN(3) {
	case 0:
		length = time.Duration(1 + rng.Int64N(int64(time.Second)))
	case 1:
		length = time.Duration(1 + rng.Int64N(int64(30*time.Second)))
	default:
		length = time.Duration(1 + rng.Int64N(int64(span)))
	}
	if rng.IntN(4) == 0 {
		if to := edge(); to > from {
			length = to - from
		}
	}
	return t0.Add(from), t0.Add(from + length)
}

// TestWindowMatchesReference compares Window with the point-by-point
// reference on random GPUs: small rings that wrap (and rebase) many times,
// short retention that hides points, late points inserted in the middle.
func TestWindowMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*Config)
		late  float64
		drops bool
	}{
		{"defaults", nil, 0, false},
		{"late points", nil, 0.03, false},
		{"small rings wrap", func(c *Config) { c.MaxPointsPerSignal = 50 }, 0.01, true},
		{"rings of 100 wrap", func(c *Config) { c.MaxPointsPerSignal = 100 }, 0.005, true},
		{"rings of 1000 wrap", func(c *Config) { c.MaxPointsPerSignal = 1000 }, 0, true},
		{"short retention", func(c *Config) { c.Retention = 40 * time.Second; c.MaxPointsPerSignal = 300 }, 0.02, true},
		{"short MaxSpan", func(c *Config) { c.MaxSpan = 150 * time.Millisecond }, 0.01, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			s := newStore(t, tc.mod)
			const span = 10 * time.Minute
			evs := randomEvents(rng, span, tc.late)
			// Check while filling too: the prefixes of a ring mid-wrap.
			for i := 0; i < len(evs); i += len(evs) / 5 {
				addEvents(s, gpuA, evs[i:min(len(evs), i+len(evs)/5)])
				checkPrefixes(t, s, gpuA)
				for range 100 {
					from, to := randomWindow(rng, evs, span)
					assertWindowsEqual(t, refWindow(s, gpuA, from, to), s.Window(gpuA, from, to),
						"window "+from.Sub(t0).String()+" + "+to.Sub(from).String())
				}
			}
			if tc.drops {
				assert.True(t, s.gpus[gpuA].sig[Power].hasDropped, "the ring let go of points")
			}
		})
	}
}

// TestPrefixesStaySmall: the prefixes are rebased as the ring wraps, so a
// GPU's lifetime does not grow them.
func TestPrefixesStaySmall(t *testing.T) {
	s := newStore(t, func(c *Config) { c.MaxPointsPerSignal = 64 })
	for i := 1; i <= 100_000; i++ {
		require.True(t, s.Add(gpuA, Power, t0.Add(time.Duration(i)*time.Second/6), 700))
	}
	r := &s.gpus[gpuA].sig[Power]
	last := r.at(r.n - 1)
	assert.LessOrEqual(t, last.cov, int64(2*64*time.Second/6)+1, "at most two rings' worth")
	assert.LessOrEqual(t, last.cum, 700*float64(2*64*time.Second/6)+700)
	checkPrefixes(t, s, gpuA)
	w := s.Window(gpuA, t0.Add(100_000*time.Second/6-5*time.Second), t0.Add(100_000*time.Second/6))
	assert.Equal(t, 700.0, w.Stats[Power].Mean, "exact")
	assert.Equal(t, 5.0, w.Stats[Power].Seconds)
}

func TestLatePointsKeepPrefixes(t *testing.T) {
	s := newStore(t, func(c *Config) { c.MaxPointsPerSignal = 8 })
	addSeries(t, s, gpuA, Power, [2]float64{1, 100}, [2]float64{2, 200}, [2]float64{4, 400}, [2]float64{40, 500}, [2]float64{41, 600})
	require.True(t, s.Add(gpuA, Power, at(3), 300))    // in the middle
	require.True(t, s.Add(gpuA, Power, at(0.5), 50))   // before the first
	require.True(t, s.Add(gpuA, Power, at(2), 250))    // replaces a middle value
	require.True(t, s.Add(gpuA, Power, at(41), 650))   // replaces the newest
	require.True(t, s.Add(gpuA, Power, at(20), 1000))  // in a gap past MaxSpan
	require.True(t, s.Add(gpuA, Power, at(39.5), 900)) // the ring is full now
	require.True(t, s.Add(gpuA, Power, at(39), 800))   // the oldest goes
	for _, e := range [][2]float64{{10, 1}, {11, 2}, {9, 0.5}, {10.5, 1.5}, {12, 0}, {13, 1}} {
		require.True(t, s.AddEnergy(gpuA, at(e[0]), e[1]))
	}
	checkPrefixes(t, s, gpuA)
	for _, w := range [][2]float64{{0, 41}, {1.5, 3.5}, {2, 4}, {15, 40}, {39.2, 41}, {9.5, 12.5}, {9, 11}, {12, 13}} {
		assertWindowsEqual(t, refWindow(s, gpuA, at(w[0]), at(w[1])), s.Window(gpuA, at(w[0]), at(w[1])), "")
	}
}

// TestEnergyShapedByPower: a counter segment's energy goes where the power
// went, not where the time went.
func TestEnergyShapedByPower(t *testing.T) {
	s := newStore(t, nil)
	require.True(t, s.AddEnergy(gpuA, at(0), 5e8))
	require.True(t, s.AddEnergy(gpuA, at(10), 5e8+1000))
	addSeries(t, s, gpuA, Power, steps(1, 5, 1, func(float64) float64 { return 100 })...)
	addSeries(t, s, gpuA, Power, steps(6, 10, 1, func(float64) float64 { return 300 })...)

	w := s.Window(gpuA, at(0), at(5))
	assert.Equal(t, EnergyCounter, w.EnergySource)
	assert.InDelta(t, 250, w.EnergyJ, 1e-9, "a quarter of the segment")
	assert.InDelta(t, 750, s.Window(gpuA, at(5), at(10)).EnergyJ, 1e-9)
	assert.Equal(t, 1000.0, s.Window(gpuA, at(0), at(10)).EnergyJ, "the whole segment: exactly the counter")
	assert.InDelta(t, 300*2/2000.0*1000, s.Window(gpuA, at(7), at(9)).EnergyJ, 1e-9)

	var sum float64
	for _, iv := range s.Intervals(gpuA, at(0), at(5), nil) {
		sum += iv.EnergyJ
	}
	assert.InDelta(t, 250, sum, 1e-9, "intervals split the same way")

	// Power that does not cover the whole segment: split by time.
	s = newStore(t, nil)
	require.True(t, s.AddEnergy(gpuA, at(0), 0))
	require.True(t, s.AddEnergy(gpuA, at(10), 1000))
	addSeries(t, s, gpuA, Power, steps(2, 10, 1, func(float64) float64 { return 300 })...) // (1, 10]
	assert.InDelta(t, 500, s.Window(gpuA, at(0), at(5)).EnergyJ, 1e-9)
	// Zero power over the segment: split by time.
	s = newStore(t, nil)
	require.True(t, s.AddEnergy(gpuA, at(0), 0))
	require.True(t, s.AddEnergy(gpuA, at(10), 1000))
	addSeries(t, s, gpuA, Power, steps(1, 10, 1, func(float64) float64 { return 0 })...)
	assert.InDelta(t, 500, s.Window(gpuA, at(0), at(5)).EnergyJ, 1e-9)
}

func TestSettledAll(t *testing.T) {
	s := newStore(t, nil)
	_, ok := s.SettledAll(nil)
	assert.False(t, ok)
	require.True(t, s.AddEnergy(gpuA, at(5), 1))
	require.True(t, s.Add(gpuA, Power, at(9), 1))
	require.True(t, s.Add(gpuB, Power, at(7), 1))
	got, ok := s.SettledAll([]Key{gpuA, gpuB})
	require.True(t, ok)
	assert.Equal(t, at(5), got, "A's counter is at 5 s, B (no counter) at 7 s")
	_, ok = s.SettledAll([]Key{gpuA, gpuC})
	assert.False(t, ok, "C is unknown")
}

// BenchmarkWindowPoints reads windows of 10 and 1000 of the 6/s samples:
// the cost of the means, seconds and energy does not grow with the points
// inside, only Stat.Max's scan does.
func BenchmarkWindowPoints(b *testing.B) {
	s := benchGPU(b)
	for _, points := range []int{10, 1000} {
		from := at(300.05)
		to := from.Add(time.Duration(points) * time.Second / 6)
		b.Run("points="+strconv.Itoa(points), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if w := s.Window(gpuA, from, to); w.EnergySource != EnergyCounter {
					b.Fatal(w.EnergySource)
				}
			}
		})
	}
}
