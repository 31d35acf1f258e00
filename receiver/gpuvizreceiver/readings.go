package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// reading is one NVML call (or a small fixed group) and the metrics it feeds.
// Readings fail, or turn out unsupported, one at a time: each is skipped on
// its own and never takes down its neighbours.
type reading uint8

const (
	readUtilization reading = iota
	readEncoder
	readDecoder
	readMemory
	readPower
	readEnergy
	readTemperature
	readClockGraphics
	readClockSM
	readClockMemory
	readPowerLimit
	readPerformanceState
	readFanSpeed
	readingCount
)

type readingSpec struct {
	name string
	// enabled says whether any metric the reading feeds is enabled; when none
	// is, the NVML call is not made.
	enabled func(m *metadata.MetricsConfig) bool
	// read makes the call and records its data points.
	read func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return
}

var readings = [readingCount]readingSpec{
	readUtilization: {
		name: "utilization",
		enabled: func(m *metadata.MetricsConfig) bool {
			return m.HwGpuUtilization.Enabled || m.NvidiaGpuMemoryControllerUtilization.Enabled
		},
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			u, ret := g.dev.GetUtilizationRates()
			if ret == nvml.SUCCESS {
				s.mb.RecordHwGpuUtilizationDataPoint(ts, percent(u.Gpu), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwGpuTaskGeneral)
				s.mb.RecordNvidiaGpuMemoryControllerUtilizationDataPoint(ts, percent(u.Memory), g.id, g.name, g.vendor, g.model, g.driver)
			}
			return ret
		},
	},
	readEncoder: {
		name:    "encoder utilization",
		enabled: func(m *metadata.MetricsConfig) bool { return m.HwGpuUtilization.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			u, _, ret := g.dev.GetEncoderUtilization()
			if ret == nvml.SUCCESS {
				s.mb.RecordHwGpuUtilizationDataPoint(ts, percent(u), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwGpuTaskEncoder)
			}
			return ret
		},
	},
	readDecoder: {
		name:    "decoder utilization",
		enabled: func(m *metadata.MetricsConfig) bool { return m.HwGpuUtilization.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			u, _, ret := g.dev.GetDecoderUtilization()
			if ret == nvml.SUCCESS {
				s.mb.RecordHwGpuUtilizationDataPoint(ts, percent(u), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwGpuTaskDecoder)
			}
			return ret
		},
	},
	readMemory: {
		name: "memory",
		enabled: func(m *metadata.MetricsConfig) bool {
			return m.HwGpuMemoryUsage.Enabled || m.HwGpuMemoryLimit.Enabled || m.HwGpuMemoryUtilization.Enabled
		},
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			used, total, ret := g.memory(s.syms.memoryInfoV2)
			if ret == nvml.SUCCESS {
				s.mb.RecordHwGpuMemoryUsageDataPoint(ts, int64(used), g.id, g.name, g.vendor, g.model, g.driver)
				s.mb.RecordHwGpuMemoryLimitDataPoint(ts, int64(total), g.id, g.name, g.vendor, g.model, g.driver)
				if total > 0 {
					s.mb.RecordHwGpuMemoryUtilizationDataPoint(ts, float64(used)/float64(total), g.id, g.name, g.vendor, g.model, g.driver)
				}
			}
			return ret
		},
	},
	readPower: {
		name:    "power",
		enabled: func(m *metadata.MetricsConfig) bool { return m.HwPower.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			mw, ret := g.dev.GetPowerUsage()
			if ret == nvml.SUCCESS {
				s.mb.RecordHwPowerDataPoint(ts, float64(mw)/1000, g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu)
			}
			return ret
		},
	},
	readEnergy: {
		name:    "energy",
		enabled: func(m *metadata.MetricsConfig) bool { return m.HwEnergy.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			mj, ret := g.dev.GetTotalEnergyConsumption()
			if ret == nvml.SUCCESS {
				s.mb.RecordHwEnergyDataPoint(ts, float64(mj)/1000, g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu)
			}
			return ret
		},
	},
	readTemperature: {
		name:    "temperature",
		enabled: func(m *metadata.MetricsConfig) bool { return m.HwTemperature.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			c, ret := g.dev.GetTemperature(nvml.TEMPERATURE_GPU)
			if ret == nvml.SUCCESS {
				s.mb.RecordHwTemperatureDataPoint(ts, float64(c), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu, metadata.AttributeHwSensorLocationGpu)
			}
			return ret
		},
	},
	readClockGraphics: clockReading("graphics clock", nvml.CLOCK_GRAPHICS, metadata.AttributeNvidiaGpuClockDomainGraphics),
	readClockSM:       clockReading("SM clock", nvml.CLOCK_SM, metadata.AttributeNvidiaGpuClockDomainSm),
	readClockMemory:   clockReading("memory clock", nvml.CLOCK_MEM, metadata.AttributeNvidiaGpuClockDomainMemory),
	readPowerLimit: {
		name:    "power limit",
		enabled: func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuPowerLimit.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			mw, ret := g.dev.GetEnforcedPowerLimit()
			if ret == nvml.SUCCESS {
				s.mb.RecordNvidiaGpuPowerLimitDataPoint(ts, float64(mw)/1000, g.id, g.name, g.vendor, g.model, g.driver)
			}
			return ret
		},
	},
	readPerformanceState: {
		name:    "performance state",
		enabled: func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuPerformanceState.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			p, ret := g.dev.GetPerformanceState()
			// PSTATE_UNKNOWN (32) is a non-answer, not a state.
			if ret == nvml.SUCCESS && p >= nvml.PSTATE_0 && p <= nvml.PSTATE_15 {
				s.mb.RecordNvidiaGpuPerformanceStateDataPoint(ts, int64(p), g.id, g.name, g.vendor, g.model, g.driver)
			}
			return ret
		},
	},
	readFanSpeed: {
		name:    "fan speed",
		enabled: func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuFanSpeed.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			pct, ret := g.dev.GetFanSpeed()
			if ret == nvml.SUCCESS {
				s.mb.RecordNvidiaGpuFanSpeedDataPoint(ts, percent(pct), g.id, g.name, g.vendor, g.model, g.driver)
			}
			return ret
		},
	},
}

