package nvmlsim

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gpmBetween returns the GPM metrics of d over [from, to).
func gpmBetween(t *testing.T, s *Server, d *Device, c *clock, from, to time.Time) map[nvml.GpmMetricId]float64 {
	t.Helper()
	s1, _ := s.GpmSampleAlloc()
	s2, _ := s.GpmSampleAlloc()
	lag := time.Duration(d.gpmLag) // samples taken that much later describe [from, to]
	c.t = from.Add(lag)
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d, s1))
	c.t = to.Add(lag)
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d, s2))
	ids := []nvml.GpmMetricId{nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_ANY_TENSOR_UTIL, nvml.GPM_METRIC_DRAM_BW_UTIL,
		nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, nvml.GPM_METRIC_PCIE_RX_PER_SEC, 999}
	req := nvml.GpmMetricsGetType{NumMetrics: uint32(len(ids)), Sample1: s1, Sample2: s2}
	for i, id := range ids {
		req.Metrics[i].MetricId = uint32(id)
	}
	require.Equal(t, nvml.SUCCESS, s.GpmMetricsGet(&req))
	out := map[nvml.GpmMetricId]float64{}
	for i, id := range ids {
		if nvml.Return(req.Metrics[i].NvmlReturn) == nvml.SUCCESS {
			out[id] = req.Metrics[i].Value
		}
	}
	return out
}

func TestGPMSeesPrefillComputeAndDecodeMemory(t *testing.T) {
	c := newClock()
	s := mustServer(t, "h200", 1, 4, c)
	d := s.Device(0)
	var prefill, decode Segment
	for _, seg := range d.Schedule().Segments(windowOf(c.t.UnixNano())) {
		switch {
		case seg.Phase == PhasePrefill && prefill.End == 0:
			prefill = seg
		case seg.Phase == PhaseDecode && decode.End == 0:
			decode = seg
		}
	}
	require.NotZero(t, prefill.End)
	in := func(seg Segment) map[nvml.GpmMetricId]float64 {
		return gpmBetween(t, s, d, c, time.Unix(0, seg.Start), time.Unix(0, seg.End))
	}
	p, dec := in(prefill), in(decode)
	assert.Greater(t, p[nvml.GPM_METRIC_ANY_TENSOR_UTIL], dec[nvml.GPM_METRIC_ANY_TENSOR_UTIL]+20, "tensor pipes: prefill ≫ decode")
	assert.Greater(t, dec[nvml.GPM_METRIC_DRAM_BW_UTIL], p[nvml.GPM_METRIC_DRAM_BW_UTIL]+20, "DRAM bandwidth: decode ≫ prefill")
	assert.Greater(t, p[nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC], 20e9/(1<<20), "tensor-parallel all-reduce over NVLink, MiB/s")
	assert.NotContains(t, p, nvml.GpmMetricId(999), "unknown metrics answer NOT_SUPPORTED")
	for _, v := range p {
		assert.GreaterOrEqual(t, v, 0.0)
	}
}

func TestNoGPMOnAmpere(t *testing.T) {
	s := mustServer(t, "a100", 1, 1, newClock())
	sup, ret := s.GpmQueryDeviceSupport(s.Device(0))
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Zero(t, sup.IsSupportedDevice)
	sample, _ := s.GpmSampleAlloc()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, s.GpmSampleGet(s.Device(0), sample))
}

func TestFieldCountersAreIntegrals(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h100", 1, 2, c).Device(0)
	read := func() map[uint32]uint64 {
		vals := []nvml.FieldValue{
			{FieldId: nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP},
			{FieldId: nvml.FI_DEV_PCIE_COUNT_RX_BYTES},
			{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: 0xFFFFFFFF},
			{FieldId: nvml.FI_DEV_RETIRED_SBE},
		}
		require.Equal(t, nvml.SUCCESS, d.GetFieldValues(vals))
		out := map[uint32]uint64{}
		for _, v := range vals {
			if nvml.Return(v.NvmlReturn) == nvml.SUCCESS {
				out[v.FieldId] = binary.LittleEndian.Uint64(v.Value[:])
			}
		}
		return out
	}
	start := c.t.UnixNano()
	a := read()
	assert.NotContains(t, a, uint32(nvml.FI_DEV_RETIRED_SBE), "Hopper remaps rows; page retirement is not supported")
	c.advance(10 * time.Minute)
	b := read()
	want := d.Schedule().Integrate(start, c.t.UnixNano())
	assert.InDelta(t, want.CappedSeconds*1e9, float64(b[nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP]-a[nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP]), 1e3)
	assert.InDelta(t, want.PCIeRxBytes, float64(b[nvml.FI_DEV_PCIE_COUNT_RX_BYTES]-a[nvml.FI_DEV_PCIE_COUNT_RX_BYTES]), 1)
	assert.InDelta(t, want.NVLinkBytes/1024, float64(b[nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX]-a[nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX]), 1)
	assert.Positive(t, want.CappedSeconds, "ten minutes of traffic include power-capped prefills")
}

