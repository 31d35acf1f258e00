package gpuvizreceiver

import (
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

func loadConfig(t *testing.T, name string) (*Config, error) {
	t.Helper()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub(component.MustNewIDWithName(metadata.Type.String(), name).String())
	require.NoError(t, err)
	cfg := createDefaultConfig().(*Config)
	if err := sub.Unmarshal(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func TestLoadConfig(t *testing.T) {
	simulated := defaultConfig()
	simulated.CollectionInterval = 2 * time.Second
	simulated.Backend = BackendSimulated
	simulated.Simulated = SimulatedConfig{Model: "B200", GPUs: 4, Seed: 42, MIG: true, Scenario: "tensor_parallel"}

	devices := defaultConfig()
	devices.NVML.LibraryPath = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
	devices.Devices = []DeviceRef{"0", "3", "GPU-5b1a0b8e-7c4e-4f7e-9d7e-2b8c6a1f0e11"}
	devices.Metrics.NvidiaGpuFanSpeed.Enabled = false

	deep := defaultConfig()
	deep.Samples.Enabled = false
	deep.Processes = ProcessesConfig{Enabled: true, Top: 3, CommandLine: true}
	deep.XidEvents.Enabled = false

	fast := defaultConfig()
	fast.Samples = SamplesConfig{Enabled: true, Interval: 100 * time.Millisecond, FlushInterval: 500 * time.Millisecond, MaxPendingTicks: 100}

	slurm := defaultConfig()
	slurm.Slurm = SlurmConfig{Environ: false, JobMappingDir: "/run/gpuviz/slurm-jobs"}

	// What the negative initial_delay's error says to use instead.
	atStart := defaultConfig()
	atStart.InitialDelay = 0

	for name, want := range map[string]*Config{"": defaultConfig(), "simulated": simulated, "devices": devices, "deep": deep, "fast_samples": fast, "slurm": slurm, "scrape_at_start": atStart} {
		t.Run(name, func(t *testing.T) {
			cfg, err := loadConfig(t, name)
			require.NoError(t, err)
			require.NoError(t, confmap.Validate(cfg))
			if diff := cmp.Diff(want, cfg, cmpopts.EquateEmpty(), ignoreUnexported()); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// ignoreUnexported ignores unexported fields, such as the ones mdatagen puts
// in every per-metric config to record whether the user set it.
func ignoreUnexported() cmp.Option {
	return cmp.FilterPath(func(p cmp.Path) bool {
		sf, ok := p.Index(-1).(cmp.StructField)
		return ok && !token.IsExported(sf.Name())
	}, cmp.Ignore())
}

func TestDefaultConfigNeverSimulates(t *testing.T) {
	assert.Equal(t, BackendNVML, defaultConfig().Backend, "production must not silently simulate")
	require.NoError(t, confmap.Validate(defaultConfig()))
}

func TestInvalidConfig(t *testing.T) {
	for name, want := range map[string]string{
		"bad_backend":                `backend: "dcgm" is not a backend: use nvml, simulated or auto`,
		"bad_model":                  `simulated.model: unknown simulated GPU model "h300": use one of a100, b200, h100, h200`,
		"no_gpus":                    "simulated.gpus: 0 is out of range: a simulated server has 1 to 64 GPUs",
		"too_many_gpus":              "simulated.gpus: 65 is out of range",
		"bad_scenario":               `simulated.scenario: unknown scenario "sterdy": use one of bursty, host_starved, long_context, mixed, power_capped, sequential, steady, tensor_parallel`,
		"scenario_too_big":           "simulated.scenario: scenario steady: llama-3.1-70b does not fit on 1 h200 GPU(s): give the simulated server more GPUs",
		"bad_device":                 `devices[0]: "nvidia0" is neither a GPU index (0, 1, ...) nor a GPU UUID`,
		"negative_device":            `devices[0]: "-1" is not a GPU index: indexes start at 0`,
		"mig_device":                 `devices[0]: "MIG-5b1a0b8e-7c4e-4f7e-9d7e-2b8c6a1f0e11" is a MIG device: name its physical GPU instead`,
		"duplicate_device":           `devices[1]: "1" is listed twice`,
		"bad_top":                    "processes.top: 0 is out of range: report 1 to 64 processes per GPU",
		"samples_too_fast":           "samples.interval: 50ms is too short: GPM needs at least 100ms between samples",
		"samples_slower_than_scrape": "samples.interval: 2s is longer than collection_interval (1s)",
		"flush_before_tick":          "samples.flush_interval: 250ms is shorter than samples.interval (500ms)",
		"no_pending_ticks":           "samples.max_pending_ticks: 0 is out of range: 1 to 1000",
		"pending_shorter_than_flush": "samples.max_pending_ticks: 10 ticks do not last one flush_interval (5s at 250ms)",
		"pod_resources_fast":         "kubernetes.pod_resources.interval: 10ms must be at least 100ms",
		"pod_resources_no_socket":    "kubernetes.pod_resources.socket: must not be empty",
		"bad_fault":                  "simulated.faults[0].sleep: 0s: a hang fault sleeps for a positive time",
		"timeout_past_interval":      "timeout: 2s is longer than collection_interval (1s): a scrape must end before the next begins",
		"negative_initial_delay":     "initial_delay: -1s is negative: use 0 to scrape at start",
		"slurm_relative_dir":         `slurm.job_mapping_dir: "run/slurm" is not an absolute path`,
		"unmarked_simulation":        "resource_attributes::gpuviz.backend::enabled: false would leave simulated data unmarked",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := loadConfig(t, name)
			require.NoError(t, err)
			assert.ErrorContains(t, confmap.Validate(cfg), want)
		})
	}
	t.Run("second_bad_fault", func(t *testing.T) {
		cfg, err := loadConfig(t, "bad_fault")
		require.NoError(t, err)
		assert.ErrorContains(t, confmap.Validate(cfg), "simulated.faults[1].gpu: there is no GPU 9: the server has 8 (0 to 7)")
	})
	t.Run("fault_two_bad_fields", func(t *testing.T) {
		// Each of a fault's errors names its own field by its whole path,
		// not only the first.
		cfg, err := loadConfig(t, "fault_two_bad_fields")
		require.NoError(t, err)
		lines := strings.Split(confmap.Validate(cfg).Error(), "\n")
		assert.Contains(t, lines, "simulated.faults[0].gpu: there is no GPU 9: the server has 8 (0 to 7)")
		assert.Contains(t, lines, `simulated.faults[0].error: "boom" is not an injectable error: use unknown, timeout or gpu_is_lost`)
	})
	t.Run("float_device", func(t *testing.T) {
		_, err := loadConfig(t, "float_device")
		assert.ErrorContains(t, err, "a device is a GPU index or UUID, not 1.5")
	})
}
