package analysis

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_700_000_000, 0)

// at returns t0 + i*step.
func at(i int, step time.Duration) time.Time { return t0.Add(time.Duration(i) * step) }

// feed observes vals on sig at t0+start*step, one step apart, and returns
// how many were flagged.
func feed(tr *Tracker, sig Signal, start int, step time.Duration, vals []float64) (flagged int) {
	for i, v := range vals {
		if a, _ := tr.Observe(sig, at(start+i, step), v); a {
			flagged++
		}
	}
	return flagged
}

func repeat(n int, vals ...float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = vals[i%len(vals)]
	}
	return out
}

// uniform returns n values level ± halfWidth, uniformly distributed.
// Uniform noise has |x-mean|/σ <= √3, so it never reaches 3σ by itself.
func uniform(rng *rand.Rand, n int, level, halfWidth float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = level + halfWidth*(2*rng.Float64()-1)
	}
	return out
}

func directStats(vals []float64) (mean, sd float64) {
	for _, v := range vals {
		mean += v
	}
	mean /= float64(len(vals))
	var ss float64
	for _, v := range vals {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(vals)-1))
}

func TestSignalString(t *testing.T) {
	assert.Equal(t, "utilization", Utilization.String())
	assert.Equal(t, "memory", MemoryUsed.String())
	assert.Equal(t, "pcie", PCIe.String())
	assert.Equal(t, "signal(3)", NumSignals.String())
	assert.Equal(t, 3, int(NumSignals))
}

func TestPatternsList(t *testing.T) {
	assert.Equal(t, []Pattern{"unknown", "low", "stable_high", "fluctuating", "medium"}, Patterns)
}

func TestPattern(t *testing.T) {
	tests := []struct {
		name string
		vals []float64
		want Pattern
	}{
		{"no points", nil, PatternUnknown},
		{"29 points", repeat(29, 0.9), PatternUnknown},
		{"30 points", repeat(30, 0.9), PatternStableHigh},
		{"idle", repeat(60, 0), PatternLow},
		{"low constant", repeat(60, 0.1), PatternLow},
		{"low beats fluctuating", repeat(60, 0, 0.3), PatternLow}, // mean 0.15, CV ~1
		{"stable high", repeat(60, 0.8, 0.9), PatternStableHigh},
		{"saturated", repeat(60, 1), PatternStableHigh},
		{"on/off half duty", repeat(60, 0, 1), PatternFluctuating},
		{"on/off high mean", repeat(60, 1, 1, 1, 0), PatternFluctuating}, // mean 0.75, CV ~0.58
		{"medium constant", repeat(60, 0.5), PatternMedium},
		{"medium jitter", repeat(60, 0.4, 0.6), PatternMedium},               // CV ~0.2
		{"high but unsteady is medium", repeat(60, 0.6, 1.0), PatternMedium}, // mean 0.8, CV ~0.25
		{"mean at low_mean is not low", repeat(60, 0.2), PatternMedium},      // tie
		{"mean just below low_mean", repeat(60, math.Nextafter(0.2, 0)), PatternLow},
		{"mean at high_mean is high", repeat(60, 0.7), PatternStableHigh}, // tie
		{"mean just below high_mean", repeat(60, math.Nextafter(0.7, 0)), PatternMedium},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(DefaultConfig())
			feed(tr, Utilization, 0, time.Second, tt.vals)
			assert.Equal(t, tt.want, tr.Pattern())
		})
	}
}

// TestPatternCVTies sets the CV thresholds to exactly the CV the tracker
// computes for a series, and to the next float beyond it.
func TestPatternCVTies(t *testing.T) {
	cvOf := func(vals []float64) float64 {
		tr := NewTracker(DefaultConfig())
		feed(tr, Utilization, 0, time.Second, vals)
		m, sd, _ := tr.Stats(Utilization)
		return sd / m
	}
	run := func(cfg Config, vals []float64) Pattern {
		tr := NewTracker(cfg)
		feed(tr, Utilization, 0, time.Second, vals)
		return tr.Pattern()
	}

	high := repeat(60, 0.8, 0.9)
	cv := cvOf(high)
	require.Greater(t, cv, 0.0)
	cfg := DefaultConfig()
	cfg.StableCV = cv
	assert.Equal(t, PatternStableHigh, run(cfg, high), "CV equal to stable_cv is stable")
	cfg.StableCV = math.Nextafter(cv, 0)
	assert.Equal(t, PatternMedium, run(cfg, high), "CV just above stable_cv is not")

	mid := repeat(60, 0.3, 0.7)
	cv = cvOf(mid)
	require.Greater(t, cv, DefaultConfig().StableCV)
	cfg = DefaultConfig()
	cfg.FluctuatingCV = cv
	assert.Equal(t, PatternFluctuating, run(cfg, mid), "CV equal to fluctuating_cv fluctuates")
	cfg.FluctuatingCV = math.Nextafter(cv, 1)
	assert.Equal(t, PatternMedium, run(cfg, mid), "CV just below fluctuating_cv does not")
}