func TestSamplesAreBoundedAndNeverRepeat(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h100", 1, 3, c).Device(0)
	var last uint64
	seen := map[uint64]bool{}
	var lastUtil uint64
	for i := range 20 {
		c.advance(2 * time.Second)
		vt, samples, ret := d.GetSamples(nvml.TOTAL_POWER_SAMPLES, last)
		require.Equal(t, nvml.SUCCESS, ret)
		assert.Equal(t, nvml.VALUE_TYPE_UNSIGNED_INT, vt)
		assert.LessOrEqual(t, len(samples), sampleBuffer)
		_, util, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, lastUtil)
		require.Equal(t, nvml.SUCCESS, ret)
		lastUtil = util[len(util)-1].TimeStamp
		if i > 0 {
			assert.InDelta(t, 100, len(samples), 1, "power fifty a second")
			assert.InDelta(t, 12, len(util), 1, "utilisation six a second")
		}
		for _, smp := range samples {
			assert.Greater(t, smp.TimeStamp, last)
			assert.False(t, seen[smp.TimeStamp])
			seen[smp.TimeStamp] = true
			mw := binary.LittleEndian.Uint32(smp.SampleValue[:])
			assert.InDelta(t, 400_000, float64(mw), 330_000)
		}
		last = samples[len(samples)-1].TimeStamp
	}
	_, _, ret := d.GetSamples(nvml.TOTAL_POWER_SAMPLES, last)
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret, "nothing newer yet")
}

func TestThrottleReasonsFollowTheSchedule(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h200", 1, 6, c).Device(0)
	var sawIdle, sawCap bool
	for _, seg := range d.Schedule().Segments(windowOf(c.t.UnixNano())) {
		c.t = time.Unix(0, seg.Start+1)
		r, ret := d.GetCurrentClocksEventReasons()
		require.Equal(t, nvml.SUCCESS, ret)
		assert.Equal(t, seg.Phase == PhaseIdle, r&nvml.ClocksEventReasonGpuIdle != 0)
		assert.Equal(t, seg.PowerCapped, r&nvml.ClocksEventReasonSwPowerCap != 0)
		sawIdle = sawIdle || seg.Phase == PhaseIdle
		sawCap = sawCap || seg.PowerCapped
	}
	assert.True(t, sawIdle)
	assert.True(t, sawCap)
}

func TestProcessesOfTheSimulatedServer(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h100", 2, 1, c).Device(1)
	procs, ret := d.GetComputeRunningProcesses()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Len(t, procs, 1)
	mem, _ := d.GetMemoryInfo_v2()
	assert.Equal(t, mem.Used, procs[0].UsedGpuMemory)
	assert.Equal(t, [2]uint32{math.MaxUint32, math.MaxUint32}, [2]uint32{procs[0].GpuInstanceId, procs[0].ComputeInstanceId}, "no instance outside MIG mode")
	util, ret := d.GetProcessUtilization(0)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Len(t, util, 1)
	assert.Equal(t, procs[0].Pid, util[0].Pid)
	_, ret = d.GetProcessUtilization(util[0].TimeStamp)
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret, "no sample newer than lastSeen")
}

