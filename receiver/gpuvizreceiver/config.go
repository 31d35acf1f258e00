package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/scraper/scraperhelper"

	"github.com/gpuviz/gpuviz/internal/confpath"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/podresources"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// Backend says where the receiver reads GPUs from.
type Backend string

const (
	// BackendNVML reads real GPUs through the NVIDIA driver's NVML library.
	BackendNVML Backend = "nvml"
	// BackendSimulated reads the simulated servers of internal/nvmlsim.
	BackendSimulated Backend = "simulated"
	// BackendAuto reads NVML when it loads, else the simulation, with a warning.
	BackendAuto Backend = "auto"
)

// Config is the gpuviz receiver's configuration.
type Config struct {
	scraperhelper.ControllerConfig `mapstructure:",squash"`
	metadata.MetricsBuilderConfig  `mapstructure:",squash"`

	// Backend is nvml (the default, so that production never silently
	// simulates), simulated, or auto.
	Backend Backend `mapstructure:"backend"`
	// NVML configures the nvml backend.
	NVML NVMLConfig `mapstructure:"nvml"`
	// Simulated configures the simulated backend (and auto's fallback).
	Simulated SimulatedConfig `mapstructure:"simulated"`
	// Devices restricts the receiver to these GPUs, by NVML index or UUID.
	// Empty means every GPU.
	Devices []DeviceRef `mapstructure:"devices"`
	// Samples configures the driver's sub-second sample buffers.
	Samples SamplesConfig `mapstructure:"samples"`
	// Processes configures per-process GPU use.
	Processes ProcessesConfig `mapstructure:"processes"`
	// XidEvents configures the watch for critical Xid errors.
	XidEvents XidEventsConfig `mapstructure:"xid_events"`
	// Kubernetes configures what the receiver learns from the kubelet.
	Kubernetes KubernetesConfig `mapstructure:"kubernetes"`
	// Slurm configures what the receiver learns of Slurm jobs (slurm.go).
	Slurm SlurmConfig `mapstructure:"slurm"`
	// Complement names an exporter running beside the receiver whose data
	// it adds to rather than repeats: "" (none) or dcgm (complement.go).
	Complement Complement `mapstructure:"complement"`

	// metricsSet lists the metrics of gpmFed and dcgmDuplicates whose
	// enabled the configuration sets itself (Unmarshal).
	metricsSet []string

	_ struct{}
}

// SamplesConfig configures sub-second data: the receiver's own sampling
// clock and the driver's sample buffers.
type SamplesConfig struct {
	// Enabled runs the sampling clock: every Interval, per GPU, a GPM
	// sample, the energy counter, instantaneous power and the cumulative
	// throttle times, each point with its own timestamp; and every
	// FlushInterval the driver's sample buffers (GPU and memory-controller
	// busy time, power, SM clock). Off, those are read once per scrape.
	Enabled bool `mapstructure:"enabled"`
	// Interval is the sampling clock's tick.
	Interval time.Duration `mapstructure:"interval"`
	// FlushInterval is how often what the ticks read enters the pipeline:
	// a downstream gpuviz processor releases a span once the GPU data
	// covering its end has arrived, so this bounds how long spans are held.
	FlushInterval time.Duration `mapstructure:"flush_interval"`
	// MaxPendingTicks bounds the ticks read but not yet handed on, when
	// the pipeline is slower than the clock. Beyond it ticks are skipped
	// (counted): cumulative readings lose nothing, the next GPM interval
	// covers the gap.
	MaxPendingTicks int `mapstructure:"max_pending_ticks"`

	_ struct{}
}

// gpmMinInterval is the shortest span between two GPM samples NVML
// computes metrics over.
const gpmMinInterval = 100 * time.Millisecond

// maxPendingTicks caps samples.max_pending_ticks: about 3 KiB of points a
// pending tick per GPU (docs/benchmarks.md), so at most ~24 MiB for 8 GPUs.
const maxPendingTicks = 1000

