package gpuvizprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// The analysis reads utilisation, PCIe receive and memory, and nothing
// when switched off.
func TestAnalysisWantsItsSignals(t *testing.T) {
	cfg := createDefaultConfig()
	on := newGPUAnalysis(true, cfg.analysis())
	for _, sig := range []timeline.Signal{timeline.Utilization, timeline.PCIeRx, timeline.MemoryUsed, timeline.MemoryLimit} {
		assert.True(t, on.wants(sig), "signal %d", sig)
		assert.False(t, newGPUAnalysis(false, cfg.analysis()).wants(sig), "signal %d, analysis off", sig)
	}
	assert.False(t, on.wants(timeline.Power))
}

// A batch carries the scrape-time point before the driver's older
// sub-second samples: the analysis reads them all, in time order; memory
// as a share of the GPU's memory once its size is known; PCIe receive as
// PCIe. A GPU the timeline forgot is forgotten.
func TestAnalysisReadsEachGPUsPointsInTimeOrder(t *testing.T) {
	cfg := createDefaultConfig()
	a := newGPUAnalysis(true, cfg.analysis())
	k := timeline.Key{Host: "node-1", GPU: "GPU-a"}
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	a.observe([]analysisPoint{
		{k, timeline.Utilization, base.Add(time.Second), 0.9},
		{k, timeline.MemoryUsed, base, 40e9}, // before the GPU's size: no share yet
		{k, timeline.PCIeRx, base.Add(time.Second), 2e9},
		{k, timeline.Utilization, base.Add(250 * time.Millisecond), 0.2},
		{k, timeline.Utilization, base.Add(500 * time.Millisecond), 0.4},
		{k, timeline.MemoryLimit, base.Add(time.Second), 80e9},
		{k, timeline.MemoryUsed, base.Add(time.Second), 60e9},
	})
	store := timeline.New(cfg.timeline())
	require.True(t, store.Add(k, timeline.Utilization, base.Add(time.Second), 0.9))
	var read []timeline.Key
	a.read(store, func(key timeline.Key, tr *analysis.Tracker) {
		read = append(read, key)
		mean, _, n := tr.Stats(analysis.Utilization)
		assert.Equal(t, 3, n, "all three utilisation points, oldest first")
		assert.InDelta(t, 0.5, mean, 1e-9)
		mean, _, n = tr.Stats(analysis.MemoryUsed)
		assert.Equal(t, 1, n)
		assert.InDelta(t, 0.75, mean, 1e-9, "memory used as a share of the GPU's")
		mean, _, n = tr.Stats(analysis.PCIe)
		assert.Equal(t, 1, n)
		assert.Equal(t, 2e9, mean)
	})
	assert.Equal(t, []timeline.Key{k}, read)

	a.read(timeline.New(cfg.timeline()), func(key timeline.Key, _ *analysis.Tracker) { t.Errorf("%v: the timeline forgot it", key) })
	assert.Empty(t, a.gpus, "what the timeline forgot is dropped")
}