func TestMIGMode(t *testing.T) {
	c := newClock()
	s, err := New("h200", 1, 1, c.now, WithMIG())
	require.NoError(t, err)
	d := s.Device(0)
	mode, _, ret := d.GetMigMode()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, nvml.DEVICE_MIG_ENABLE, mode)
	_, ret = d.GetUtilizationRates()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "as NVML: no GPU utilisation in MIG mode")

	n, _ := d.GetMaxMigDeviceCount()
	var migs []nvml.Device
	for i := range n {
		if m, ret := d.GetMigDeviceHandleByIndex(i); ret == nvml.SUCCESS {
			migs = append(migs, m)
		}
	}
	require.Len(t, migs, 2)
	_, ret = d.GetMigDeviceHandleByIndex(n - 1)
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret, "an empty slot")
	_, ret = d.GetMigDeviceHandleByIndex(n)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret, "no such slot")
	parentMem, _ := d.GetMemoryInfo_v2()
	var sum uint64
	for i, m := range migs {
		uuid, _ := m.GetUUID()
		assert.Contains(t, uuid, "MIG-simulated-h200-")
		gi, _ := m.GetGpuInstanceId()
		assert.Equal(t, i+1, gi)
		mem, _ := m.GetMemoryInfo()
		assert.Equal(t, uint64(72704)*mib, mem.Total, "3g.71gb")
		sum += mem.Used
		inst, ret := d.GetGpuInstanceById(gi)
		require.Equal(t, nvml.SUCCESS, ret)
		info, _ := inst.GetInfo()
		assert.Equal(t, uint32(nvml.GPU_INSTANCE_PROFILE_3_SLICE), info.ProfileId)
	}
	assert.InDelta(t, float64(parentMem.Used), float64(sum), 2)

	s1, _ := s.GpmSampleAlloc()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, s.GpmSampleGet(d, s1), "GPM samples GPU instances in MIG mode")
	require.Equal(t, nvml.SUCCESS, s.GpmMigSampleGet(d, 1, s1))
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, s.GpmMigSampleGet(d, 5, s1))
}

// TestMIGProcessesNameTheirInstances: in MIG mode NVML, asked on the GPU's
// handle, gives each process the GPU and compute instance it runs on. Each
// instance of a simulated GPU runs a worker holding the instance's memory,
// the first instance's the GPU's worker (SimulatedPID), every PID on the
// server its own; the same seed lists the same processes.
func TestMIGProcessesNameTheirInstances(t *testing.T) {
	c := newClock()
	c.advance(90 * time.Second)
	list := func() map[int][]nvml.ProcessInfo {
		s, err := New("h200", 2, 3, c.now, WithMIG())
		require.NoError(t, err)
		out := map[int][]nvml.ProcessInfo{}
		for i := range 2 {
			procs, ret := s.Device(i).GetComputeRunningProcesses()
			require.Equal(t, nvml.SUCCESS, ret)
			out[i] = procs
		}
		return out
	}
	got := list()
	assert.Equal(t, got, list(), "seeded")

	s, err := New("h200", 2, 3, c.now, WithMIG())
	require.NoError(t, err)
	pids := map[uint32]bool{}
	for i := range 2 {
		d := s.Device(i)
		procs := got[i]
		require.Len(t, procs, 2, "a worker per instance")
		assert.Equal(t, SimulatedPID(i), procs[0].Pid)
		var sum uint64
		for j, p := range procs {
			assert.False(t, pids[p.Pid], "PID %d twice", p.Pid)
			pids[p.Pid] = true
			m, ret := d.GetMigDeviceHandleByIndex(j)
			require.Equal(t, nvml.SUCCESS, ret)
			gi, _ := m.GetGpuInstanceId()
			ci, _ := m.GetComputeInstanceId()
			assert.Zero(t, ci, "one compute instance each, numbered 0 as NVML numbers an instance's first")
			assert.Equal(t, [2]uint32{uint32(gi), uint32(ci)}, [2]uint32{p.GpuInstanceId, p.ComputeInstanceId}, "GPU %d process %d", i, p.Pid)
			mem, _ := m.GetMemoryInfo()
			assert.Positive(t, p.UsedGpuMemory)
			assert.Equal(t, mem.Used, p.UsedGpuMemory, "the worker holds its instance's memory")
			assert.LessOrEqual(t, p.UsedGpuMemory, mem.Total)
			sum += p.UsedGpuMemory
		}
		gpuMem, _ := d.GetMemoryInfo_v2()
		assert.InDelta(t, float64(gpuMem.Used), float64(sum), 2, "the workers hold the GPU's memory in use")
	}
}

