package gpuvizreceiver

import (
	"fmt"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
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
	"go.yaml.in/yaml/v3"

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
		// Semantic conventions require these on hw.gpu.io and hw.errors:
		// a metric's attributes setting must not drop them.
		"gpu_io_without_direction": "network.io.direction is a required attribute for hw.gpu.io metric and must be included",
		"errors_without_type":      "error.type is a required attribute for hw.errors metric and must be included",
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

// Every configuration block of the README loads and validates, and the
// defaults its comments give are the defaults.
func TestREADMEConfigBlocksLoadAndValidate(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	require.Len(t, blocks, 3)
	for _, m := range blocks {
		var raw map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(m[1]), &raw))
		sub, err := confmap.NewFromStringMap(raw).Sub("receivers::gpuviz")
		require.NoError(t, err)
		cfg := createDefaultConfig().(*Config)
		require.NoError(t, sub.Unmarshal(cfg), m[1])
		require.NoError(t, confmap.Validate(cfg), m[1])
	}
	def := createDefaultConfig().(*Config)
	assert.Contains(t, string(b), fmt.Sprintf("environ: %v                            # default", def.Slurm.Environ))
	assert.Contains(t, string(b), fmt.Sprintf("# default %q: none", def.Slurm.JobMappingDir))
	assert.Contains(t, string(b), fmt.Sprintf("complement: dcgm     # %q (default)", string(def.Complement)))
}

// The project README's receiver block ("Adding gpuviz to a collector
// config") gives every setting at its default, but for the one metric it
// switches off as an example: it validates and is createDefaultConfig.
func TestProjectREADMEReceiverBlockIsTheDefaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	doc := string(b)
	i := strings.Index(doc, "## Adding gpuviz to a collector config")
	require.GreaterOrEqual(t, i, 0)
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(doc[i:])
	require.NotNil(t, m)
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(m[1]), &raw))
	sub, err := confmap.NewFromStringMap(raw).Sub("receivers::gpuviz")
	require.NoError(t, err)
	cfg := createDefaultConfig().(*Config)
	require.NoError(t, sub.Unmarshal(cfg))
	require.NoError(t, confmap.Validate(cfg))
	want := createDefaultConfig().(*Config)
	want.Metrics.NvidiaGpuClockFrequency.Enabled = false
	if diff := cmp.Diff(want, cfg, cmpopts.EquateEmpty(), ignoreUnexported()); diff != "" {
		t.Errorf("the README's receiver block is not the defaults (-want +got):\n%s", diff)
	}
}

// readmeMetricRows returns the metric names of each row of the project
// README's metric table ("## Metrics"), with the units of the row's last
// cell. A row writes several names as prefix{a, b}suffix, or as a first
// name and then .suffix for another of its namespace (hw. or nvidia.gpu.).
func readmeMetricRows(t *testing.T, doc string) map[string][]string {
	t.Helper()
	i := strings.Index(doc, "\n## Metrics\n")
	require.GreaterOrEqual(t, i, 0, "README has a Metrics section")
	section := doc[i+1:]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	braces := regexp.MustCompile(`^(.*)\{([^}]*)\}(.*)$`)
	rows := map[string][]string{}
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		var units []string
		for _, u := range strings.Split(cells[len(cells)-1], ",") {
			units = append(units, strings.TrimSpace(u))
		}
		namespace := ""
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[0], -1) {
			name := m[1]
			if strings.HasPrefix(name, ".") {
				name = namespace + name
			} else if strings.HasPrefix(name, "nvidia.gpu.") {
				namespace = "nvidia.gpu"
			} else {
				namespace = "hw"
			}
			if b := braces.FindStringSubmatch(name); b != nil {
				for _, part := range strings.Split(b[2], ",") {
					rows[b[1]+strings.TrimSpace(part)+b[3]] = units
				}
				continue
			}
			rows[name] = units
		}
	}
	return rows
}

// The project README's metric table names every metric of metadata.yaml,
// and nothing else, each with its unit in the row's unit column.
func TestProjectREADMEMetricTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	var md struct {
		Metrics map[string]struct {
			Unit string `yaml:"unit"`
		} `yaml:"metrics"`
	}
	mb, err := os.ReadFile("metadata.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(mb, &md))
	rows := readmeMetricRows(t, string(b))
	require.Greater(t, len(rows), 40)
	for name, units := range rows {
		m, ok := md.Metrics[name]
		if assert.True(t, ok, "README's metric table names %s, which metadata.yaml does not have", name) {
			assert.Contains(t, units, m.Unit, "README's metric table: the unit of %s", name)
		}
	}
	for name := range md.Metrics {
		assert.Contains(t, rows, name, "README's metric table has no row for %s (metadata.yaml)", name)
	}

	// The table's shorthands, on a row of the old text: .remap.pending
	// after nvidia.gpu.memory.remapped_rows is nvidia.gpu.remap.pending.
	assert.Equal(t, map[string][]string{
		"nvidia.gpu.memory.remapped_rows": {""}, "nvidia.gpu.remap.pending": {""},
		"nvidia.gpu.mig.memory.usage": {"By", "1"}, "nvidia.gpu.mig.memory.limit": {"By", "1"},
	}, readmeMetricRows(t, "\n## Metrics\n"+
		"| `nvidia.gpu.memory.remapped_rows`, `.remap.pending` | memory repair state | |\n"+
		"| `nvidia.gpu.mig.memory.{usage, limit}` | per MIG device | By, 1 |\n"))
}

// The project README's "Bad settings fail validation naming the field"
// names every field the receiver's validation names (the fields its
// errors start with, in the sources that validate the configuration).
func TestProjectREADMENamesEveryValidatedField(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)\n- Bad settings fail validation naming the field: (.*?)\n- `).FindSubmatch(b)
	require.NotNil(t, m, "README lists the fields validation names")
	list := string(m[1])
	errStart := regexp.MustCompile(`(?:Errorf|errors\.New)\("([a-z_.\[\]%d]+): `)
	prefixed := regexp.MustCompile(`confpath\.Prefixed\("([a-z_.]+)\."`)
	found := 0
	for _, f := range []string{"config.go", "complement.go"} {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		var fields []string
		for _, fm := range errStart.FindAllSubmatch(src, -1) {
			fields = append(fields, strings.ReplaceAll(string(fm[1]), "[%d]", "[i]"))
		}
		for _, pm := range prefixed.FindAllSubmatch(src, -1) {
			fields = append(fields, string(pm[1])+".*")
		}
		for _, field := range fields {
			found++
			assert.Contains(t, list, "`"+field+"`", "%s validates %s: the README's list names it", f, field)
		}
	}
	assert.Greater(t, found, 10)
}
