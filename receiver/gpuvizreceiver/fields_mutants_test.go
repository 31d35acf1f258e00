package gpuvizreceiver

import (
	"context"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A driver older than a field answers INVALID_ARGUMENT for it: the field
// leaves the request, as an unsupported one does, and the scrape is not a
// failure for it.
func TestFieldUnknownToTheDriverLeavesTheRequest(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	inner := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := inner(values)
		for i := range values {
			if values[i].FieldId == nvml.FI_DEV_PCIE_REPLAY_COUNTER {
				values[i].NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT)
			}
		}
		return ret
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	for range 2 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []float64{1}, pointsOf(m, "hw.status", map[string]any{"hw.state": "ok"})[dev.UUID])
	}
	assert.False(t, slices.ContainsFunc(s.gpus[0].fields, func(v nvml.FieldValue) bool { return v.FieldId == nvml.FI_DEV_PCIE_REPLAY_COUNTER }))
}
