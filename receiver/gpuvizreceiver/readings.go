package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"slices"

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
	readTemperature
	readClockGraphics
	readClockSM
	readClockMemory
	readPowerLimit
	readPerformanceState
	readFanSpeed
	readThrottleReasons
	readFieldValues
	readPCIeLink
	readPCIeThroughput
	readMIG // before the processes, which take their MIG device from its layout
	readProcesses
	readingCount
)

type readingSpec struct {
	name string
	// enabled says whether any metric the reading feeds is enabled (and the
	// feature, where it has a switch); when none is, the NVML call is not made.
	enabled func(c *Config) bool
	// read makes the call and records its data points.
	read func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return
}

var readings = [readingCount]readingSpec{
	readUtilization: {
		name: "utilization",
		enabled: func(c *Config) bool {
			return c.Metrics.HwGpuUtilization.Enabled || c.Metrics.NvidiaGpuMemoryControllerUtilization.Enabled
		},
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			u, ret := g.dev.GetUtilizationRates()
			if ret == nvml.SUCCESS {
				g.mb.RecordHwGpuUtilizationDataPoint(ts, percent(u.Gpu), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwGpuTaskGeneral)
				g.mb.RecordNvidiaGpuMemoryControllerUtilizationDataPoint(ts, percent(u.Memory), g.id, g.name)
			}
			return ret
		},
	},
	readEncoder: {
		name:    "encoder utilization",
		enabled: func(c *Config) bool { return c.Metrics.HwGpuUtilization.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			u, _, ret := g.dev.GetEncoderUtilization()
			if ret == nvml.SUCCESS {
				g.mb.RecordHwGpuUtilizationDataPoint(ts, percent(u), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwGpuTaskEncoder)
			}
			return ret
		},
	},
	readDecoder: {
		name:    "decoder utilization",
		enabled: func(c *Config) bool { return c.Metrics.HwGpuUtilization.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			u, _, ret := g.dev.GetDecoderUtilization()
			if ret == nvml.SUCCESS {
				g.mb.RecordHwGpuUtilizationDataPoint(ts, percent(u), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwGpuTaskDecoder)
			}
			return ret
		},
	},
	readMemory: {
		name: "memory",
		enabled: func(c *Config) bool {
			return c.Metrics.HwGpuMemoryUsage.Enabled || c.Metrics.HwGpuMemoryLimit.Enabled || c.Metrics.HwGpuMemoryUtilization.Enabled
		},
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			used, total, ret := g.memory(s.syms.memoryInfoV2)
			if ret == nvml.SUCCESS {
				g.mb.RecordHwGpuMemoryUsageDataPoint(ts, int64(used), g.id, g.name, g.vendor, g.model, g.driver)
				g.mb.RecordHwGpuMemoryLimitDataPoint(ts, int64(total), g.id, g.name, g.vendor, g.model, g.driver)
				if total > 0 {
					g.mb.RecordHwGpuMemoryUtilizationDataPoint(ts, float64(used)/float64(total), g.id, g.name, g.vendor, g.model, g.driver)
				}
			}
			return ret
		},
	},

	readTemperature: {
		name:    "temperature",
		enabled: func(c *Config) bool { return c.Metrics.HwTemperature.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			c, ret := g.dev.GetTemperature(nvml.TEMPERATURE_GPU)
			if ret == nvml.SUCCESS {
				g.mb.RecordHwTemperatureDataPoint(ts, float64(c), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu, metadata.AttributeHwSensorLocationGpu)
			}
			return ret
		},
	},
	readThrottleReasons: {
		name:    "clock event reasons",
		enabled: func(c *Config) bool { return c.Metrics.NvidiaGpuThrottleActive.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			var mask uint64
			ret := nvml.ERROR_NOT_SUPPORTED
			switch {
			case s.syms.clocksEventReasons:
				mask, ret = g.dev.GetCurrentClocksEventReasons()
			case s.syms.clocksThrottleReasons:
				mask, ret = g.dev.GetCurrentClocksThrottleReasons()
			}
			if ret == nvml.SUCCESS {
				for _, r := range throttleReasons {
					g.mb.RecordNvidiaGpuThrottleActiveDataPoint(ts, boolInt(mask&r.bit != 0), g.id, g.name, r.reason)
				}
			}
			return ret
		},
	},
	readFieldValues: {
		name: "field values",
		enabled: func(c *Config) bool {
			return slices.ContainsFunc(fieldSpecs, func(f fieldSpec) bool { return f.enabled(&c.Metrics) })
		},
		read: (*gpuScraper).readFields,
	},
	readPCIeLink: {
		name: "PCIe link",
		enabled: func(c *Config) bool {
			return c.Metrics.NvidiaGpuPcieLinkGeneration.Enabled || c.Metrics.NvidiaGpuPcieLinkWidth.Enabled
		},
		read: (*gpuScraper).readPCIeLink,
	},
	readPCIeThroughput: {
		name:    "PCIe throughput",
		enabled: func(c *Config) bool { return c.Metrics.HwGpuIo.Enabled },
		read:    (*gpuScraper).readPCIeThroughput,
	},

	readProcesses: {
		name:    "processes",
		enabled: processesRead,
		read:    (*gpuScraper).readProcesses,
	},
	readMIG: {
		name:    "MIG devices",
		enabled: func(c *Config) bool { return migEnabled(&c.Metrics) },
		read:    (*gpuScraper).readMIG,
	},
	readClockGraphics: clockReading("graphics clock", nvml.CLOCK_GRAPHICS, metadata.AttributeNvidiaGpuClockDomainGraphics),
	readClockSM:       clockReading("SM clock", nvml.CLOCK_SM, metadata.AttributeNvidiaGpuClockDomainSm),
	readClockMemory:   clockReading("memory clock", nvml.CLOCK_MEM, metadata.AttributeNvidiaGpuClockDomainMemory),
	readPowerLimit: {
		name:    "power limit",
		enabled: func(c *Config) bool { return c.Metrics.NvidiaGpuPowerLimit.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			mw, ret := g.dev.GetEnforcedPowerLimit()
			if ret == nvml.SUCCESS {
				g.mb.RecordNvidiaGpuPowerLimitDataPoint(ts, float64(mw)/1000, g.id, g.name)
			}
			return ret
		},
	},
	readPerformanceState: {
		name:    "performance state",
		enabled: func(c *Config) bool { return c.Metrics.NvidiaGpuPerformanceState.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			p, ret := g.dev.GetPerformanceState()
			// PSTATE_UNKNOWN (32) is a non-answer, not a state.
			if ret == nvml.SUCCESS && p >= nvml.PSTATE_0 && p <= nvml.PSTATE_15 {
				g.mb.RecordNvidiaGpuPerformanceStateDataPoint(ts, int64(p), g.id, g.name)
			}
			return ret
		},
	},
	readFanSpeed: {
		name:    "fan speed",
		enabled: func(c *Config) bool { return c.Metrics.NvidiaGpuFanSpeed.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			pct, ret := g.dev.GetFanSpeed()
			if ret == nvml.SUCCESS {
				g.mb.RecordNvidiaGpuFanSpeedDataPoint(ts, percent(pct), g.id, g.name)
			}
			return ret
		},
	},
}