// ProcessesConfig configures per-process GPU use.
type ProcessesConfig struct {
	// Enabled reads the compute processes of each GPU.
	Enabled bool `mapstructure:"enabled"`
	// Top bounds the processes reported per GPU, the largest by memory first:
	// series cardinality stays bounded however many processes run.
	Top int `mapstructure:"top"`
	// CommandLine adds process.command_line, at most 2 KiB of it. Off by
	// default: command lines can hold secrets.
	CommandLine bool `mapstructure:"command_line"`

	_ struct{}
}

// XidEventsConfig configures the watch for critical Xid errors.
type XidEventsConfig struct {
	// Enabled registers for the driver's critical Xid events, counts them by
	// code and logs each with its meaning.
	Enabled bool `mapstructure:"enabled"`

	_ struct{}
}

// KubernetesConfig configures what the receiver learns from the kubelet.
type KubernetesConfig struct {
	// PodResources reads which pod and container each GPU is allocated to.
	PodResources PodResourcesConfig `mapstructure:"pod_resources"`

	_ struct{}
}

// PodResourcesConfig configures the kubelet's PodResources API.
type PodResourcesConfig struct {
	// Enabled lists the allocations on its own interval. Where the socket
	// does not exist (not on Kubernetes, not mounted) it logs that once.
	Enabled bool `mapstructure:"enabled"`
	// Socket is the kubelet's PodResources socket.
	Socket string `mapstructure:"socket"`
	// Interval is how often allocations are listed: a new allocation shows
	// within it.
	Interval time.Duration `mapstructure:"interval"`
	// Timeout bounds one List call.
	Timeout time.Duration `mapstructure:"timeout"`

	_ struct{}
}

// SlurmConfig configures what the receiver learns of the Slurm jobs using
// the GPUs.
type SlurmConfig struct {
	// Environ reads the Slurm job of each GPU process from its
	// /proc/<pid>/environ, once per process: SLURM_JOB_ID,
	// SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID and SLURM_STEP_ID, and nothing
	// else (an environment holds secrets; the rest is never kept). On by
	// default: outside Slurm it finds nothing and costs one small read per
	// new GPU process. It needs the host PID namespace and the right to read
	// other users' environments (root, or CAP_SYS_PTRACE); without it the
	// slurm.* attributes stay empty, and that is logged once.
	Environ bool `mapstructure:"environ"`
	// JobMappingDir is a directory of per-GPU job files in dcgm-exporter's
	// --hpc-job-mapping-dir format, which a Slurm prolog and epilog keep
	// (docs/slurm.md): a file per GPU named by its NVML index ("0", "1"),
	// or by index and GPU instance ("2.0") for a MIG instance, each line a
	// job id. Re-read every scrape. Empty (the default: Slurm has no
	// standard place for it) reads none.
	JobMappingDir string `mapstructure:"job_mapping_dir"`

	_ struct{}
}

func (c PodResourcesConfig) watcher() podresources.Config {
	// The receiver reports the allocation now; the processor keeps the
	// history it matches spans against, from these series.
	return podresources.Config{Socket: c.Socket, Interval: c.Interval, Timeout: c.Timeout, Horizon: c.Interval, MaxVersions: 2}
}

// maxProcessesPerGPU caps processes.top: a GPU rarely runs more than a
// handful of compute processes, and each one costs a few series.
const maxProcessesPerGPU = 64

// NVMLConfig configures the nvml backend.
type NVMLConfig struct {
	// LibraryPath is the NVML shared library to load; empty means
	// libnvidia-ml.so.1 from the dynamic loader's search path.
	LibraryPath string `mapstructure:"library_path"`

	_ struct{}
}

