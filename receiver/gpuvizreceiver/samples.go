package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// sampleKinds are the driver sample buffers the receiver drains.
var sampleKinds = [...]nvml.SamplingType{
	nvml.GPU_UTILIZATION_SAMPLES,
	nvml.MEMORY_UTILIZATION_SAMPLES,
	nvml.TOTAL_POWER_SAMPLES,
	nvml.PROCESSOR_CLK_SAMPLES,
}

// sampleState remembers, per buffer, the newest sample already emitted, so
// each sample is emitted exactly once across drains, and which buffers are
// not drained: those the GPU does not keep, and on a GPU with GPM all but
// power's (powerOnly).
type sampleState struct {
	lastSeen [len(sampleKinds)]uint64 // µs, NVML's clock
	skip     [len(sampleKinds)]bool
}

// powerOnly drains the power buffer alone: on a GPU with GPM, GPM's
// activities say more than the other buffers, while the power buffer (a
// sample every 20 ms on an H200) says where in a flush interval the energy
// counter's increase went, finer than the tick's power readings (refreshed
// every 100 ms, docs/accuracy.md).
func (st *sampleState) powerOnly() {
	for k, kind := range sampleKinds {
		st.skip[k] = kind != nvml.TOTAL_POWER_SAMPLES
	}
}

func samplesEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuSamplesUtilization.Enabled || m.NvidiaGpuSamplesMemoryControllerUtilization.Enabled ||
		m.NvidiaGpuSamplesPower.Enabled || m.NvidiaGpuSamplesSmClock.Enabled
}

// drain appends to r every sample taken since the previous drain. It
// returns the first failure, or SUCCESS (also when the GPU keeps no
// buffers: those are not asked again); a buffer that fails does not keep
// the others from being drained, unless the GPU is lost (gpuLost): then
// the others would answer the same, and are not asked.
func (st *sampleState) drain(dev nvml.Device, r *tickReading) nvml.Return {
	limit := clockLimit(r.at)
	failed := nvml.SUCCESS
	for k, kind := range sampleKinds {
		if st.skip[k] {
			continue
		}
		if st.lastSeen[k] > limit {
			st.lastSeen[k] = 0 // the wall clock stepped back past the samples before
		}
		vt, samples, ret := dev.GetSamples(kind, st.lastSeen[k])
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_FOUND: // nothing newer than lastSeen
			continue
		case nvml.ERROR_NOT_SUPPORTED:
			st.skip[k] = true
			continue
		default:
			if failed == nvml.SUCCESS {
				failed = ret
			}
			if gpuLost(ret) {
				return failed
			}
			continue
		}
		for _, smp := range samples {
			if smp.TimeStamp <= st.lastSeen[k] || smp.TimeStamp > limit {
				continue // taken before, or stamped before the clock stepped back
			}
			st.lastSeen[k] = smp.TimeStamp
			r.samples = append(r.samples, driverSample{k, pcommon.Timestamp(smp.TimeStamp * 1000), decodeValue(vt, smp.SampleValue)})
		}
	}
	return failed
}

func recordSample(mb *metadata.MetricsBuilder, g *gpu, kind nvml.SamplingType, ts pcommon.Timestamp, v float64) {
	switch kind {
	case nvml.GPU_UTILIZATION_SAMPLES:
		mb.RecordNvidiaGpuSamplesUtilizationDataPoint(ts, v/100, g.id)
	case nvml.MEMORY_UTILIZATION_SAMPLES:
		mb.RecordNvidiaGpuSamplesMemoryControllerUtilizationDataPoint(ts, v/100, g.id)
	case nvml.TOTAL_POWER_SAMPLES:
		mb.RecordNvidiaGpuSamplesPowerDataPoint(ts, v/1000, g.id)
	case nvml.PROCESSOR_CLK_SAMPLES:
		mb.RecordNvidiaGpuSamplesSmClockDataPoint(ts, int64(v)*1_000_000, g.id)
	}
}