func TestZThresholdTie(t *testing.T) {
	baseline := repeat(40, 0.4, 0.5, 0.6)
	observe := func(cfg Config) (bool, float64) {
		tr := NewTracker(cfg)
		feed(tr, Utilization, 0, time.Second, baseline)
		return tr.Observe(Utilization, at(len(baseline), time.Second), 0.9)
	}
	_, z := observe(DefaultConfig())
	require.Positive(t, z)
	cfg := DefaultConfig()
	cfg.ZThreshold = z
	anomalous, _ := observe(cfg)
	assert.True(t, anomalous, "|z| equal to z_threshold is anomalous")
	cfg.ZThreshold = math.Nextafter(z, math.Inf(1))
	anomalous, _ = observe(cfg)
	assert.False(t, anomalous, "|z| just below z_threshold is not")
}

func TestPatternFollowsWindow(t *testing.T) {
	tr := NewTracker(DefaultConfig())
	feed(tr, Utilization, 0, time.Second, repeat(600, 0, 1))
	assert.Equal(t, PatternFluctuating, tr.Pattern())
	feed(tr, Utilization, 600, time.Second, repeat(301, 0.95))
	assert.Equal(t, PatternStableHigh, tr.Pattern())
	// Other signals do not feed the pattern.
	feed(tr, MemoryUsed, 0, time.Second, repeat(600, 0.05))
	assert.Equal(t, PatternStableHigh, tr.Pattern())
}

func TestSpikeFlagged(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tr := NewTracker(DefaultConfig())
	steady := uniform(rng, 300, 0.5, 0.03)
	assert.Zero(t, feed(tr, Utilization, 0, time.Second, steady), "bounded noise never reaches 3σ")

	mean, sd, n := tr.Stats(Utilization)
	require.Equal(t, 300, n)
	wm, wsd := directStats(steady)
	assert.InDelta(t, wm, mean, 1e-12)
	assert.InDelta(t, wsd, sd, 1e-12)

	a, z := tr.Observe(Utilization, at(300, time.Second), 0.95)
	assert.True(t, a)
	assert.Equal(t, (0.95-mean)/sd, z)
	assert.Greater(t, z, 20.0)
	assert.True(t, tr.Anomalous(Utilization))
	assert.False(t, tr.Anomalous(MemoryUsed))

	// The spike is in the window now; the next normal point is not anomalous.
	_, _, n = tr.Stats(Utilization)
	assert.Equal(t, 301, n)
	a, _ = tr.Observe(Utilization, at(301, time.Second), 0.5)
	assert.False(t, a)
	assert.False(t, tr.Anomalous(Utilization))

	// A drop is flagged too, with a negative z.
	a, z = tr.Observe(Utilization, at(302, time.Second), 0)
	assert.True(t, a)
	assert.Less(t, z, -3.0)
}

// TestSpikeNotInOwnBaseline uses a small baseline: a point included in its
// own baseline of n points can never have |z| above (n-1)/√n (2.04 for
// n=6), so a flag here proves the spike was scored before being added.
func TestSpikeNotInOwnBaseline(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinPoints = 5
	tr := NewTracker(cfg)
	feed(tr, Utilization, 0, time.Second, []float64{0.50, 0.51, 0.49, 0.50, 0.52})
	mean, sd, n := tr.Stats(Utilization)
	require.Equal(t, 5, n)

	a, z := tr.Observe(Utilization, at(5, time.Second), 0.9)
	assert.True(t, a)
	assert.Equal(t, (0.9-mean)/sd, z)

	mean2, sd2, n2 := tr.Stats(Utilization)
	require.Equal(t, 6, n2)
	zIncluded := (0.9 - mean2) / sd2
	assert.Less(t, zIncluded, 5/math.Sqrt(6)+1e-12)
	assert.Less(t, zIncluded, cfg.ZThreshold)
}

