package gpuvizreceiver

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A GPU whose driver answers the batched field call NOT_SUPPORTED as a
// whole is not degraded for it: the fields are not asked again, and power
// and energy come from the dedicated calls.
func TestTickFieldCallNotSupportedIsNotAFailure(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	dev.GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	for i := range 2 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err, "scrape %d", i)
		assert.Equal(t, []float64{1}, pointsOf(m, "hw.status", map[string]any{"hw.state": "ok"})[dev.UUID], "scrape %d", i)
		assert.Len(t, pointsOf(m, "hw.power", nil)[dev.UUID], 1, "scrape %d", i)
		assert.Len(t, pointsOf(m, "hw.energy", nil)[dev.UUID], 1, "scrape %d", i)
	}
}
