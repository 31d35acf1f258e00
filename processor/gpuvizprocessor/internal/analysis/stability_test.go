package analysis

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exactStats computes the mean and sample standard deviation of a series'
// window in 256-bit floating point, two-pass.
func exactStats(s *series) (mean, sd float64) {
	const prec = 256
	a, b := s.segments()
	sum := new(big.Float).SetPrec(prec)
	x := new(big.Float).SetPrec(prec)
	for _, seg := range [2][]point{a, b} {
		for _, p := range seg {
			sum.Add(sum, x.SetFloat64(p.v))
		}
	}
	n := new(big.Float).SetPrec(prec).SetInt64(int64(s.n))
	m := new(big.Float).SetPrec(prec).Quo(sum, n)
	ss := new(big.Float).SetPrec(prec)
	d := new(big.Float).SetPrec(prec)
	for _, seg := range [2][]point{a, b} {
		for _, p := range seg {
			d.Sub(x.SetFloat64(p.v), m)
			ss.Add(ss, d.Mul(d, d))
		}
	}
	mean, _ = m.Float64()
	if s.n < 2 {
		return mean, 0
	}
	ss.Quo(ss, new(big.Float).SetPrec(prec).SetInt64(int64(s.n-1)))
	sd, _ = ss.Sqrt(ss).Float64()
	return mean, sd
}

// TestLongRunStability streams 10 million points into each of two signals
// and checks, at ~1000 checkpoints and at the end, that the running mean
// and standard deviation match an exact computation over the ring to 1e-9
// relative. The data are built to hurt running sums: PCIe-like values of
// ~1e10 with a spread of ~1e3 (raw sums of squares would cancel all 16
// digits), level steps of millions of standard deviations, spikes, slow
// drift, and flat stretches whose standard deviation must come out as
// exactly zero. Utilisation is window-limited (1 s steps, 301 points);
// PCIe is ring-limited (10 ms steps, 2048 points).
func TestLongRunStability(t *testing.T) {
	total := 10_000_000
	if testing.Short() {
		total = 1_000_000
	}
	rng := rand.New(rand.NewPCG(11, 12))
	tr := NewTracker(DefaultConfig())

	utilLevels := []float64{0.05, 0.5, 0.93, 0.3}
	util := func(i int) float64 {
		if i%1_000_000 >= 500_000 && i%1_000_000 < 503_000 {
			return 0 // idle stretch, 10x the window
		}
		v := utilLevels[(i/50_000)%len(utilLevels)] + 0.03*rng.NormFloat64()
		if rng.IntN(1000) == 0 {
			v = 1
		}
		return v
	}
	pcieLevels := []float64{1.2e10, 4e9, 2.5e10, 7e8}
	pcie := func(i int) float64 {
		if i%1_000_000 >= 700_000 && i%1_000_000 < 710_000 {
			return 3.2e10 // flat, pegged link
		}
		base := pcieLevels[(i/77_777)%len(pcieLevels)] * (1 + 0.01*math.Sin(float64(i)/1e5))
		v := base + 1e3*rng.NormFloat64()
		if rng.IntN(5000) == 0 {
			v *= 3
		}
		return v
	}

	checks := 0
	check := func(i int, sig Signal) {
		s := &tr.series[sig]
		mean, sd, n := tr.Stats(sig)
		require.Equal(t, s.n, n)
		// Every tenth checkpoint in 256-bit arithmetic, the rest with the
		// (much faster, ~1e-15 accurate) compensated two-pass reference.
		ref := twoPass
		if checks%10 == 0 || i == total-1 {
			ref = exactStats
		}
		wm, wsd := ref(s)
		if wsd <= 1e-12*math.Abs(wm) { // flat window (up to the reference's rounding)
			require.Zero(t, sd, "point %d %v: flat window", i, sig)
			require.InDelta(t, wm, mean, 1e-15*math.Max(1, math.Abs(wm)), "point %d %v: mean", i, sig)
			return
		}
		require.InEpsilon(t, wm, mean, 1e-9, "point %d %v: mean", i, sig)
		require.InEpsilon(t, wsd, sd, 1e-9, "point %d %v: stddev", i, sig)
	}

	var flagged [NumSignals]int
	for i := range total {
		if a, _ := tr.Observe(Utilization, at(i, time.Second), util(i)); a {
			flagged[Utilization]++
		}
		if a, _ := tr.Observe(PCIe, at(i, 10*time.Millisecond), pcie(i)); a {
			flagged[PCIe]++
		}
		inFlat := i%1_000_000 >= 501_000 && i%1_000_000 < 503_000 || i%1_000_000 >= 705_000 && i%1_000_000 < 710_000
		if i%9973 == 0 || (inFlat && i%997 == 0) || i == total-1 {
			check(i, Utilization)
			check(i, PCIe)
			checks++
		}
	}
	require.Equal(t, 301, tr.series[Utilization].n)
	require.Equal(t, 2048, tr.series[PCIe].n)
	t.Logf("%d points per signal, %d checkpoints; flagged: utilization %d, pcie %d",
		total, checks, flagged[Utilization], flagged[PCIe])
}

// twoPass is a fast reference: compensated two-pass mean and sample
// standard deviation over the ring (accurate to ~1e-15 relative).
func twoPass(s *series) (mean, sd float64) {
	a, b := s.segments()
	var sum, ss ksum
	for _, seg := range [2][]point{a, b} {
		for _, p := range seg {
			sum.add(p.v)
		}
	}
	mean = sum.value() / float64(s.n)
	for _, seg := range [2][]point{a, b} {
		for _, p := range seg {
			d := p.v - mean
			ss.add(d * d)
		}
	}
	return mean, math.Sqrt(ss.value() / float64(s.n-1))
}

// TestHugeStepEveryPoint checks the statistics at every point through and
// after steps of up to 2e8 standard deviations, where the shift K of the
// running sums is left far from the new level unless the drift rebuild
// moves it in time.
func TestHugeStepEveryPoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	tr := NewTracker(DefaultConfig())
	levels := []float64{1e10, 3e10, 5e2, 2.2e10, 2.2e10 + 1e6}
	const per = 2 * 2048 // the transition plus a full window after it
	i := 0
	for _, lv := range levels {
		for range per {
			tr.Observe(PCIe, at(i, 10*time.Millisecond), lv+100*rng.NormFloat64())
			i++
			if i < 2 {
				continue
			}
			mean, sd, _ := tr.Stats(PCIe)
			wm, wsd := twoPass(&tr.series[PCIe])
			require.InEpsilon(t, wm, mean, 1e-9, "point %d: mean", i)
			require.InEpsilon(t, wsd, sd, 1e-9, "point %d: stddev", i)
		}
	}
}