func TestMinPoints(t *testing.T) {
	tr := NewTracker(DefaultConfig())
	rng := rand.New(rand.NewPCG(3, 4))
	feed(tr, PCIe, 0, time.Second, uniform(rng, 29, 1e9, 1e7))
	a, z := tr.Observe(PCIe, at(29, time.Second), 5e10)
	assert.False(t, a, "29 points are too few to score against")
	assert.Zero(t, z)

	tr = NewTracker(DefaultConfig())
	feed(tr, PCIe, 0, time.Second, uniform(rng, 30, 1e9, 1e7))
	a, z = tr.Observe(PCIe, at(30, time.Second), 5e10)
	assert.True(t, a)
	assert.Greater(t, z, 1000.0)
}

func TestStepChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cfg := DefaultConfig()
	tr := NewTracker(cfg)
	step := time.Second
	assert.Zero(t, feed(tr, MemoryUsed, 0, step, uniform(rng, 600, 0.3, 0.02)))

	high := uniform(rng, 900, 0.8, 0.02)
	lastFlag := -1
	for i, v := range high {
		a, _ := tr.Observe(MemoryUsed, at(600+i, step), v)
		if i == 0 {
			assert.True(t, a, "the step is anomalous")
		}
		if a {
			lastFlag = i
		}
	}
	windowPoints := int(cfg.Window / step)
	t.Logf("last anomalous point %d s after the step (window %d points)", lastFlag, windowPoints)
	assert.Greater(t, lastFlag, 0, "still anomalous while the window is mostly the old level")
	assert.Less(t, lastFlag, windowPoints, "not anomalous once the window has moved past the step")
	assert.False(t, tr.Anomalous(MemoryUsed))
	mean, _, n := tr.Stats(MemoryUsed)
	assert.Equal(t, windowPoints+1, n)
	assert.InDelta(t, 0.8, mean, 0.01)
}

func TestConstantSeriesNeverFlags(t *testing.T) {
	for _, tc := range []struct {
		sig   Signal
		level float64
		next  float64
	}{
		{Utilization, 0, 0.01},
		{Utilization, 0.5, 0.6},
		{MemoryUsed, 0.3, 0.3 + 1e-6},
		{PCIe, 1.23e10, 1.23e10 + 1},
		{PCIe, 1.23e10, 0},
	} {
		tr := NewTracker(DefaultConfig())
		assert.Zero(t, feed(tr, tc.sig, 0, time.Second, repeat(100, tc.level)))
		mean, sd, n := tr.Stats(tc.sig)
		assert.Equal(t, tc.level, mean)
		assert.Zero(t, sd)
		assert.Equal(t, 100, n)
		a, z := tr.Observe(tc.sig, at(100, time.Second), tc.next)
		assert.False(t, a, "%v at %v", tc.sig, tc.level)
		assert.Zero(t, z)
	}
}

// After a step between two flat levels and the window moving past it, the
// window is flat again: the standard deviation is exactly zero, not
// rounding residue of the running sums that would make tiny deviations
// look enormous.
func TestFlatAfterStep(t *testing.T) {
	for _, lv := range [][2]float64{{0.3, 0.8}, {0.1, 0.7}, {2e9, 3.3e10}, {3.3e10, 1e3}} {
		tr := NewTracker(DefaultConfig())
		feed(tr, PCIe, 0, time.Second, repeat(400, lv[0]))
		feed(tr, PCIe, 400, time.Second, repeat(400, lv[1]))
		mean, sd, n := tr.Stats(PCIe)
		assert.Equal(t, 301, n)
		assert.InEpsilon(t, lv[1], mean, 1e-12)
		assert.Zero(t, sd, "%v", lv)
		a, z := tr.Observe(PCIe, at(800, time.Second), lv[1]*(1+1e-6))
		assert.False(t, a)
		assert.Zero(t, z)
	}
}

func TestWindowExpiry(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Window = time.Minute
	tr := NewTracker(cfg)
	vals := make([]float64, 121)
	for i := range vals {
		vals[i] = float64(i)
	}
	feed(tr, Utilization, 0, time.Second, vals)
	mean, sd, n := tr.Stats(Utilization)
	assert.Equal(t, 61, n, "window [ts-Window, ts] is closed: points 60..120")
	wm, wsd := directStats(vals[60:])
	assert.InDelta(t, wm, mean, 1e-12)
	assert.InDelta(t, wsd, sd, 1e-12)

	// A gap longer than the window leaves only the new point.
	tr.Observe(Utilization, at(120, time.Second).Add(time.Minute+time.Nanosecond), 7)
	mean, sd, n = tr.Stats(Utilization)
	assert.Equal(t, 1, n)
	assert.Equal(t, 7.0, mean)
	assert.Zero(t, sd)

	// Expiry is per signal.
	feed(tr, MemoryUsed, 0, time.Second, repeat(10, 0.5))
	_, _, n = tr.Stats(MemoryUsed)
	assert.Equal(t, 10, n)
}

