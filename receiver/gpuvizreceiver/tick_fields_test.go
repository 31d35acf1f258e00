package gpuvizreceiver

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answerPower makes dev answer the tick's batched call with instant power
// *mw at driver timestamp *ts (µs), and the other fields as the fixture.
func answerPower(dev *server.Device, mw *uint64, ts *int64) {
	inner := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := inner(values)
		for i := range values {
			if values[i].FieldId == nvml.FI_DEV_POWER_INSTANT {
				binary.LittleEndian.PutUint64(values[i].Value[:], *mw)
				values[i].Timestamp = *ts
			}
		}
		return ret
	}
}

// powerPoints reads GPU g's tick at at and returns its instant power
// points, in W.
func powerPoints(s *gpuScraper, g *gpu, at time.Time) []float64 {
	var out []float64
	for _, f := range g.tick.read(s.lib, s.syms, at, false).fields {
		if f.kind == fieldPowerInstant {
			out = append(out, f.v)
		}
	}
	return out
}

// A value the driver has not refreshed since the previous tick is not
// emitted twice, also when the driver stamped it a little after the
// receiver's clock read (the call itself takes time): within the second's
// slack, it is not taken for a clock that stepped back.
func TestTickTakesAValueNotRefreshedOnce(t *testing.T) {
	lib := fixtureServer(1)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mw, ts := uint64(300_000), at.Add(500*time.Millisecond).UnixMicro()
	answerPower(device(lib, 0), &mw, &ts)
	g := s.gpus[0]
	assert.Equal(t, []float64{300}, powerPoints(s, g, at))
	assert.Empty(t, powerPoints(s, g, at.Add(250*time.Millisecond)), "the same value, at the same timestamp, again")
	ts += 100_000
	assert.Equal(t, []float64{300}, powerPoints(s, g, at.Add(500*time.Millisecond)), "refreshed: a new point")
}

// Instant power is a gauge: a drop is a drop, not a counter restart that
// adds to what came before.
func TestTickPowerDropIsNotACounterRestart(t *testing.T) {
	lib := fixtureServer(1)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mw, ts := uint64(300_000), at.UnixMicro()
	answerPower(device(lib, 0), &mw, &ts)
	g := s.gpus[0]
	assert.Equal(t, []float64{300}, powerPoints(s, g, at))
	mw, ts = 200_000, ts+250_000
	assert.Equal(t, []float64{200}, powerPoints(s, g, at.Add(250*time.Millisecond)))
}

// After a reset the tick follows the GPU's new handle, whose driver
// timestamps may start over: a value stamped before the newest one of the
// old handle is taken, not dropped as already seen.
func TestTickFollowingANewHandleForgetsTheOldTimestamps(t *testing.T) {
	lib := fixtureServer(2)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mw, ts := uint64(300_000), at.UnixMicro()
	answerPower(device(lib, 0), &mw, &ts)
	oldTS := at.Add(-time.Minute).UnixMicro()
	answerPower(device(lib, 1), &mw, &oldTS) // stands for GPU 0's new handle
	g := s.gpus[0]
	require.Equal(t, []float64{300}, powerPoints(s, g, at))
	var dev nvml.Device = device(lib, 1)
	g.handle.Store(&dev)
	assert.Equal(t, []float64{300}, powerPoints(s, g, at.Add(250*time.Millisecond)))
}

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
