package nvmlsim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a settable time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 12, 0, 7, 0, time.UTC)} }

func mustServer(t *testing.T, model string, n int, seed uint64, c *clock) *Server {
	t.Helper()
	s, err := New(model, n, seed, c.now)
	require.NoError(t, err)
	require.Equal(t, nvml.SUCCESS, s.Init())
	return s
}

func TestNewRejectsBadArguments(t *testing.T) {
	_, err := New("h300", 8, 1, nil)
	assert.ErrorContains(t, err, `unknown simulated GPU model "h300": use one of a100, b200, h100, h200`)
	_, err = New("h100", 0, 1, nil)
	assert.ErrorContains(t, err, "1 to 64 GPUs, not 0")
}

func TestSimulationSaysWhatItIs(t *testing.T) {
	s := mustServer(t, "h200", 8, 7, newClock())
	seen := map[string]bool{}
	for i := range 8 {
		d, ret := s.DeviceGetHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, ret)
		uuid, _ := d.GetUUID()
		name, _ := d.GetName()
		assert.True(t, strings.HasPrefix(uuid, "GPU-simulated-h200-"), uuid)
		assert.Equal(t, "NVIDIA H200 141GB HBM3e (simulated)", name)
		assert.False(t, seen[uuid], "UUIDs are unique")
		seen[uuid] = true
		byUUID, ret := s.DeviceGetHandleByUUID(uuid)
		require.Equal(t, nvml.SUCCESS, ret)
		assert.Same(t, d, byUUID)
	}
	_, ret := s.DeviceGetHandleByIndex(8)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
}

type snapshot struct {
	util    nvml.Utilization
	mem     nvml.Memory_v2
	powerMW uint32
	energy  uint64
	temp    uint32
	sm      uint32
}

func read(t *testing.T, d nvml.Device) snapshot {
	t.Helper()
	var s snapshot
	var ret nvml.Return
	s.util, ret = d.GetUtilizationRates()
	require.Equal(t, nvml.SUCCESS, ret)
	s.mem, _ = d.GetMemoryInfo_v2()
	s.powerMW, _ = d.GetPowerUsage()
	s.energy, _ = d.GetTotalEnergyConsumption()
	s.temp, _ = d.GetTemperature(nvml.TEMPERATURE_GPU)
	s.sm, _ = d.GetClockInfo(nvml.CLOCK_SM)
	return s
}

func TestSameSeedSameWorkload(t *testing.T) {
	c1, c2, c3 := newClock(), newClock(), newClock()
	a := mustServer(t, "h100", 2, 1, c1)
	b := mustServer(t, "h100", 2, 1, c2)
	other := mustServer(t, "h100", 2, 2, c3)
	differs := false
	for range 120 {
		for _, c := range []*clock{c1, c2, c3} {
			c.advance(700 * time.Millisecond)
		}
		ra, rb := read(t, a.Device(1)), read(t, b.Device(1))
		assert.Equal(t, ra, rb)
		differs = differs || read(t, other.Device(1)).powerMW != ra.powerMW
	}
	assert.True(t, differs, "another seed gives another workload")
}

func TestReadingsStayInRange(t *testing.T) {
	for _, model := range Models() {
		t.Run(model, func(t *testing.T) {
			c := newClock()
			s := mustServer(t, model, 4, 3, c)
			m, _ := LookupModel(model)
			for range 400 {
				c.advance(1300 * time.Millisecond)
				for i := range 4 {
					r := read(t, s.Device(i))
					assert.LessOrEqual(t, r.util.Gpu, uint32(100))
					assert.LessOrEqual(t, r.util.Memory, uint32(100))
					assert.LessOrEqual(t, float64(r.powerMW)/1000, m.PowerLimitW)
					assert.GreaterOrEqual(t, float64(r.powerMW)/1000, m.IdlePowerW*0.95)
					assert.Equal(t, r.mem.Total, r.mem.Used+r.mem.Free+r.mem.Reserved)
					assert.LessOrEqual(t, r.mem.Used+r.mem.Reserved, r.mem.Total*9/10+1)
					assert.InDelta(t, 55, float64(r.temp), 25)
					assert.LessOrEqual(t, r.sm, m.SMClockMaxMHz)
				}
			}
		})
	}
}

// The energy counter is the integral of power: summing one-second power
// readings (each NVML's one-second average) over a span must give the
// counter's increase over that span.
func TestEnergyIsTheIntegralOfPower(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h200", 1, 5, c).Device(0)
	e0, _ := d.GetTotalEnergyConsumption()
	var sumJ float64
	for range 600 {
		c.advance(time.Second)
		mw, _ := d.GetPowerUsage()
		sumJ += float64(mw) / 1000
	}
	e1, _ := d.GetTotalEnergyConsumption()
	deltaJ := float64(e1-e0) / 1000
	assert.InEpsilon(t, deltaJ, sumJ, 1e-4, "counter %.1f J vs integrated power %.1f J", deltaJ, sumJ)
	// Ten minutes of this workload: between idle and flat-out.
	assert.Greater(t, deltaJ, 75*600.0)
	assert.Less(t, deltaJ, 700*600.0)
}

