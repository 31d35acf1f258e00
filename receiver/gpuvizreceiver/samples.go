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
// each sample is emitted exactly once across scrapes, and which buffers the
// GPU does not keep.
type sampleState struct {
	lastSeen    [len(sampleKinds)]uint64 // µs, NVML's clock
	unsupported [len(sampleKinds)]bool
}

func samplesEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuSamplesUtilization.Enabled || m.NvidiaGpuSamplesMemoryControllerUtilization.Enabled ||
		m.NvidiaGpuSamplesPower.Enabled || m.NvidiaGpuSamplesSmClock.Enabled
}

func (s *gpuScraper) readSamples(g *gpu, _ pcommon.Timestamp) nvml.Return {
	st := &g.samples
	var answered bool
	for k, kind := range sampleKinds {
		if st.unsupported[k] {
			continue
		}
		vt, samples, ret := g.dev.GetSamples(kind, st.lastSeen[k])
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_FOUND: // nothing newer than lastSeen
			answered = true
			continue
		case nvml.ERROR_NOT_SUPPORTED:
			st.unsupported[k] = true
			continue
		default:
			return ret
		}
		answered = true
		for _, smp := range samples {
			if smp.TimeStamp <= st.lastSeen[k] {
				continue
			}
			st.lastSeen[k] = smp.TimeStamp
			s.recordSample(g, kind, pcommon.Timestamp(smp.TimeStamp*1000), decodeValue(vt, smp.SampleValue))
		}
	}
	if !answered {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

func (s *gpuScraper) recordSample(g *gpu, kind nvml.SamplingType, ts pcommon.Timestamp, v float64) {
	switch kind {
	case nvml.GPU_UTILIZATION_SAMPLES:
		s.mb.RecordNvidiaGpuSamplesUtilizationDataPoint(ts, v/100, g.id)
	case nvml.MEMORY_UTILIZATION_SAMPLES:
		s.mb.RecordNvidiaGpuSamplesMemoryControllerUtilizationDataPoint(ts, v/100, g.id)
	case nvml.TOTAL_POWER_SAMPLES:
		s.mb.RecordNvidiaGpuSamplesPowerDataPoint(ts, v/1000, g.id)
	case nvml.PROCESSOR_CLK_SAMPLES:
		s.mb.RecordNvidiaGpuSamplesSmClockDataPoint(ts, int64(v)*1_000_000, g.id)
	}
}
