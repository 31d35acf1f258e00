package gpuvizreceiver

import (
	"context"
	"math"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A reading that fails costs its own metrics only: the GPU's later
// readings are still made, and the GPU reports degraded.
func TestFailingReadingLeavesTheGPUsOtherReadings(t *testing.T) {
	lib := fixtureServer(2)
	// Utilisation is the first reading made.
	device(lib, 0).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{}, nvml.ERROR_UNKNOWN
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.Error(t, err)
	bad, good := device(lib, 0).UUID, device(lib, 1).UUID
	assert.Empty(t, pointsOf(m, "hw.gpu.utilization", map[string]any{"hw.gpu.task": "general"})[bad])
	for _, metric := range []string{"hw.gpu.memory.usage", "hw.temperature", "nvidia.gpu.clock.frequency", "nvidia.gpu.power.limit", "nvidia.gpu.pcie.link.width"} {
		assert.NotEmpty(t, pointsOf(m, metric, nil)[bad], "%s of the GPU whose utilisation failed", metric)
		assert.NotEmpty(t, pointsOf(m, metric, nil)[good], metric)
	}
	assert.Equal(t, "degraded", stateOf(m, bad))
	assert.Equal(t, "ok", stateOf(m, good))
}

// NVML_PSTATE_UNKNOWN (32) is no performance state: no point, where a
// real state is reported as its number.
func TestUnknownPerformanceStateIsNoReading(t *testing.T) {
	lib := fixtureServer(2)
	device(lib, 0).GetPerformanceStateFunc = func() (nvml.Pstates, nvml.Return) { return nvml.PSTATE_UNKNOWN, nvml.SUCCESS }
	device(lib, 1).GetPerformanceStateFunc = func() (nvml.Pstates, nvml.Return) { return nvml.PSTATE_2, nvml.SUCCESS }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	got := pointsOf(m, "nvidia.gpu.performance_state", nil)
	assert.Empty(t, got[device(lib, 0).UUID])
	assert.Equal(t, []float64{2}, got[device(lib, 1).UUID])
}

// NVML_VALUE_NOT_AVAILABLE as a process's memory is no reading, also for
// a process that is among the top N reported.
func TestProcessMemoryNotAvailableIsNoReadingWithinTopN(t *testing.T) {
	lib := fixtureServer(1)
	device(lib, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 1000, UsedGpuMemory: math.MaxUint64}, {Pid: 2000, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	cfg := scrapeOnly()
	cfg.Processes.Top = 2
	s := startScraper(t, cfg, lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	pids := map[int64]float64{}
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name == "nvidia.gpu.process.memory.usage" {
			pids[attrs["process.pid"].(int64)] = v
		}
	})
	assert.Equal(t, map[int64]float64{2000: 1 << 30}, pids)
	// Process 1000 is still reported: its utilisation (the fixture samples it).
	assert.NotEmpty(t, pointsOf(m, "nvidia.gpu.process.utilization", map[string]any{"process.pid": int64(1000)}))
}

// A lost GPU is taken up again only under its own UUID: where another GPU
// answers at its NVML index (a reset renumbered the GPUs), the lost GPU
// stays failed and the other's readings are not reported as its.
func TestLostGPUIsNotReplacedByAnotherAtItsIndex(t *testing.T) {
	lib := fixtureServer(2)
	lost := device(lib, 0)
	lost.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.Error(t, err)
	require.Equal(t, "failed", stateOf(m, lost.UUID))

	other := device(fixtureServer(3), 2) // another GPU, another UUID
	require.NotEqual(t, lost.UUID, other.UUID)
	lib.Devices[0] = other
	m, err = s.scrape(context.Background())
	require.Error(t, err)
	assert.Equal(t, "failed", stateOf(m, lost.UUID))
	assert.Empty(t, pointsOf(m, "hw.temperature", nil)[lost.UUID], "the other GPU's temperature is not the lost one's")
	assert.Equal(t, "ok", stateOf(m, device(lib, 1).UUID))
}