// SimulatedConfig configures the simulated backend.
type SimulatedConfig struct {
	// Model is the simulated GPU: a100, h100, h200 or b200.
	Model string `mapstructure:"model"`
	// GPUs is the number of GPUs in the simulated server.
	GPUs int `mapstructure:"gpus"`
	// Seed drives the simulated workload: the same seed gives the same
	// workload at the same wall-clock time.
	Seed uint64 `mapstructure:"seed"`
	// MIG puts every simulated GPU in MIG mode, as two 3-slice instances.
	MIG bool `mapstructure:"mig"`
	// Scenario is the workload the simulated GPUs serve: a batching
	// scenario (steady, bursty, long_context, power_capped, host_starved,
	// tensor_parallel, mixed) or sequential, one request at a time per GPU.
	Scenario string `mapstructure:"scenario"`
	// Faults are injected into the simulated GPUs, for testing what the
	// pipeline does when GPUs fail (docs/reliability.md). Off (empty) by
	// default; when on, it says so in a warning and on every data point
	// (gpuviz.simulated.faults).
	Faults []nvmlsim.Fault `mapstructure:"faults"`

	_ struct{}
}

// DeviceRef names a GPU by NVML index ("3", or 3 in YAML) or by UUID
// ("GPU-...").
type DeviceRef string

// UnmarshalScalar lets YAML integers name GPUs by index.
func (d *DeviceRef) UnmarshalScalar(v confmap.ScalarValue) error {
	switch raw := v.GetRaw().(type) {
	case int:
		*d = DeviceRef(strconv.Itoa(raw))
	case string:
		*d = DeviceRef(raw)
	default:
		return fmt.Errorf("a device is a GPU index or UUID, not %v", raw)
	}
	return nil
}

// index returns the NVML index d names, or false when d is a UUID.
func (d DeviceRef) index() (int, bool) {
	i, err := strconv.Atoi(string(d))
	return i, err == nil
}

// controllerConfig is the scrape controller's configuration with the
// scrape timeout set: scraperhelper's default is none, and a scrape that
// waited on a hung NVML call would hold every GPU's data (scraper.go).
// timeout 0 means half the collection interval.
func (cfg *Config) controllerConfig() *scraperhelper.ControllerConfig {
	cc := cfg.ControllerConfig
	if cc.Timeout == 0 {
		cc.Timeout = cc.CollectionInterval / 2
	}
	return &cc
}

