package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuviz/gpuviz/internal/gpucheck"
	"github.com/gpuviz/gpuviz/internal/nvmlcalls"
)

// tickFields are the field values the receiver's sampling clock reads per
// GPU per tick, in one GetFieldValues call: energy, instant power and the
// cumulative throttle times.
var tickFields = []uint32{
	nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION,                    // 83
	nvml.FI_DEV_POWER_INSTANT,                               // 186
	nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,            // 74
	nvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,              // 76
	nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,       // 269
	nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,       // 270
	nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, // 271
}

// sampleTypes are the driver sample buffers the receiver drains once per
// flush.
var sampleTypes = []struct {
	name string
	typ  nvml.SamplingType
}{
	{"GPU_UTILIZATION_SAMPLES", nvml.GPU_UTILIZATION_SAMPLES},
	{"MEMORY_UTILIZATION_SAMPLES", nvml.MEMORY_UTILIZATION_SAMPLES},
	{"TOTAL_POWER_SAMPLES", nvml.TOTAL_POWER_SAMPLES},
	{"PROCESSOR_CLK_SAMPLES", nvml.PROCESSOR_CLK_SAMPLES},
}

// gpmMinInterval: NVML computes GPM metrics only between samples at least
// this far apart.
const gpmMinInterval = 100 * time.Millisecond

// symbols says which optional entry points the loaded driver has. Calling
// one it lacks kills the process (symbol lookup error), so nothing below is
// called unless its symbol was found.
type symbols struct {
	fieldValues, gpm, samples, totalEnergy, powerUsage bool
}

func probe(lib nvml.Interface) symbols {
	has := func(names ...string) bool { return nvmlcalls.HasSymbols(lib, names...) }
	return symbols{
		fieldValues: has("nvmlDeviceGetFieldValues"),
		gpm:         has("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet", "nvmlGpmMetricsGet"),
		samples:     has("nvmlDeviceGetSamples"),
		totalEnergy: has("nvmlDeviceGetTotalEnergyConsumption"),
		powerUsage:  has("nvmlDeviceGetPowerUsage"),
	}
}

// timeCalls makes n calls of f and returns their wall times in µs and how
// many returned an error.
func timeCalls(n int, f func() nvml.Return) ([]float64, int) {
	us := make([]float64, 0, n)
	errs := 0
	for i := 0; i < n; i++ {
		t := time.Now()
		ret := f()
		us = append(us, float64(time.Since(t).Nanoseconds())/1e3)
		if ret != nvml.SUCCESS {
			errs++
		}
	}
	return us, errs
}

// measureLatency measures, per GPU, each NVML call of the receiver's tick
// and flush, n calls each.
func measureLatency(libraryPath string, n int) ([]gpucheck.GPULatency, error) {
	var opts []nvml.LibraryOption
	if libraryPath != "" {
		opts = append(opts, nvml.WithLibraryPath(libraryPath))
	}
	lib := nvml.New(opts...)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML did not start: %v (no NVIDIA driver, or no permission to its devices?)", ret)
	}
	defer lib.Shutdown()
	syms := probe(lib)
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %v", ret)
	}
	if count == 0 {
		return nil, errors.New("NVML sees no GPU")
	}
	var out []gpucheck.GPULatency
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: %v", i, ret)
		}
		g := gpucheck.GPULatency{Index: i}
		g.UUID, _ = dev.GetUUID()
		g.Name, _ = dev.GetName()
		fmt.Fprintf(os.Stderr, "gpuviz-hwreport: latency of GPU %d (%s): %d calls each\n", i, g.Name, n)
		g.Calls = append(g.Calls, fieldLatency(dev, syms, n)...)
		g.Calls = append(g.Calls, gpmLatency(lib, dev, syms, n)...)
		g.Calls = append(g.Calls, samplesLatency(dev, syms, n)...)
		g.Calls = append(g.Calls, simpleLatency("GetTotalEnergyConsumption (fallback)", syms.totalEnergy, n, func() nvml.Return {
			_, r := dev.GetTotalEnergyConsumption()
			return r
		}), simpleLatency("GetPowerUsage (fallback)", syms.powerUsage, n, func() nvml.Return {
			_, r := dev.GetPowerUsage()
			return r
		}))
		out = append(out, g)
	}
	return out, nil
}

func missing(call, symbol string) gpucheck.LatencyStats {
	return gpucheck.LatencyStats{Call: call, Source: "-", Note: "not measured: the driver has no " + symbol}
}

func simpleLatency(call string, have bool, n int, f func() nvml.Return) gpucheck.LatencyStats {
	if !have {
		return missing(call, call)
	}
	us, errs := timeCalls(n, f)
	return gpucheck.Summarize(call, "wall", us, errs)
}

