package gpuvizreceiver

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// A path that cannot hold NVML on any machine, so these tests load the real
// go-nvml library code and see it fail the same way everywhere.
const missingLibrary = "/nonexistent/libnvidia-ml.so.1"

func TestNVMLBackendExplainsMissingLibrary(t *testing.T) {
	cfg := defaultConfig()
	cfg.NVML.LibraryPath = missingLibrary
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	require.NoError(t, err)
	err = r.Start(context.Background(), nil)
	require.Error(t, err)
	assert.ErrorContains(t, err, "the NVML library "+missingLibrary+" was not found")
	assert.ErrorContains(t, err, "install the NVIDIA driver")
	assert.ErrorContains(t, err, "backend: simulated")
	assert.ErrorIs(t, err, nvml.ERROR_LIBRARY_NOT_FOUND)
	require.NoError(t, r.Shutdown(context.Background()))
}

func TestInitErrorsNameTheCause(t *testing.T) {
	for ret, want := range map[nvml.Return]string{
		nvml.ERROR_DRIVER_NOT_LOADED: "NVIDIA kernel driver is not running",
		nvml.ERROR_NO_PERMISSION:     "no permission to open the GPUs",
		nvml.ERROR_UNKNOWN:           "nvmlInit failed",
	} {
		err := initError(ret, "")
		assert.ErrorContains(t, err, want)
		assert.ErrorIs(t, err, ret)
	}
}

func TestAutoFallsBackToSimulationLoudly(t *testing.T) {
	cfg := defaultConfig()
	cfg.Backend = BackendAuto
	cfg.NVML.LibraryPath = missingLibrary
	cfg.Simulated.GPUs = 3
	core, logs := observer.New(zapcore.WarnLevel)
	lib, backend, err := openBackend(cfg, zap.New(core))
	require.NoError(t, err)
	t.Cleanup(func() { lib.Shutdown() })
	assert.Equal(t, BackendSimulated, backend)
	n, ret := lib.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, 3, n)
	require.Equal(t, 1, logs.Len())
	assert.Contains(t, logs.All()[0].Message, "SIMULATED")
}