func clockReading(name string, clock nvml.ClockType, domain metadata.AttributeNvidiaGpuClockDomain) readingSpec {
	return readingSpec{
		name:    name,
		enabled: func(c *Config) bool { return c.Metrics.NvidiaGpuClockFrequency.Enabled },
		read: func(s *gpuScraper, g *gpu, ts pcommon.Timestamp) nvml.Return {
			mhz, ret := g.dev.GetClockInfo(clock)
			if ret == nvml.SUCCESS {
				g.mb.RecordNvidiaGpuClockFrequencyDataPoint(ts, int64(mhz)*1_000_000, g.id, g.name, domain)
			}
			return ret
		},
	}
}

func (r reading) String() string         { return readings[r].name }
func (r reading) enabled(c *Config) bool { return readings[r].enabled(c) }
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

// throttleReasons maps NVML's clock event reason bits to attribute values.
var throttleReasons = [...]struct {
	bit    uint64
	reason metadata.AttributeNvidiaGpuThrottleReason
}{
	{nvml.ClocksEventReasonGpuIdle, metadata.AttributeNvidiaGpuThrottleReasonGpuIdle},
	{nvml.ClocksEventReasonApplicationsClocksSetting, metadata.AttributeNvidiaGpuThrottleReasonApplicationsClocksSetting},
	{nvml.ClocksEventReasonSwPowerCap, metadata.AttributeNvidiaGpuThrottleReasonSwPowerCap},
	{nvml.ClocksThrottleReasonHwSlowdown, metadata.AttributeNvidiaGpuThrottleReasonHwSlowdown},
	{nvml.ClocksEventReasonSyncBoost, metadata.AttributeNvidiaGpuThrottleReasonSyncBoost},
	{nvml.ClocksEventReasonSwThermalSlowdown, metadata.AttributeNvidiaGpuThrottleReasonSwThermalSlowdown},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, metadata.AttributeNvidiaGpuThrottleReasonHwThermalSlowdown},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, metadata.AttributeNvidiaGpuThrottleReasonHwPowerBrake},
	{nvml.ClocksEventReasonDisplayClockSetting, metadata.AttributeNvidiaGpuThrottleReasonDisplayClockSetting},
}

