package gpuvizreceiver

import (
	"encoding/binary"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

const drainNow uint64 = 1_800_000_000_000_000 // µs since 1970

// powerOnlySamples makes dev keep a power buffer that answers samples
// (timestamps in µs, whatever lastSeen is asked) and no other buffer; it
// returns the calls per buffer.
func powerOnlySamples(t *testing.T, samples func(lastSeen uint64) []nvml.Sample) (nvml.Device, map[nvml.SamplingType]int) {
	t.Helper()
	dev := device(fixtureServer(1), 0)
	calls := map[nvml.SamplingType]int{}
	dev.GetSamplesFunc = func(kind nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
		calls[kind]++
		if kind != nvml.TOTAL_POWER_SAMPLES {
			return 0, nil, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.VALUE_TYPE_UNSIGNED_INT, samples(lastSeen), nvml.SUCCESS
	}
	return dev, calls
}

func drainedAt(t *testing.T, st *sampleState, dev nvml.Device, at uint64) []pcommon.Timestamp {
	t.Helper()
	r := tickReading{at: pcommon.Timestamp(at * 1000)}
	require.Equal(t, nvml.SUCCESS, st.drain(dev, &r))
	var out []pcommon.Timestamp
	for _, smp := range r.samples {
		out = append(out, smp.ts)
	}
	return out
}

// A driver that answers the sample at lastSeen again (an inclusive bound)
// does not have it emitted twice.
func TestDriverSampleAtLastSeenIsNotEmittedTwice(t *testing.T) {
	dev, _ := powerOnlySamples(t, func(uint64) []nvml.Sample { return []nvml.Sample{{TimeStamp: drainNow - 20_000}} })
	var st sampleState
	assert.Len(t, drainedAt(t, &st, dev, drainNow), 1)
	assert.Empty(t, drainedAt(t, &st, dev, drainNow+250_000))
}

// A sample stamped more than the slack past the reading is from before the
// clock stepped back: left out, while the samples after it are taken.
func TestDriverSampleStampedInTheFutureIsLeftOut(t *testing.T) {
	dev, _ := powerOnlySamples(t, func(uint64) []nvml.Sample {
		return []nvml.Sample{{TimeStamp: drainNow + 3_600_000_000}, {TimeStamp: drainNow - 20_000}}
	})
	var st sampleState
	assert.Equal(t, []pcommon.Timestamp{pcommon.Timestamp((drainNow - 20_000) * 1000)}, drainedAt(t, &st, dev, drainNow))
}

// A buffer the GPU does not keep is asked once, not at every drain.
func TestDriverBufferNotKeptIsAskedOnce(t *testing.T) {
	dev, calls := powerOnlySamples(t, func(uint64) []nvml.Sample { return nil })
	var st sampleState
	for i := range uint64(3) {
		drainedAt(t, &st, dev, drainNow+i*1_000_000)
	}
	assert.Equal(t, map[nvml.SamplingType]int{
		nvml.GPU_UTILIZATION_SAMPLES: 1, nvml.MEMORY_UTILIZATION_SAMPLES: 1, nvml.PROCESSOR_CLK_SAMPLES: 1,
		nvml.TOTAL_POWER_SAMPLES: 3,
	}, calls)
}

// The driver's samples are percent, mW and MHz; the metrics are ratios, W
// and Hz.
func TestDriverSamplesUnits(t *testing.T) {
	for _, c := range []struct {
		kind   nvml.SamplingType
		raw    uint32
		metric string
		want   float64
	}{
		{nvml.GPU_UTILIZATION_SAMPLES, 87, "nvidia.gpu.samples.utilization", 0.87},
		{nvml.MEMORY_UTILIZATION_SAMPLES, 42, "nvidia.gpu.samples.memory_controller.utilization", 0.42},
		{nvml.TOTAL_POWER_SAMPLES, 412_345, "nvidia.gpu.samples.power", 412.345},
		{nvml.PROCESSOR_CLK_SAMPLES, 1980, "nvidia.gpu.samples.sm_clock", 1.98e9},
	} {
		g := &gpu{id: "GPU-x"}
		mb := metadata.NewMetricsBuilder(defaultConfig().MetricsBuilderConfig, receivertest.NewNopSettings(metadata.Type))
		var raw [8]byte
		binary.LittleEndian.PutUint32(raw[:], c.raw)
		recordSample(mb, g, c.kind, 1, decodeValue(nvml.VALUE_TYPE_UNSIGNED_INT, raw))
		assert.Equal(t, map[string][]float64{"GPU-x": {c.want}}, pointsOf(mb.Emit(), c.metric, nil), c.metric)
	}
}

// A lost GPU (GPU_IS_LOST, or INVALID_ARGUMENT: an invalid handle after a
// reset) answers every buffer the same: its drain stops at the first, while
// a buffer failing otherwise leaves the others asked.
func TestDriverSamplesOfALostGPUAreAskedOnce(t *testing.T) {
	for _, c := range []struct {
		ret   nvml.Return
		calls int
	}{
		{nvml.ERROR_GPU_IS_LOST, 1},
		{nvml.ERROR_INVALID_ARGUMENT, 1},
		{nvml.ERROR_UNKNOWN, len(sampleKinds)},
	} {
		dev := device(fixtureServer(1), 0)
		calls := 0
		dev.GetSamplesFunc = func(nvml.SamplingType, uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
			calls++
			return 0, nil, c.ret
		}
		var st sampleState
		r := tickReading{at: pcommon.Timestamp(drainNow * 1000)}
		assert.Equal(t, c.ret, st.drain(dev, &r), c.ret.String())
		assert.Equal(t, c.calls, calls, c.ret.String())
	}
}