func TestEnergyCounterNeverGoesBack(t *testing.T) {
	c := newClock()
	d := mustServer(t, "a100", 1, 1, c).Device(0)
	e0, _ := d.GetTotalEnergyConsumption()
	c.advance(-time.Minute) // a wall-clock step backwards
	e1, _ := d.GetTotalEnergyConsumption()
	assert.Equal(t, e0, e1)
}

// Prefill is compute-heavy and near the power limit, decode memory-heavy;
// the KV cache grows through a request and is freed after it.
func TestPhasesHaveTheirSignatures(t *testing.T) {
	c := newClock()
	s := mustServer(t, "h100", 1, 9, c)
	d := s.Device(0)
	sched := d.Schedule()
	w := windowOf(c.t.UnixNano())
	var prefill, decode int
	for _, seg := range sched.Segments(w) {
		switch seg.Phase {
		case PhasePrefill:
			prefill++
			assert.Greater(t, seg.Busy, float32(0.95))
			assert.Less(t, seg.MemBusy, float32(0.45))
			assert.Greater(t, seg.PowerW, 0.85*700)
		case PhaseDecode:
			decode++
			assert.Greater(t, seg.MemBusy, float32(0.6))
			assert.Less(t, seg.PowerW, 0.7*700)
			assert.Greater(t, seg.KVTo, seg.KVFrom, "the KV cache grows while decoding")
		case PhaseIdle:
			assert.Zero(t, seg.Busy)
			assert.Zero(t, seg.KVTo)
		}
	}
	assert.Positive(t, prefill)
	assert.Equal(t, prefill, decode, "every request has both phases")

	// Read memory at the end of a decode and in the idle gap after it.
	for _, seg := range sched.Segments(w) {
		if seg.Phase != PhaseDecode {
			continue
		}
		c.t = time.Unix(0, seg.End-int64(time.Millisecond))
		full, _ := d.GetMemoryInfo_v2()
		c.t = time.Unix(0, seg.End+int64(time.Millisecond))
		freed, _ := d.GetMemoryInfo_v2()
		assert.Greater(t, full.Used, freed.Used)
		break
	}
}

func TestScheduleCoversEachWindowExactly(t *testing.T) {
	m, _ := LookupModel("b200")
	sched := NewSchedule(m, 11, 3)
	for w := int64(29_000_000); w < 29_000_050; w++ {
		segs := sched.Segments(w)
		require.NotEmpty(t, segs)
		assert.Equal(t, w*int64(Window), segs[0].Start)
		assert.Equal(t, (w+1)*int64(Window), segs[len(segs)-1].End, "no request crosses a window's end")
		for i := 1; i < len(segs); i++ {
			assert.Equal(t, segs[i-1].End, segs[i].Start, "segments are contiguous")
			assert.Less(t, segs[i].Start, segs[i].End)
		}
	}
	// Revisiting an evicted window regenerates the same segments.
	first := append([]Segment(nil), sched.Segments(29_000_000)...)
	assert.Equal(t, first, sched.Segments(29_000_000))
}

func TestIntegrateAcrossWindows(t *testing.T) {
	m, _ := LookupModel("h100")
	sched := NewSchedule(m, 1, 0)
	from := 100*int64(Window) - int64(30*time.Second)
	to := 100*int64(Window) + int64(30*time.Second)
	whole := sched.Integrate(from, to)
	left := sched.Integrate(from, 100*int64(Window))
	right := sched.Integrate(100*int64(Window), to)
	assert.InDelta(t, 60, whole.Seconds, 1e-9)
	assert.InDelta(t, whole.Joules, left.Joules+right.Joules, 1e-6)
	assert.InDelta(t, whole.BusySeconds, left.BusySeconds+right.BusySeconds, 1e-9)
	assert.True(t, math.Max(left.MaxPowerW, right.MaxPowerW) == whole.MaxPowerW)
	assert.Zero(t, sched.Integrate(to, from).Seconds)
}

// The mock framework records every call it serves; the simulation's dynamic
// readings must bypass it so a long run does not grow without bound.
func TestDynamicReadingsAreNotRecordedByTheMock(t *testing.T) {
	c := newClock()
	d := mustServer(t, "h100", 1, 1, c).Device(0)
	for range 100 {
		c.advance(time.Second)
		read(t, d)
		d.GetMemoryInfo()
		d.GetEnforcedPowerLimit()
		d.GetPerformanceState()
		d.GetFanSpeed()
	}
	assert.Empty(t, d.Device.GetUtilizationRatesCalls())
	assert.Empty(t, d.Device.GetMemoryInfoCalls())
	assert.Empty(t, d.Device.GetPowerUsageCalls())
}

func TestLookupSymbolIsTruthful(t *testing.T) {
	s := mustServer(t, "h100", 1, 1, newClock())
	assert.NoError(t, s.Extensions().LookupSymbol("nvmlDeviceGetTotalEnergyConsumption"))
	assert.Error(t, s.Extensions().LookupSymbol("nvmlDeviceGetNvLinkState"), "not simulated, so reported missing")
}