func clockReading(name string, clock nvml.ClockType, domain metadata.AttributeNvidiaGpuClockDomain) readingSpec {
	return readingSpec{
		name:    name,
		enabled: func(m *metadata.MetricsConfig) bool { return m.NvidiaGpuClockFrequency.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			mhz, ret := g.dev.GetClockInfo(clock)
			if ret == nvml.SUCCESS {
				s.mb.RecordNvidiaGpuClockFrequencyDataPoint(ts, int64(mhz)*1_000_000, g.id, g.name, g.vendor, g.model, g.driver, domain)
			}
			return ret
		},
	}
}

func (r reading) String() string                         { return readings[r].name }
func (r reading) enabled(m *metadata.MetricsConfig) bool { return readings[r].enabled(m) }
func (r reading) read(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
	return readings[r].read(s, g, ts)
}

// percent turns NVML's whole percentages into the 0..1 ratios semantic
// conventions use.
func percent(p uint32) float64 { return float64(p) / 100 }

// memory returns the GPU's used and total memory. With the v2 call, memory
// the driver reserves for itself is not counted as used, which matches what
// nvidia-smi shows on recent drivers; v1 counts it.
func (g *gpu) memory(v2 bool) (used, total uint64, ret nvml.Return) {
	if v2 && !g.memoryV1 {
		m, ret := g.dev.GetMemoryInfo_v2()
		if ret != nvml.ERROR_NOT_SUPPORTED {
			return m.Used, m.Total, ret
		}
		g.memoryV1 = true
	}
	m, ret := g.dev.GetMemoryInfo()
	return m.Used, m.Total, ret
}