// readPCIeLink reads the link's current generation and width every scrape
// (a link can train down under errors or power saving) and its maximum once.
func (s *gpuScraper) readPCIeLink(g *gpu, ts pcommon.Timestamp) nvml.Return {
	if g.pcieMax[0] == 0 {
		gen, ret := g.dev.GetMaxPcieLinkGeneration()
		if ret != nvml.SUCCESS {
			return ret
		}
		width, ret := g.dev.GetMaxPcieLinkWidth()
		if ret != nvml.SUCCESS {
			return ret
		}
		g.pcieMax = [2]int{gen, width}
	}
	gen, ret := g.dev.GetCurrPcieLinkGeneration()
	if ret != nvml.SUCCESS {
		return ret
	}
	width, ret := g.dev.GetCurrPcieLinkWidth()
	if ret != nvml.SUCCESS {
		return ret
	}
	id, name := g.id, g.name
	g.mb.RecordNvidiaGpuPcieLinkGenerationDataPoint(ts, int64(gen), id, name, metadata.AttributeNvidiaGpuPcieLinkKindCurrent)
	g.mb.RecordNvidiaGpuPcieLinkGenerationDataPoint(ts, int64(g.pcieMax[0]), id, name, metadata.AttributeNvidiaGpuPcieLinkKindMax)
	g.mb.RecordNvidiaGpuPcieLinkWidthDataPoint(ts, int64(width), id, name, metadata.AttributeNvidiaGpuPcieLinkKindCurrent)
	g.mb.RecordNvidiaGpuPcieLinkWidthDataPoint(ts, int64(g.pcieMax[1]), id, name, metadata.AttributeNvidiaGpuPcieLinkKindMax)
	return nvml.SUCCESS
}

// readPCIeThroughput is hw.gpu.io's fallback for GPUs without the PCIe
// byte counters: the throughput readings (KB/s over 20 ms) integrated over
// the time since the previous scrape. It is an estimate, noisier the
// longer the interval; GPUs with the counters never make this call.
func (s *gpuScraper) readPCIeThroughput(g *gpu, ts pcommon.Timestamp) nvml.Return {
	c := &g.counters
	if !c.pcieFromThroughput {
		return nvml.SUCCESS
	}
	rxKBps, ret := g.dev.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES)
	if ret != nvml.SUCCESS {
		return ret
	}
	txKBps, ret := g.dev.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES)
	if ret != nvml.SUCCESS {
		return ret
	}
	var seconds float64
	if c.pcieLastRead != 0 {
		seconds = float64(ts-c.pcieLastRead) / 1e9
	}
	c.pcieLastRead = ts
	rxTotal := c.pcie[rx].add(uint64(float64(rxKBps) * 1000 * seconds))
	txTotal := c.pcie[tx].add(uint64(float64(txKBps) * 1000 * seconds))
	g.mb.RecordHwGpuIoDataPoint(ts, int64(rxTotal), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeNetworkIoDirectionReceive)
	g.mb.RecordHwGpuIoDataPoint(ts, int64(txTotal), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeNetworkIoDirectionTransmit)
	return nvml.SUCCESS
}
