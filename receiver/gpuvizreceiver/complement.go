package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"fmt"
	"slices"

	"go.opentelemetry.io/collector/confmap"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// Complement says which other exporter on the node the receiver
// complements.
type Complement string

const (
	// ComplementNone: the receiver reports everything it is configured to.
	ComplementNone Complement = ""
	// ComplementDCGM: dcgm-exporter runs on the node. The receiver leaves
	// GPM alone (GPM and DCGM's profiling fields use the same hardware
	// counters: one would take them from the other) and, by default, the
	// scrape-time readings dcgm-exporter's default counters already carry;
	// it adds what DCGM lacks: the driver's sub-second samples (read
	// because GPM is off), energy, power and throttle times at tick
	// resolution, processes, the pod allocation, health, NVLink and PCIe
	// byte counters.
	ComplementDCGM Complement = "dcgm"
)

// metricSwitch is one metric's enabled flag, by its configuration name.
type metricSwitch struct {
	name    string
	enabled func(*metadata.MetricsConfig) *bool
}

// gpmFed are the metrics read from GPM: never reported with
// complement: dcgm, and an error to enable explicitly alongside it.
var gpmFed = []metricSwitch{
	{"nvidia.gpu.sm.activity", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuSmActivity.Enabled }},
	{"nvidia.gpu.sm.occupancy", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuSmOccupancy.Enabled }},
	{"nvidia.gpu.tensor.activity", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuTensorActivity.Enabled }},
	{"nvidia.gpu.dram.activity", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuDramActivity.Enabled }},
	{"nvidia.gpu.pipe.activity", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuPipeActivity.Enabled }},
	{"nvidia.gpu.pcie.throughput", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuPcieThroughput.Enabled }},
	{"nvidia.gpu.nvlink.throughput", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuNvlinkThroughput.Enabled }},
	{"nvidia.gpu.mig.sm.activity", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuMigSmActivity.Enabled }},
	{"nvidia.gpu.mig.tensor.activity", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuMigTensorActivity.Enabled }},
	{"nvidia.gpu.mig.dram.activity", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuMigDramActivity.Enabled }},
	{"nvidia.gpu.gpm.status", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuGpmStatus.Enabled }},
}

// dcgmDuplicates are the receiver's scrape-time readings that
// dcgm-exporter's default counters carry too (DCGM_FI_DEV_GPU_UTIL,
// MEM_COPY_UTIL, POWER_USAGE, FB_USED / FB_FREE, GPU_TEMP, SM_CLOCK /
// MEM_CLOCK, PCIE_REPLAY_COUNTER, the remapped rows): off with
// complement: dcgm unless the configuration enables them.
var dcgmDuplicates = []metricSwitch{
	{"hw.gpu.utilization", func(m *metadata.MetricsConfig) *bool { return &m.HwGpuUtilization.Enabled }},
	{"nvidia.gpu.memory_controller.utilization", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuMemoryControllerUtilization.Enabled }},
	{"hw.power", func(m *metadata.MetricsConfig) *bool { return &m.HwPower.Enabled }},
	{"hw.gpu.memory.usage", func(m *metadata.MetricsConfig) *bool { return &m.HwGpuMemoryUsage.Enabled }},
	{"hw.gpu.memory.limit", func(m *metadata.MetricsConfig) *bool { return &m.HwGpuMemoryLimit.Enabled }},
	{"hw.temperature", func(m *metadata.MetricsConfig) *bool { return &m.HwTemperature.Enabled }},
	{"nvidia.gpu.clock.frequency", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuClockFrequency.Enabled }},
	{"nvidia.gpu.pcie.replays", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuPcieReplays.Enabled }},
	{"nvidia.gpu.memory.remapped_rows", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuMemoryRemappedRows.Enabled }},
	{"nvidia.gpu.memory.remap.failed", func(m *metadata.MetricsConfig) *bool { return &m.NvidiaGpuMemoryRemapFailed.Enabled }},
}

// Unmarshal reads the configuration and remembers which metrics it
// switches on or off itself, which complement: dcgm respects.
func (cfg *Config) Unmarshal(conf *confmap.Conf) error {
	if err := conf.Unmarshal(cfg); err != nil {
		return err
	}
	cfg.metricsSet = nil
	for _, list := range [][]metricSwitch{gpmFed, dcgmDuplicates} {
		for _, m := range list {
			if conf.IsSet("metrics::" + m.name + "::enabled") {
				cfg.metricsSet = append(cfg.metricsSet, m.name)
			}
		}
	}
	return nil
}

// validateComplement checks complement and what it conflicts with.
func (cfg *Config) validateComplement() []error {
	switch cfg.Complement {
	case ComplementNone:
		return nil
	case ComplementDCGM:
	default:
		return []error{fmt.Errorf("complement: %q is not a source the receiver complements: use dcgm, or leave it empty", cfg.Complement)}
	}
	var errs []error
	for _, m := range gpmFed {
		if *m.enabled(&cfg.Metrics) && slices.Contains(cfg.metricsSet, m.name) {
			errs = append(errs, fmt.Errorf("metrics::%s: is read from GPM, which complement: dcgm leaves to DCGM's profiling fields (they share the hardware counters): disable it or drop complement", m.name))
		}
	}
	return errs
}

// complemented returns the configuration the receiver runs with: cfg
// itself, or with complement: dcgm a copy with the GPM metrics off and
// DCGM's duplicates off where the configuration did not set them.
func (cfg *Config) complemented() *Config {
	if cfg.Complement != ComplementDCGM {
		return cfg
	}
	c := *cfg
	for _, m := range gpmFed {
		*m.enabled(&c.Metrics) = false
	}
	for _, m := range dcgmDuplicates {
		if !slices.Contains(cfg.metricsSet, m.name) {
			*m.enabled(&c.Metrics) = false
		}
	}
	return &c
}