// TestMIGDeviceListsItsOwnProcesses: NVML asked on a MIG device's handle
// lists the processes of that instance only: in the simulation each MIG
// device its own worker, the one the GPU's handle names with its GPU and
// compute instance.
func TestMIGDeviceListsItsOwnProcesses(t *testing.T) {
	c := newClock()
	c.advance(90 * time.Second)
	s, err := New("h200", 2, 3, c.now, WithMIG())
	require.NoError(t, err)
	for i := range 2 {
		d := s.Device(i)
		all, ret := d.GetComputeRunningProcesses()
		require.Equal(t, nvml.SUCCESS, ret)
		n, _ := d.GetMaxMigDeviceCount()
		seen := 0
		for j := range n {
			m, ret := d.GetMigDeviceHandleByIndex(j)
			if ret != nvml.SUCCESS {
				continue
			}
			seen++
			gi, _ := m.GetGpuInstanceId()
			ci, _ := m.GetComputeInstanceId()
			var want []nvml.ProcessInfo
			for _, p := range all {
				if p.GpuInstanceId == uint32(gi) && p.ComputeInstanceId == uint32(ci) {
					want = append(want, p)
				}
			}
			require.Len(t, want, 1, "GPU %d instance %d runs one worker", i, gi)
			var procs []nvml.ProcessInfo
			require.NotPanics(t, func() { procs, ret = m.GetComputeRunningProcesses() })
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, want, procs, "GPU %d MIG device %d", i, j)
		}
		assert.Equal(t, 2, seen)
		again, _ := d.GetComputeRunningProcesses()
		assert.Equal(t, all, again, "the GPU's handle still lists every instance's worker")
	}
}

// TestNVLinkFields: the link count and the common per-link speed are the
// model's, as NVML types them, and the capacity they make bounds what the
// simulated traffic moves: the engine's all-reduce runs against the nominal
// data rate, which NVML's signalling rate is at or just above.
func TestNVLinkFields(t *testing.T) {
	want := map[string][2]uint32{"a100": {12, 25_000}, "h100": {18, 26_562}, "h200": {18, 26_562}, "b200": {18, 53_125}}
	for _, name := range Models() {
		t.Run(name, func(t *testing.T) {
			c := newClock()
			d := mustServer(t, name, 1, 1, c).Device(0)
			vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_LINK_COUNT}, {FieldId: nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON}}
			require.Equal(t, nvml.SUCCESS, d.GetFieldValues(vals))
			for i, v := range vals {
				assert.Equal(t, nvml.SUCCESS, nvml.Return(v.NvmlReturn))
				assert.Equal(t, uint32(nvml.VALUE_TYPE_UNSIGNED_INT), v.ValueType)
				assert.Equal(t, want[name][i], binary.LittleEndian.Uint32(v.Value[:]), "field %d", v.FieldId)
			}
			m, err := LookupModel(name)
			require.NoError(t, err)
			capacity := float64(want[name][0]) * float64(want[name][1]) * 1e6
			assert.Equal(t, capacity, m.NVLinkCapacity())
			assert.LessOrEqual(t, m.NVLinkBytesPerSecond, capacity)
			assert.Greater(t, m.NVLinkBytesPerSecond, 0.9*capacity)

			// The sequential schedule's segments and GPM's reading of them.
			peak := 0.0
			for w := range int64(20) {
				for _, seg := range d.Schedule().Segments(w) {
					peak = max(peak, float64(seg.NVLink))
				}
			}
			assert.Positive(t, peak)
			assert.Less(t, peak, m.NVLinkBytesPerSecond)

			// The batching engine's tensor-parallel all-reduce.
			node, err := NewNode(name, "tensor_parallel", 8, 1)
			require.NoError(t, err)
			ep := node.Episode(0)
			peak = 0
			for gpu := range 8 {
				for _, seg := range node.Segments(ep, gpu) {
					peak = max(peak, float64(seg.NVLink))
				}
			}
			t.Logf("tensor_parallel peak: %.3g B/s, %.0f%% of NVLink capacity", peak, 100*peak/capacity)
			assert.Positive(t, peak)
			assert.Less(t, peak, m.NVLinkBytesPerSecond, "NCCL's efficiency keeps it below the data rate")
		})
	}
}