// fieldLatency times the tick's GetFieldValues call (wall), and each field
// by the LatencyUsec NVML reports for it, where it does.
func fieldLatency(dev nvml.Device, syms symbols, n int) []gpucheck.LatencyStats {
	const call = "GetFieldValues (7 tick fields)"
	if !syms.fieldValues {
		return []gpucheck.LatencyStats{missing(call, "nvmlDeviceGetFieldValues")}
	}
	values := make([]nvml.FieldValue, len(tickFields))
	perField := make([][]float64, len(tickFields))
	fieldErrs := make([]int, len(tickFields))
	us, errs := timeCalls(n, func() nvml.Return {
		for i, id := range tickFields {
			values[i] = nvml.FieldValue{FieldId: id}
		}
		ret := dev.GetFieldValues(values)
		if ret != nvml.SUCCESS {
			return ret
		}
		for i := range values {
			if nvml.Return(values[i].NvmlReturn) != nvml.SUCCESS {
				fieldErrs[i]++
				continue
			}
			if values[i].LatencyUsec > 0 {
				perField[i] = append(perField[i], float64(values[i].LatencyUsec))
			}
		}
		return nvml.SUCCESS
	})
	out := []gpucheck.LatencyStats{gpucheck.Summarize(call, "wall", us, errs)}
	for i, id := range tickFields {
		name := fmt.Sprintf("  field %d", id)
		if len(perField[i]) == 0 {
			st := gpucheck.LatencyStats{Call: name, Source: "LatencyUsec", Errors: fieldErrs[i], Note: "NVML reported no latency for this field"}
			if fieldErrs[i] == n {
				st.Note = "not supported on this GPU or driver"
			}
			out = append(out, st)
			continue
		}
		out = append(out, gpucheck.Summarize(name, "LatencyUsec", perField[i], fieldErrs[i]))
	}
	return out
}

// gpmLatency times GpmSampleGet, and GpmMetricsGet for the receiver's 11
// metrics over one pair of samples taken gpmMinInterval apart (the call
// computes from the two buffers; which pair does not change its cost).
func gpmLatency(lib nvml.Interface, dev nvml.Device, syms symbols, n int) []gpucheck.LatencyStats {
	if !syms.gpm {
		return []gpucheck.LatencyStats{missing("GpmSampleGet", "nvmlGpm* entry points"), missing("GpmMetricsGet (11 metrics)", "nvmlGpm* entry points")}
	}
	sup, ret := lib.GpmQueryDeviceSupport(dev)
	if ret != nvml.SUCCESS || sup.IsSupportedDevice == 0 {
		note := fmt.Sprintf("GPM not supported on this GPU (%v)", ret)
		return []gpucheck.LatencyStats{{Call: "GpmSampleGet", Source: "-", Note: note}, {Call: "GpmMetricsGet (11 metrics)", Source: "-", Note: note}}
	}
	s1, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return []gpucheck.LatencyStats{{Call: "GpmSampleGet", Source: "-", Note: fmt.Sprintf("GpmSampleAlloc: %v", ret)}}
	}
	defer lib.GpmSampleFree(s1)
	s2, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return []gpucheck.LatencyStats{{Call: "GpmSampleGet", Source: "-", Note: fmt.Sprintf("GpmSampleAlloc: %v", ret)}}
	}
	defer lib.GpmSampleFree(s2)

	us, errs := timeCalls(n, func() nvml.Return { return lib.GpmSampleGet(dev, s1) })
	sample := gpucheck.Summarize("GpmSampleGet", "wall", us, errs)

	time.Sleep(gpmMinInterval + 20*time.Millisecond)
	if ret := lib.GpmSampleGet(dev, s2); ret != nvml.SUCCESS {
		return []gpucheck.LatencyStats{sample, {Call: "GpmMetricsGet (11 metrics)", Source: "-", Note: fmt.Sprintf("second sample: %v", ret)}}
	}
	req := &nvml.GpmMetricsGetType{}
	metricErrs := 0
	us, errs = timeCalls(n, func() nvml.Return {
		req.NumMetrics = uint32(len(nvmlcalls.GPMMetrics))
		req.Sample1, req.Sample2 = s1, s2
		for i, id := range nvmlcalls.GPMMetrics {
			req.Metrics[i] = nvml.GpmMetric{MetricId: uint32(id)}
		}
		ret := lib.GpmMetricsGet(req)
		for i := range nvmlcalls.GPMMetrics {
			if nvml.Return(req.Metrics[i].NvmlReturn) != nvml.SUCCESS {
				metricErrs++
			}
		}
		return ret
	})
	metrics := gpucheck.Summarize("GpmMetricsGet (11 metrics)", "wall", us, errs)
	if metricErrs > 0 {
		metrics.Note = fmt.Sprintf("%d metric results not SUCCESS over %d calls (NVLink on a GPU without links, say)", metricErrs, n)
	}
	return []gpucheck.LatencyStats{sample, metrics}
}

// samplesLatency times GetSamples per buffer, each call asking for the last
// second of samples (lastSeen one second back, in the µs Unix time NVML
// stamps samples with): what one flush at a 1 s flush_interval drains.
func samplesLatency(dev nvml.Device, syms symbols, n int) []gpucheck.LatencyStats {
	var out []gpucheck.LatencyStats
	for _, st := range sampleTypes {
		call := "GetSamples " + st.name
		if !syms.samples {
			out = append(out, missing(call, "nvmlDeviceGetSamples"))
			continue
		}
		var counts []float64
		us, errs := timeCalls(n, func() nvml.Return {
			_, s, ret := dev.GetSamples(st.typ, uint64(time.Now().Add(-time.Second).UnixMicro()))
			if ret == nvml.ERROR_NOT_FOUND { // nothing newer: a valid answer
				ret = nvml.SUCCESS
			}
			counts = append(counts, float64(len(s)))
			return ret
		})
		stats := gpucheck.Summarize(call, "wall", us, errs)
		stats.Note = fmt.Sprintf("median %.0f samples a call", gpucheck.Percentile(counts, 50))
		out = append(out, stats)
	}
	return out
}
