package gpuvizreceiver

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// withField makes GPU i's field fid read as the value *v holds at the time.
func withField(lib *server.Server, i int, fid uint32, v *atomic.Uint64) {
	dev := device(lib, i)
	inner := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := inner(values)
		for j := range values {
			if values[j].FieldId == fid {
				binary.LittleEndian.PutUint64(values[j].Value[:], v.Load())
			}
		}
		return ret
	}
}

func stateOf(m pmetric.Metrics, id string) string {
	var state string
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name == "hw.status" && attrs["hw.id"] == id && v == 1 {
			state = attrs["hw.state"].(string)
		}
	})
	return state
}

func TestHealthDecidesStatus(t *testing.T) {
	lib := fixtureServer(3)
	var pending, failure, dbe atomic.Uint64
	withField(lib, 0, nvml.FI_DEV_REMAPPED_PENDING, &pending)
	withField(lib, 1, nvml.FI_DEV_REMAPPED_FAILURE, &failure)
	withField(lib, 2, nvml.FI_DEV_ECC_DBE_VOL_TOTAL, &dbe)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	ids := []string{device(lib, 0).UUID, device(lib, 1).UUID, device(lib, 2).UUID}

	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	for _, id := range ids {
		assert.Equal(t, "ok", stateOf(m, id))
	}

	pending.Store(1)
	failure.Store(1)
	dbe.Store(2)
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "degraded", stateOf(m, ids[0]), "a pending row remap degrades the GPU")
	assert.Equal(t, "failed", stateOf(m, ids[1]), "a failed row remap fails it")
	assert.Equal(t, "degraded", stateOf(m, ids[2]), "new uncorrected ECC errors degrade it")
	assert.Equal(t, []float64{2}, pointsOf(m, "hw.errors", map[string]any{"error.type": "uncorrected"})[ids[2]])

	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "degraded", stateOf(m, ids[0]), "still pending")
	assert.Equal(t, "ok", stateOf(m, ids[2]), "no new uncorrected errors since the last scrape")
}

func TestXidErrorsAreCountedLoggedAndDegrade(t *testing.T) {
	lib := fixtureServer(2)
	var delivered atomic.Bool
	lib.EventSetWaitFunc = func(nvml.EventSet, uint32) (nvml.EventData, nvml.Return) {
		time.Sleep(5 * time.Millisecond)
		if delivered.CompareAndSwap(false, true) {
			return nvml.EventData{Device: lib.Devices[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}, nvml.SUCCESS
		}
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	core, logs := observer.New(zapcore.ErrorLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	s := newGPUScraper(defaultConfig(), set)
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, BackendNVML, nil }
	require.NoError(t, s.start(context.Background(), nil))
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })

	require.Eventually(t, func() bool { return logs.FilterMessage("GPU reported a critical Xid error").Len() == 1 }, 5*time.Second, 5*time.Millisecond)
	entry := logs.FilterMessage("GPU reported a critical Xid error").All()[0]
	assert.Equal(t, "GPU has fallen off the bus", entry.ContextMap()["meaning"])

	id := device(lib, 1).UUID
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []float64{1}, pointsOf(m, "nvidia.gpu.xid.errors", map[string]any{"nvidia.gpu.xid": int64(79)})[id])
	assert.Equal(t, "degraded", stateOf(m, id))
	assert.Equal(t, "ok", stateOf(m, device(lib, 0).UUID))

	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []float64{1}, pointsOf(m, "nvidia.gpu.xid.errors", nil)[id], "the count stays")
	assert.Equal(t, "ok", stateOf(m, id), "no new Xid since the last scrape")
}

func TestXidWatcherStopsAtShutdown(t *testing.T) {
	lib := fixtureServer(1)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	require.NotNil(t, s.xid.Load())
	// goleak (TestMain) checks the goroutine is gone after the test; here,
	// that the event set is freed exactly once.
	require.NoError(t, s.shutdown(context.Background()))
	assert.Len(t, lib.EventSetFreeCalls(), 1)
	require.NoError(t, s.shutdown(context.Background()))
	assert.Len(t, lib.EventSetFreeCalls(), 1)
}

// One GPU lost (Xid 79, EventSetWait says ERROR_GPU_IS_LOST) does not end
// the Xid watcher: another GPU's Xid after it is still counted.
func TestXidWatcherOutlivesALostGPU(t *testing.T) {
	lib := fixtureServer(2)
	var n atomic.Int32
	lib.EventSetWaitFunc = func(nvml.EventSet, uint32) (nvml.EventData, nvml.Return) {
		time.Sleep(2 * time.Millisecond)
		switch n.Add(1) {
		case 1:
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		case 2:
			return nvml.EventData{Device: lib.Devices[1], EventType: nvml.EventTypeXidCriticalError, EventData: 48}, nvml.SUCCESS
		}
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	require.Eventually(t, func() bool {
		m, _ := s.scrape(context.Background())
		got := pointsOf(m, "nvidia.gpu.xid.errors", nil)[device(lib, 1).UUID]
		return len(got) == 1 && got[0] == 1
	}, 5*time.Second, 50*time.Millisecond, "GPU 1's Xid 48 after GPU 0 was lost (EventSetWait calls: %d)", n.Load())
}
