package gpuvizreceiver

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

func complementConfig(t *testing.T, raw map[string]any) (*Config, error) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	require.NoError(t, confmap.NewFromStringMap(raw).Unmarshal(cfg))
	return cfg, confmap.Validate(cfg)
}

func enabled(m *metadata.MetricsConfig, list []metricSwitch) map[string]bool {
	out := map[string]bool{}
	for _, s := range list {
		out[s.name] = *s.enabled(m)
	}
	return out
}

func all(list []metricSwitch, v bool) map[string]bool {
	out := map[string]bool{}
	for _, s := range list {
		out[s.name] = v
	}
	return out
}

func TestComplementDCGM(t *testing.T) {
	cfg, err := complementConfig(t, map[string]any{"complement": "dcgm"})
	require.NoError(t, err)
	run := cfg.complemented()
	assert.Equal(t, all(gpmFed, false), enabled(&run.Metrics, gpmFed), "GPM is left to DCGM")
	assert.Equal(t, all(dcgmDuplicates, false), enabled(&run.Metrics, dcgmDuplicates), "DCGM's default counters are not repeated")
	assert.False(t, gpmEnabled(&run.Metrics) || migGPMEnabled(&run.Metrics), "no GPM state is opened")
	assert.True(t, run.Metrics.HwEnergy.Enabled && run.Metrics.NvidiaGpuSamplesUtilization.Enabled && run.Metrics.NvidiaGpuProcessMemoryUsage.Enabled &&
		run.Metrics.NvidiaGpuK8sAllocation.Enabled && run.Metrics.NvidiaGpuThrottleTime.Enabled && run.Metrics.HwGpuIo.Enabled,
		"what DCGM lacks stays")
	assert.True(t, samplesEnabled(&run.Metrics), "the driver's samples are read, as on any GPU without GPM")
	assert.True(t, cfg.Metrics.NvidiaGpuSmActivity.Enabled, "the loaded config is not changed")

	// A duplicate the configuration enables itself stays.
	cfg, err = complementConfig(t, map[string]any{
		"complement": "dcgm",
		"metrics":    map[string]any{"hw.power": map[string]any{"enabled": true}, "nvidia.gpu.sm.activity": map[string]any{"enabled": false}},
	})
	require.NoError(t, err, "switching a GPM metric off is fine")
	run = cfg.complemented()
	assert.True(t, run.Metrics.HwPower.Enabled)
	assert.False(t, run.Metrics.HwGpuUtilization.Enabled)

	// Without complement nothing changes.
	cfg, err = complementConfig(t, map[string]any{})
	require.NoError(t, err)
	assert.Same(t, cfg, cfg.complemented())
	assert.True(t, cfg.Metrics.NvidiaGpuSmActivity.Enabled && cfg.Metrics.HwGpuUtilization.Enabled)
}

func TestComplementInvalid(t *testing.T) {
	_, err := complementConfig(t, map[string]any{"complement": "DCGM-exporter"})
	assert.ErrorContains(t, err, `complement: "DCGM-exporter" is not a source the receiver complements: use dcgm, or leave it empty`)

	_, err = complementConfig(t, map[string]any{
		"complement": "dcgm",
		"metrics":    map[string]any{"nvidia.gpu.tensor.activity": map[string]any{"enabled": true}, "nvidia.gpu.gpm.status": map[string]any{"enabled": true}},
	})
	assert.ErrorContains(t, err, "metrics::nvidia.gpu.tensor.activity: is read from GPM, which complement: dcgm leaves to DCGM")
	assert.ErrorContains(t, err, "metrics::nvidia.gpu.gpm.status: is read from GPM")
}

// With complement: dcgm the receiver makes no GPM call and reports what
// DCGM lacks, at tick resolution, on a GPU that has GPM.
func TestComplementDCGMReadsNoGPM(t *testing.T) {
	lib := fixtureServer(1)
	gpmCalls := 0
	support, alloc := lib.GpmQueryDeviceSupportFunc, lib.GpmSampleAllocFunc
	lib.GpmQueryDeviceSupportFunc = func(d nvml.Device) (nvml.GpmSupport, nvml.Return) { gpmCalls++; return support(d) }
	lib.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { gpmCalls++; return alloc() }
	cfg := defaultConfig()
	cfg.Complement = ComplementDCGM
	_ = startDriven(t, cfg, lib, BackendNVML, newVirtualClock(time.Now()))
	assert.Zero(t, gpmCalls, "GPM is left to DCGM")

	cfg = defaultConfig()
	cfg.Complement = ComplementDCGM
	m := readBurst(t, cfg)
	for _, name := range []string{"nvidia.gpu.sm.activity", "nvidia.gpu.tensor.activity", "nvidia.gpu.dram.activity", "nvidia.gpu.gpm.status", "hw.gpu.utilization", "hw.power"} {
		assert.Zero(t, countPoints(m, name), name)
	}
	for _, name := range []string{"hw.energy", "nvidia.gpu.samples.utilization", "nvidia.gpu.samples.power", "nvidia.gpu.throttle.time", "nvidia.gpu.info"} {
		assert.NotZero(t, countPoints(m, name), name)
	}
	assert.Equal(t, 10, countPoints(m, "hw.energy"), "energy once a flush interval (1 s), on the flush ticks")

	// Without it, the same GPU's GPM is read.
	m = readBurst(t, defaultConfig())
	assert.NotZero(t, countPoints(m, "nvidia.gpu.sm.activity"))
	assert.Zero(t, countPoints(m, "nvidia.gpu.samples.utilization"), "the driver's samples only where GPM is not read")
}

// A configuration read again into the same Config (a reload) counts as
// set only what the latest one sets: hw.power set before, and not now,
// is off again with complement: dcgm.
func TestComplementSetMetricsAreTheLatestConfiguration(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	require.NoError(t, confmap.NewFromStringMap(map[string]any{
		"complement": "dcgm", "metrics": map[string]any{"hw.power": map[string]any{"enabled": true}},
	}).Unmarshal(cfg))
	require.True(t, cfg.complemented().Metrics.HwPower.Enabled)
	require.NoError(t, confmap.NewFromStringMap(map[string]any{"complement": "dcgm"}).Unmarshal(cfg))
	assert.False(t, cfg.complemented().Metrics.HwPower.Enabled)
}
