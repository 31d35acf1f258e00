package gpuvizreceiver

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// NVML's NVLink data counters (FI 138/139) count KiB; nvidia.gpu.nvlink.io
// is in bytes, per direction.
func TestNVLinkCountersAreKiBAndKeepTheirDirection(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	answer := dev.GetFieldValuesFunc
	var scrapes uint64
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := answer(values)
		for i := range values {
			if values[i].FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
				scrapes++
				break
			}
		}
		for i := range values {
			v := &values[i]
			var kib uint64
			switch v.FieldId {
			case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				kib = 5_000 + 100*scrapes // 100 KiB received per scrape
			case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
				kib = 9_000 + 300*scrapes // 300 KiB sent per scrape
			default:
				continue
			}
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			binary.LittleEndian.PutUint64(v.Value[:], kib)
		}
		return ret
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	var m pmetric.Metrics
	for range 3 {
		var err error
		m, err = s.scrape(context.Background())
		require.NoError(t, err)
	}
	// Two intervals since the first reading: 200 KiB in, 600 KiB out.
	id := dev.UUID
	assert.Equal(t, []float64{200 * 1024}, pointsOf(m, "nvidia.gpu.nvlink.io", map[string]any{"network.io.direction": "receive"})[id])
	assert.Equal(t, []float64{600 * 1024}, pointsOf(m, "nvidia.gpu.nvlink.io", map[string]any{"network.io.direction": "transmit"})[id])
}

// The driver's power samples (TOTAL_POWER_SAMPLES) are mW, as
// nvmlDeviceGetPowerUsage; nvidia.gpu.samples.power is in W, each at its
// sample's own timestamp.
func TestPowerSamplesAreWattsAtTheirTimestamps(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	clock := newVirtualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t0 := clock.now()
	dev.GetSamplesFunc = func(kind nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
		if kind != nvml.TOTAL_POWER_SAMPLES {
			return 0, nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.Sample
		for j, mw := range []uint32{412_345, 655_000} {
			smp := nvml.Sample{TimeStamp: uint64(t0.Add(time.Duration(j-2) * 20 * time.Millisecond).UnixMicro())}
			binary.LittleEndian.PutUint32(smp.SampleValue[:], mw)
			if smp.TimeStamp > lastSeen {
				out = append(out, smp)
			}
		}
		return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
	}
	d := startDriven(t, flushEveryTick(), lib, BackendNVML, clock)
	_, _ = d.Tick()
	clock.advance(250 * time.Millisecond)
	m, ok := d.Tick()
	require.True(t, ok)

	got := map[pcommon.Timestamp]float64{}
	forEachPointTS(m, func(name string, _ map[string]any, ts pcommon.Timestamp, v float64) {
		if name == "nvidia.gpu.samples.power" {
			got[ts] = v
		}
	})
	assert.Equal(t, map[pcommon.Timestamp]float64{
		pcommon.NewTimestampFromTime(t0.Add(-40 * time.Millisecond)): 412.345,
		pcommon.NewTimestampFromTime(t0.Add(-20 * time.Millisecond)): 655,
	}, got)
}

// A field value is stamped with the driver's timestamp for it (µs of the
// wall clock), when it was measured, not when the receiver read it.
func TestTickFieldsCarryTheDriversTimestamp(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	clock := newVirtualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	measured := clock.now().Add(-70 * time.Millisecond)
	answer := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := answer(values)
		for i := range values {
			if values[i].FieldId == nvml.FI_DEV_POWER_INSTANT {
				values[i].Timestamp = measured.UnixMicro()
			}
		}
		return ret
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	s.now = clock.now
	m, err := s.scrape(context.Background())
	require.NoError(t, err)

	var power, limit []pcommon.Timestamp
	forEachPointTS(m, func(name string, _ map[string]any, ts pcommon.Timestamp, _ float64) {
		switch name {
		case "hw.power":
			power = append(power, ts)
		case "nvidia.gpu.power.limit":
			limit = append(limit, ts)
		}
	})
	assert.Equal(t, []pcommon.Timestamp{pcommon.NewTimestampFromTime(measured)}, power)
	// A reading without a driver timestamp is stamped at the scrape.
	assert.Equal(t, []pcommon.Timestamp{pcommon.NewTimestampFromTime(clock.now())}, limit)
}
