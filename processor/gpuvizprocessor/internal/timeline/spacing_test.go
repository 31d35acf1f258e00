package timeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSpacing(t *testing.T) {
	s := newStore(t, nil)
	_, ok := s.Spacing(nil)
	assert.False(t, ok, "no keys")
	_, ok = s.Spacing([]Key{gpuA})
	assert.False(t, ok, "an unknown GPU")

	// gpuA: the energy counter every 30 s (dcgm-exporter), power every 0.25 s.
	for _, sec := range []float64{0, 30, 60} {
		s.AddEnergy(gpuA, at(sec), 1000+sec*300)
	}
	addSeries(t, s, gpuA, Power, steps(50, 60, 0.25, func(float64) float64 { return 300 })...)
	// gpuB: no counter; utilisation every 10 s, power every second.
	addSeries(t, s, gpuB, Utilization, steps(0, 60, 10, func(float64) float64 { return 0.5 })...)
	addSeries(t, s, gpuB, Power, steps(40, 60, 1, func(float64) float64 { return 200 })...)
	// gpuC: one point only.
	s.AddEnergy(gpuC, at(60), 1)
	// gpuD: neither counter nor power; utilisation every 10 s, memory every 2 s.
	gpuD := Key{Host: "node-2", GPU: "GPU-dddd"}
	addSeries(t, s, gpuD, Utilization, steps(0, 60, 10, func(float64) float64 { return 0.5 })...)
	addSeries(t, s, gpuD, MemoryUsed, steps(0, 60, 2, func(float64) float64 { return 1e9 })...)

	got, ok := s.Spacing([]Key{gpuA})
	assert.True(t, ok)
	assert.Equal(t, 30*time.Second, got, "the energy counter's spacing: it settles the GPU")
	got, ok = s.Spacing([]Key{gpuB})
	assert.True(t, ok)
	assert.Equal(t, time.Second, got, "without a counter, the most frequent signal's")
	got, ok = s.Spacing([]Key{gpuD})
	assert.True(t, ok)
	assert.Equal(t, 2*time.Second, got, "without a counter or power, the most frequent signal's")
	got, ok = s.Spacing([]Key{gpuB, gpuA})
	assert.True(t, ok)
	assert.Equal(t, 30*time.Second, got, "the slowest GPU of a set")
	_, ok = s.Spacing([]Key{gpuA, gpuC})
	assert.False(t, ok, "a GPU with one point: not known yet")
}
