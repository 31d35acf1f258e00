package analysis

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkObserve measures one Observe in the steady state (rings full),
// cycling through the three signals at 10 ms per point so both the time
// window (expiry) and ring capacity paths run.
func BenchmarkObserve(b *testing.B) {
	tr := NewTracker(DefaultConfig())
	rng := rand.New(rand.NewPCG(13, 14))
	vals := make([]float64, 1<<14)
	for i := range vals {
		vals[i] = 0.5 + 0.1*rng.NormFloat64()
	}
	scale := [NumSignals]float64{1, 1, 1e10}
	i := 0
	obs := func() {
		sig := Signal(i % int(NumSignals))
		tr.Observe(sig, at(i, 10*time.Millisecond), vals[i&(len(vals)-1)]*scale[sig])
		i++
	}
	for range 4 * int(NumSignals) * DefaultConfig().MaxPoints {
		obs()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		obs()
	}
}