func TestRingCapacity(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPoints, cfg.MinPoints = 50, 10
	tr := NewTracker(cfg)
	vals := make([]float64, 200)
	for i := range vals {
		vals[i] = float64(i * i % 97)
	}
	feed(tr, PCIe, 0, time.Millisecond, vals)
	mean, sd, n := tr.Stats(PCIe)
	assert.Equal(t, 50, n)
	wm, wsd := directStats(vals[150:])
	assert.InDelta(t, wm, mean, 1e-12)
	assert.InDelta(t, wsd, sd, 1e-12)
	assert.Len(t, tr.series[PCIe].buf, 50, "ring never grows past MaxPoints")
	assert.Nil(t, tr.series[Utilization].buf, "unused signals allocate nothing")

	// Time expiry still applies on top of capacity.
	tr.Observe(PCIe, at(199, time.Millisecond).Add(cfg.Window+time.Nanosecond), 1)
	_, _, n = tr.Stats(PCIe)
	assert.Equal(t, 1, n)
}

func TestOutOfOrderIgnored(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tr := NewTracker(DefaultConfig())
	feed(tr, Utilization, 0, time.Second, uniform(rng, 40, 0.5, 0.05))
	a, _ := tr.Observe(Utilization, at(40, time.Second), 1)
	require.True(t, a)
	mean, sd, n := tr.Stats(Utilization)

	a, z := tr.Observe(Utilization, at(39, time.Second), 0)
	assert.False(t, a)
	assert.Zero(t, z)
	m2, sd2, n2 := tr.Stats(Utilization)
	assert.Equal(t, []float64{mean, sd}, []float64{m2, sd2})
	assert.Equal(t, n, n2)
	assert.True(t, tr.Anomalous(Utilization), "an ignored point does not change the verdict")

	// Equal timestamps are accepted.
	tr.Observe(Utilization, at(40, time.Second), 0.5)
	_, _, n2 = tr.Stats(Utilization)
	assert.Equal(t, n+1, n2)

	// Ordering is per signal.
	tr.Observe(MemoryUsed, at(0, time.Second), 0.5)
	_, _, n = tr.Stats(MemoryUsed)
	assert.Equal(t, 1, n)
}

func TestInvalidInputsIgnored(t *testing.T) {
	tr := NewTracker(DefaultConfig())
	feed(tr, Utilization, 0, time.Second, repeat(40, 0.4, 0.6))
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		a, z := tr.Observe(Utilization, at(100, time.Second), v)
		assert.False(t, a)
		assert.Zero(t, z)
	}
	_, _, n := tr.Stats(Utilization)
	assert.Equal(t, 40, n)
	// An ignored non-finite value does not advance time either.
	tr.Observe(Utilization, at(40, time.Second), 0.5)
	_, _, n = tr.Stats(Utilization)
	assert.Equal(t, 41, n)

	a, z := tr.Observe(NumSignals, at(50, time.Second), 1)
	assert.False(t, a)
	assert.Zero(t, z)
	assert.False(t, tr.Anomalous(NumSignals))
	m, sd, n := tr.Stats(Signal(200))
	assert.Zero(t, m)
	assert.Zero(t, sd)
	assert.Zero(t, n)
}

func TestEmptyTracker(t *testing.T) {
	tr := NewTracker(DefaultConfig())
	for sig := range NumSignals {
		m, sd, n := tr.Stats(sig)
		assert.Zero(t, m)
		assert.Zero(t, sd)
		assert.Zero(t, n)
		assert.False(t, tr.Anomalous(sig))
	}
	assert.Equal(t, PatternUnknown, tr.Pattern())
}

func TestObserveDoesNotAllocate(t *testing.T) {
	tr := NewTracker(DefaultConfig())
	rng := rand.New(rand.NewPCG(9, 10))
	vals := uniform(rng, 4096, 0.5, 0.1)
	i := 0
	obs := func() {
		ts := at(i, 10*time.Millisecond)
		v := vals[i%len(vals)]
		tr.Observe(Utilization, ts, v)
		tr.Observe(MemoryUsed, ts, v)
		tr.Observe(PCIe, ts, v*1e10)
		i++
	}
	for range 3 * DefaultConfig().MaxPoints {
		obs() // grow the rings to capacity
	}
	assert.Zero(t, testing.AllocsPerRun(10000, obs))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { tr.Pattern(); tr.Stats(PCIe); tr.Anomalous(PCIe) }))
}
