package gpuvizreceiver

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWrappingCounter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		width uint
		raws  []uint64
		want  uint64
	}{
		{"first reading is the base", 64, []uint64{5000}, 0},
		{"grows", 64, []uint64{5000, 7000, 7500}, 2500},
		{"32-bit wrap", 32, []uint64{1<<32 - 100, 50}, 150},
		{"64-bit wrap", 64, []uint64{1<<64 - 1, 9}, 10},
		{"16-bit wrap", 16, []uint64{65530, 4}, 10},
		// A GPU reset restarts the counter from zero: the bytes since count,
		// not a wrap's 2^64 minus what it had.
		{"64-bit reset", 64, []uint64{5000, 7000, 300, 800}, 2000 + 300 + 500},
		{"64-bit reset to zero", 64, []uint64{1 << 40, 0, 10}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c wrappingCounter
			var got uint64
			for _, r := range tc.raws {
				got = c.observe(r, tc.width)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDecodeValue(t *testing.T) {
	var raw [8]byte
	binary.LittleEndian.PutUint32(raw[:], 0xFFFFFFFF)
	assert.Equal(t, float64(-1), decodeValue(nvml.VALUE_TYPE_SIGNED_INT, raw))
	assert.Equal(t, float64(0xFFFFFFFF), decodeValue(nvml.VALUE_TYPE_UNSIGNED_INT, raw))
	binary.LittleEndian.PutUint64(raw[:], 0x3FF8000000000000) // 1.5
	assert.Equal(t, 1.5, decodeValue(nvml.VALUE_TYPE_DOUBLE, raw))
	binary.LittleEndian.PutUint64(raw[:], 1<<40)
	assert.Equal(t, float64(1<<40), decodeValue(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, raw))
}

func TestUnsupportedFieldsAreDropped(t *testing.T) {
	lib := fixtureServer(1)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	asked := len(s.gpus[0].fields)
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	// The fixture has no page retirement (3 fields), as on Ampere and newer.
	assert.Len(t, s.gpus[0].fields, asked-3)
	for _, f := range s.gpus[0].fields {
		assert.NotEqual(t, uint32(nvml.FI_DEV_RETIRED_SBE), f.FieldId)
	}
}

func TestPCIeBytesFallBackToThroughput(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	fields := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := fields(values)
		for i := range values {
			if id := values[i].FieldId; id == nvml.FI_DEV_PCIE_COUNT_RX_BYTES || id == nvml.FI_DEV_PCIE_COUNT_TX_BYTES {
				values[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return ret
	}
	dev.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		if c == nvml.PCIE_UTIL_RX_BYTES {
			return 2_000_000, nvml.SUCCESS // KB/s: 2 GB/s
		}
		return 1_000, nvml.SUCCESS
	}
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	for range 3 {
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
	}
	// Third scrape: two intervals integrated. Pin the clock of the last one
	// to check the arithmetic: 2 GB/s over 1.5 s more is 3 GB.
	g := s.gpus[0]
	before := g.counters.pcie[rx].total
	g.counters.pcieLastRead -= 1_500_000_000
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	got := pointsOf(m, "hw.gpu.io", map[string]any{"network.io.direction": "receive"})[dev.UUID]
	require.Len(t, got, 1)
	assert.InDelta(t, float64(before)+3e9, got[0], 0.05e9)
	assert.Len(t, dev.GetPcieThroughputCalls(), 8, "two calls in each of the 4 scrapes: the first scrape already falls back")
}

// TestNVLinkCapacity: links × the common per-link speed, MB/s of 10^6 bytes,
// from the scrape's batched call, every scrape.
func TestNVLinkCapacity(t *testing.T) {
	lib := fixtureServer(2)
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	for range 2 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		got := pointsOf(m, "nvidia.gpu.nvlink.capacity", nil)
		for k := range 2 {
			assert.Equal(t, []float64{18 * float64(26_562+k) * 1e6}, got[device(lib, k).UUID])
		}
	}
	// Both fields ride in the scrape's one batched call, with the others.
	var withCapacity int
	for _, call := range device(lib, 0).GetFieldValuesCalls() {
		ids := map[uint32]bool{}
		for _, v := range call.FieldValues {
			ids[v.FieldId] = true
		}
		if ids[nvml.FI_DEV_NVLINK_LINK_COUNT] {
			withCapacity++
			assert.True(t, ids[nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON] && ids[nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX])
		}
	}
	assert.Equal(t, 2, withCapacity, "one call per scrape")
}

// TestNoNVLinkNoCapacity: a GPU without NVLink (a PCIe board) answers
// NOT_SUPPORTED for the link count and speed: it reports no capacity, no
// error, and is not asked again; a GPU that counts no links reports none
// either.
func TestNoNVLinkNoCapacity(t *testing.T) {
	lib := fixtureServer(2)
	for k, answer := range map[int]func(v *nvml.FieldValue){
		0: func(v *nvml.FieldValue) { v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED) },
		1: func(v *nvml.FieldValue) {
			if v.FieldId == nvml.FI_DEV_NVLINK_LINK_COUNT {
				binary.LittleEndian.PutUint64(v.Value[:], 0)
			}
		},
	} {
		dev := device(lib, k)
		fields := dev.GetFieldValuesFunc
		dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
			ret := fields(values)
			for i := range values {
				if id := values[i].FieldId; id == nvml.FI_DEV_NVLINK_LINK_COUNT || id == nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON {
					answer(&values[i])
				}
			}
			return ret
		}
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	asked := len(s.gpus[0].fields)
	for range 2 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		assert.Empty(t, pointsOf(m, "nvidia.gpu.nvlink.capacity", nil))
		assert.NotEmpty(t, pointsOf(m, "nvidia.gpu.nvlink.io", nil), "the other fields are still read")
		ok := pointsOf(m, "hw.status", map[string]any{"hw.state": "ok"})
		for k := range 2 {
			assert.Equal(t, []float64{1}, ok[device(lib, k).UUID], "GPU %d is ok", k)
		}
	}
	assert.Len(t, s.gpus[0].fields, asked-3-2, "retired pages and the two NVLink fields left the request")
	for _, f := range s.gpus[0].fields {
		assert.NotContains(t, []uint32{nvml.FI_DEV_NVLINK_LINK_COUNT, nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON}, f.FieldId)
	}
}

// A driver older than a field answers INVALID_ARGUMENT for it: the field
// leaves the request, as an unsupported one does, and the scrape is not a
// failure for it.
func TestFieldUnknownToTheDriverLeavesTheRequest(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	inner := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := inner(values)
		for i := range values {
			if values[i].FieldId == nvml.FI_DEV_PCIE_REPLAY_COUNTER {
				values[i].NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT)
			}
		}
		return ret
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	for range 2 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []float64{1}, pointsOf(m, "hw.status", map[string]any{"hw.state": "ok"})[dev.UUID])
	}
	assert.False(t, slices.ContainsFunc(s.gpus[0].fields, func(v nvml.FieldValue) bool { return v.FieldId == nvml.FI_DEV_PCIE_REPLAY_COUNTER }))
}