// TestMIGDeviceHasNoUtilization: NVML answers NOT_SUPPORTED for the
// utilisation calls and utilisation samples of a MIG device
// (docs: /work/shared/reference/nvml.md, "Not supported on MIG"); the
// simulated MIG device must answer so too rather than panic in the mock.
func TestMIGDeviceHasNoUtilization(t *testing.T) {
	c := newClock()
	s, err := New("h200", 1, 1, c.now, WithMIG())
	require.NoError(t, err)
	m, ret := s.Device(0).GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	c.advance(2 * time.Second)
	assert.NotPanics(t, func() {
		_, ret = m.GetUtilizationRates()
		assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	})
	for _, kind := range []nvml.SamplingType{nvml.GPU_UTILIZATION_SAMPLES, nvml.MEMORY_UTILIZATION_SAMPLES} {
		assert.NotPanics(t, func() {
			_, _, ret = m.GetSamples(kind, 0)
			assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "samples %d", kind)
		})
	}
}

// TestNVLinkThroughputPerLink: ScopeId names one link, or math.MaxUint32
// all of them (reference nvml.md: "NVLink throughput FI 138/139 (data
// TX/RX, KiB, ScopeId = link, or math.MaxUint32 for all links)"): one
// link's counter is its share of the total, not the total.
func TestNVLinkThroughputPerLink(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h200", 1, 2, c).Device(0)
	c.advance(10 * time.Minute)
	vals := []nvml.FieldValue{
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: math.MaxUint32},
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: 0},
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: 17},
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: 18},
	}
	require.Equal(t, nvml.SUCCESS, d.GetFieldValues(vals))
	all := binary.LittleEndian.Uint64(vals[0].Value[:])
	require.Positive(t, all)
	for _, v := range vals[1:3] {
		require.Equal(t, nvml.SUCCESS, nvml.Return(v.NvmlReturn))
		assert.InDelta(t, float64(all)/18, float64(binary.LittleEndian.Uint64(v.Value[:])), 1, "link %d", v.ScopeId)
	}
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, nvml.Return(vals[3].NvmlReturn), "an H200 has links 0 to 17")
}

// TestScriptedCountersUnitsAndDirections: over activity known exactly, the
// throttle counters count ns, the PCIe counters bytes each in its own
// direction, instant power is an unsigned int of mW, and GPM's bandwidths
// are MiB/s (reference nvml.md: throttle time "in ns as field values",
// FI 197/198 TX/RX bytes, GPM "PCIE_TX/RX_PER_SEC 20/21 (MiB/s)").
func TestScriptedCountersUnitsAndDirections(t *testing.T) {
	c := newClock()
	t0 := c.t.UnixNano()
	seg := Segment{Start: t0 - int64(time.Hour), End: t0 + int64(time.Hour), PowerW: 500, Phase: PhaseDecode,
		ThermalSlowdown: true, Busy: 1, PCIeRx: 3 << 20, PCIeTx: 5 << 20, NVLink: 7 << 20}
	s, err := New("h200", 1, 1, c.now, WithScript([]Segment{seg}))
	require.NoError(t, err)
	d := s.Device(0)
	ids := []uint32{nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, nvml.FI_DEV_PCIE_COUNT_RX_BYTES, nvml.FI_DEV_PCIE_COUNT_TX_BYTES}
	read := func() []uint64 {
		vals := []nvml.FieldValue{{FieldId: ids[0]}, {FieldId: ids[1]}, {FieldId: ids[2]}}
		require.Equal(t, nvml.SUCCESS, d.GetFieldValues(vals))
		out := make([]uint64, len(vals))
		for i, v := range vals {
			require.Equal(t, nvml.SUCCESS, nvml.Return(v.NvmlReturn))
			out[i] = binary.LittleEndian.Uint64(v.Value[:])
		}
		return out
	}
	a := read()
	s1, _ := s.GpmSampleAlloc()
	s2, _ := s.GpmSampleAlloc()
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d, s1))
	c.advance(2 * time.Second)
	b := read()
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d, s2))
	assert.InDelta(t, 2e9, float64(b[0]-a[0]), 1, "thermal slowdown ns")
	assert.InDelta(t, 2*3<<20, float64(b[1]-a[1]), 1, "PCIe RX bytes")
	assert.InDelta(t, 2*5<<20, float64(b[2]-a[2]), 1, "PCIe TX bytes")

	power := []nvml.FieldValue{{FieldId: nvml.FI_DEV_POWER_INSTANT}}
	require.Equal(t, nvml.SUCCESS, d.GetFieldValues(power))
	assert.Equal(t, uint32(nvml.VALUE_TYPE_UNSIGNED_INT), power[0].ValueType)
	assert.Equal(t, uint32(500_000), binary.LittleEndian.Uint32(power[0].Value[:]), "mW")

	metrics := []nvml.GpmMetricId{nvml.GPM_METRIC_PCIE_RX_PER_SEC, nvml.GPM_METRIC_PCIE_TX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC}
	req := nvml.GpmMetricsGetType{NumMetrics: uint32(len(metrics)), Sample1: s1, Sample2: s2}
	for i, id := range metrics {
		req.Metrics[i].MetricId = uint32(id)
	}
	require.Equal(t, nvml.SUCCESS, s.GpmMetricsGet(&req))
	for i, want := range []float64{3, 5, 7} {
		assert.InDelta(t, want, req.Metrics[i].Value, 1e-9, "metric %d, MiB/s", metrics[i])
	}
	req.Sample2 = s1
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, s.GpmMetricsGet(&req), "a sample with itself spans no time")
}

