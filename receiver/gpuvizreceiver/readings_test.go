package gpuvizreceiver

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without PCIe byte counters, hw.gpu.io integrates the throughput from the
// previous scrape: the first scrape has none before it, and counts nothing.
func TestPCIeThroughputFallbackStartsAtZero(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	dev.GetFieldValuesFunc = withoutFields(dev.GetFieldValuesFunc, nvml.FI_DEV_PCIE_COUNT_RX_BYTES, nvml.FI_DEV_PCIE_COUNT_TX_BYTES)
	dev.GetPcieThroughputFunc = func(nvml.PcieUtilCounter) (uint32, nvml.Return) { return 2_000_000, nvml.SUCCESS }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background()) // finds the counters missing, and falls back
	require.NoError(t, err)
	assert.Equal(t, map[string][]float64{dev.UUID: {0, 0}}, pointsOf(m, "hw.gpu.io", nil))
}

// P15 is a performance state; PSTATE_UNKNOWN is not.
func TestPerformanceStateBounds(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	p := nvml.PSTATE_15
	dev.GetPerformanceStateFunc = func() (nvml.Pstates, nvml.Return) { return p, nvml.SUCCESS }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []float64{15}, pointsOf(m, "nvidia.gpu.performance_state", nil)[dev.UUID])
	p = nvml.PSTATE_UNKNOWN
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pointsOf(m, "nvidia.gpu.performance_state", nil)[dev.UUID])
}

// A GPU that reports no memory total has no memory utilization (not NaN).
func TestMemoryWithoutATotalHasNoUtilization(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.SUCCESS }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []float64{0}, pointsOf(m, "hw.gpu.memory.limit", nil)[dev.UUID])
	assert.Empty(t, pointsOf(m, "hw.gpu.memory.utilization", nil)[dev.UUID])
}