// Validate checks the configuration before the receiver starts.
func (cfg *Config) Validate() error {
	var errs []error
	switch cfg.Backend {
	case BackendNVML, BackendSimulated, BackendAuto:
	default:
		errs = append(errs, fmt.Errorf("backend: %q is not a backend: use nvml, simulated or auto", cfg.Backend))
	}
	if cfg.Backend != BackendNVML {
		_, modelErr := nvmlsim.LookupModel(cfg.Simulated.Model)
		if modelErr != nil {
			errs = append(errs, fmt.Errorf("simulated.model: %w", modelErr))
		}
		if cfg.Simulated.GPUs < 1 || cfg.Simulated.GPUs > nvmlsim.MaxGPUs {
			errs = append(errs, fmt.Errorf("simulated.gpus: %d is out of range: a simulated server has 1 to %d GPUs", cfg.Simulated.GPUs, nvmlsim.MaxGPUs))
		} else if modelErr == nil && !strings.EqualFold(cfg.Simulated.Scenario, nvmlsim.ScenarioSequential) {
			// Cheap: the engines are laid out, nothing is simulated yet.
			if _, err := nvmlsim.NewNode(cfg.Simulated.Model, cfg.Simulated.Scenario, cfg.Simulated.GPUs, cfg.Simulated.Seed); err != nil {
				errs = append(errs, fmt.Errorf("simulated.scenario: %w", err))
			}
		}
		for i := range cfg.Simulated.Faults {
			err := cfg.Simulated.Faults[i].Validate(cfg.Simulated.GPUs)
			errs = append(errs, confpath.Prefixed(fmt.Sprintf("simulated.faults[%d].", i), err)...)
		}
		if !cfg.ResourceAttributes.GpuvizBackend.Enabled {
			errs = append(errs, fmt.Errorf("resource_attributes::gpuviz.backend::enabled: false would leave simulated data unmarked (backend %s may simulate): keep it on", cfg.Backend))
		}
	}
	if cfg.InitialDelay < 0 {
		// scraperhelper does not check it; a negative delay would start at once, as 0 does.
		errs = append(errs, fmt.Errorf("initial_delay: %v is negative: use 0 to scrape at start", cfg.InitialDelay))
	}
	if cfg.CollectionInterval > 0 && cfg.Timeout > cfg.CollectionInterval {
		errs = append(errs, fmt.Errorf("timeout: %v is longer than collection_interval (%v): a scrape must end before the next begins", cfg.Timeout, cfg.CollectionInterval))
	}
	if cfg.Samples.Enabled {
		errs = append(errs, cfg.Samples.validate(cfg.CollectionInterval)...)
	}
	if cfg.Processes.Enabled && (cfg.Processes.Top < 1 || cfg.Processes.Top > maxProcessesPerGPU) {
		errs = append(errs, fmt.Errorf("processes.top: %d is out of range: report 1 to %d processes per GPU", cfg.Processes.Top, maxProcessesPerGPU))
	}
	if pr := cfg.Kubernetes.PodResources; pr.Enabled {
		errs = append(errs, confpath.Prefixed("kubernetes.pod_resources.", pr.watcher().Validate())...)
	}
	if d := cfg.Slurm.JobMappingDir; d != "" && !filepath.IsAbs(d) {
		errs = append(errs, fmt.Errorf("slurm.job_mapping_dir: %q is not an absolute path: the collector's working directory is no place for it", d))
	}
	errs = append(errs, cfg.validateComplement()...)
	seen := map[DeviceRef]bool{}
	for i, d := range cfg.Devices {
		if idx, ok := d.index(); ok {
			if idx < 0 {
				errs = append(errs, fmt.Errorf("devices[%d]: %q is not a GPU index: indexes start at 0", i, d))
			}
		} else if strings.HasPrefix(string(d), "MIG-") {
			errs = append(errs, fmt.Errorf("devices[%d]: %q is a MIG device: name its physical GPU instead", i, d))
		} else if !strings.HasPrefix(string(d), "GPU-") {
			errs = append(errs, fmt.Errorf("devices[%d]: %q is neither a GPU index (0, 1, ...) nor a GPU UUID (GPU-... as nvidia-smi -L prints)", i, d))
		}
		if seen[d] {
			errs = append(errs, fmt.Errorf("devices[%d]: %q is listed twice", i, d))
		}
		seen[d] = true
	}
	return errors.Join(errs...)
}

func (c *SamplesConfig) validate(collection time.Duration) []error {
	var errs []error
	if c.Interval < gpmMinInterval {
		errs = append(errs, fmt.Errorf("samples.interval: %v is too short: GPM needs at least %v between samples", c.Interval, gpmMinInterval))
	} else if collection > 0 && c.Interval > collection {
		errs = append(errs, fmt.Errorf("samples.interval: %v is longer than collection_interval (%v): the clock is for sub-interval data", c.Interval, collection))
	}
	if c.FlushInterval < c.Interval {
		errs = append(errs, fmt.Errorf("samples.flush_interval: %v is shorter than samples.interval (%v): a flush would carry no tick", c.FlushInterval, c.Interval))
	}
	if c.MaxPendingTicks < 1 || c.MaxPendingTicks > maxPendingTicks {
		errs = append(errs, fmt.Errorf("samples.max_pending_ticks: %d is out of range: 1 to %d", c.MaxPendingTicks, maxPendingTicks))
	} else if c.Interval > 0 && c.FlushInterval/c.Interval >= time.Duration(c.MaxPendingTicks) {
		errs = append(errs, fmt.Errorf("samples.max_pending_ticks: %d ticks do not last one flush_interval (%v at %v): every flush would skip ticks", c.MaxPendingTicks, c.FlushInterval, c.Interval))
	}
	return errs
}