// TestSamplesOneNewSample: a buffer holding one sample newer than
// lastSeen returns it (NOT_FOUND only when nothing is newer, reference
// nvml.md "NOT_FOUND = nothing newer than lastSeen").
func TestSamplesOneNewSample(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h200", 1, 1, c).Device(0)
	c.advance(time.Second)
	_, samples, ret := d.GetSamples(nvml.TOTAL_POWER_SAMPLES, 0)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Greater(t, len(samples), 1)
	_, one, ret := d.GetSamples(nvml.TOTAL_POWER_SAMPLES, samples[len(samples)-2].TimeStamp)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Len(t, one, 1)
	assert.Equal(t, samples[len(samples)-1].TimeStamp, one[0].TimeStamp)
}

// NVML stamps each field value with the read's wall-clock time (µs), and
// the wall clock can step back (NTP after boot): the stamps step back with
// it, while the counters they carry never fall.
func TestFieldTimestampsFollowTheWallClockBack(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h200", 1, 1, c).Device(0)
	read := func() nvml.FieldValue {
		v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION}}
		require.Equal(t, nvml.SUCCESS, d.GetFieldValues(v))
		require.Equal(t, nvml.SUCCESS, nvml.Return(v[0].NvmlReturn))
		return v[0]
	}
	c.advance(time.Second)
	before := read()
	assert.Equal(t, c.t.UnixMicro(), before.Timestamp, "stamped at the read")
	c.advance(-time.Hour)
	after := read()
	assert.Equal(t, c.t.UnixMicro(), after.Timestamp, "stamped at the read, an hour back")
	assert.GreaterOrEqual(t, binary.LittleEndian.Uint64(after.Value[:]), binary.LittleEndian.Uint64(before.Value[:]),
		"the energy counter never falls")
}

// A GPU that was gone (a reset) was not there to sample: drained with the
// lastSeen of before the reset, its buffers hold no sample from the time
// it was away, only those taken since it came back.
func TestNoSamplesFromWhileTheGPUWasGone(t *testing.T) {
	for _, kind := range []nvml.SamplingType{nvml.TOTAL_POWER_SAMPLES, nvml.GPU_UTILIZATION_SAMPLES} {
		c := newClock()
		s := faultyServer(t, c, Fault{Kind: FaultReset, GPU: 0, After: 10 * time.Second, Duration: 5 * time.Second})
		gone, back := c.t.Add(10*time.Second).UnixMicro(), c.t.Add(15*time.Second).UnixMicro()
		c.advance(9 * time.Second)
		_, before, ret := handle(t, s, 0).GetSamples(kind, 0)
		require.Equal(t, nvml.SUCCESS, ret)
		lastSeen := before[len(before)-1].TimeStamp
		c.advance(8 * time.Second) // through the reset, and back for two seconds
		_, after, ret := handle(t, s, 0).GetSamples(kind, lastSeen)
		require.Equal(t, nvml.SUCCESS, ret, "kind %d: samples since the GPU came back", kind)
		for _, smp := range after {
			assert.False(t, smp.TimeStamp >= uint64(gone) && smp.TimeStamp <= uint64(back),
				"kind %d: a sample at %d µs, the GPU gone from %d to %d µs", kind, smp.TimeStamp, gone, back)
		}
	}
}
