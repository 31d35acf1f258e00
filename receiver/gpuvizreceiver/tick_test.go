package gpuvizreceiver

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// burstScript is decode-like memory-bound work with a 200 ms compute-bound,
// power-capped burst at burstAt (offsets from the script's start).
const (
	burstAt  = 1300 * time.Millisecond
	burstLen = 200 * time.Millisecond
)

func burstScript(t0 time.Time) []nvmlsim.Segment {
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	memoryBound := nvmlsim.Segment{Phase: nvmlsim.PhaseDecode, PowerW: 450, Busy: 1, MemBusy: 0.9, SMActive: 0.5, Tensor: 0.1, DRAM: 0.85}
	burst := nvmlsim.Segment{Phase: nvmlsim.PhasePrefill, PowerW: 690, PowerCapped: true, Busy: 1, MemBusy: 0.3, SMActive: 0.95, Tensor: 0.9, DRAM: 0.3}
	before, during, after := memoryBound, burst, memoryBound
	before.Start, before.End = at(-time.Hour), at(burstAt)
	during.Start, during.End = at(burstAt), at(burstAt+burstLen)
	after.Start, after.End = at(burstAt+burstLen), at(time.Hour)
	return []nvmlsim.Segment{before, during, after}
}

// readBurst reads the scripted GPU from t0 for (at least) 10 s, the
// sampling clock ticking when samples are on, and returns every point
// handed on.
func readBurst(t *testing.T, cfg *Config) pmetric.Metrics {
	t.Helper()
	t0 := time.Unix(1_800_000_000, 0)
	clock := newVirtualClock(t0)
	lib, err := nvmlsim.New("h200", 1, 1, clock.now, nvmlsim.WithScript(burstScript(t0)))
	require.NoError(t, err)
	require.Equal(t, nvml.SUCCESS, lib.Init())
	d := startDriven(t, cfg, lib, BackendSimulated, clock)
	var batches []pmetric.Metrics
	scrape := func() {
		m, err := d.Scrape(context.Background())
		require.NoError(t, err)
		batches = append(batches, m)
	}
	scrape()
	if cfg.Samples.Enabled {
		d.Tick() // the tick at t0 opens the GPM interval
		// Two flush intervals more: a flush carries the ticks before it,
		// and records the latest point of a run.
		for clock.now().Before(t0.Add(10*time.Second + 2*cfg.Samples.FlushInterval)) {
			clock.advance(cfg.Samples.Interval)
			if m, ok := d.Tick(); ok {
				batches = append(batches, m)
			}
		}
	} else {
		clock.advance(10 * time.Second)
	}
	scrape()
	return joinBatches(batches)
}

// tickSeries is one metric's value at every tick of the first 10 s, by time
// offset: a point is the value since the previous one, so a run of equal
// values the receiver left the inner points out of reads back whole.
func tickSeries(m pmetric.Metrics, metric string, match map[string]any, t0 time.Time) map[time.Duration]float64 {
	points := map[time.Duration]float64{}
	forEachPointTS(m, func(name string, attrs map[string]any, ts pcommon.Timestamp, v float64) {
		if name != metric {
			return
		}
		for k, want := range match {
			if attrs[k] != want {
				return
			}
		}
		points[ts.AsTime().Sub(t0)] = v
	})
	return stepsAtTicks(points, defaultConfig().Samples.Interval, 10*time.Second)
}

// stepsAtTicks reads a series whose points each hold since the previous
// one at every tick up to end, from its first point on.
func stepsAtTicks(points map[time.Duration]float64, interval, end time.Duration) map[time.Duration]float64 {
	at := slices.Sorted(maps.Keys(points))
	out := map[time.Duration]float64{}
	if len(at) == 0 {
		return out
	}
	for tick := at[0]; tick <= end; tick += interval {
		if i, _ := slices.BinarySearch(at, tick); i < len(at) {
			out[tick] = points[at[i]]
		}
	}
	return out
}

// The done-means test of the sampling clock: a 200 ms compute burst inside
// a memory-bound stretch shows in tick-resolution tensor and DRAM activity,
// energy and throttle share, at the ticks that hold it and nowhere else; a
// 10 s scrape averages it away.
func TestBurstIsVisibleAtTickResolution(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	m := readBurst(t, defaultConfig())
	assertStrictlyIncreasing(t, seriesPoints([]pmetric.Metrics{m}))
	interval := defaultConfig().Samples.Interval
	// The one tick holding the burst ends at 1.5 s: 50 ms memory-bound, 200 ms burst.
	burstTick := (burstAt + burstLen + interval - 1) / interval * interval
	share := float64(burstLen) / float64(interval)

	tensor := tickSeries(m, "nvidia.gpu.tensor.activity", nil, t0)
	dram := tickSeries(m, "nvidia.gpu.dram.activity", nil, t0)
	require.Len(t, tensor, int(10*time.Second/interval), "a GPM point every tick after the first")
	// What no label reads is recorded on flush ticks only (0.75 s, 1.75 s, ...).
	assert.Equal(t, 10, countPoints(m, "nvidia.gpu.sm.occupancy"))
	// Runs of equal values keep their ends: tensor activity changes at the
	// burst's tick only. The first point (0.25 s), the end of the run
	// before the burst (1.25 s), the burst (1.5 s), the return (1.75 s, a
	// flush tick too) and the other flush ticks' latest points (0.75 s,
	// 2.75 s to 9.75 s) are all there is.
	assert.Equal(t, 4+1+8, countPoints(m, "nvidia.gpu.tensor.activity"))
	for at, v := range tensor {
		if at == burstTick {
			assert.InDelta(t, share*0.9+(1-share)*0.1, v, 1e-3, "tensor activity of the burst's tick")
			assert.InDelta(t, share*0.3+(1-share)*0.85, dram[at], 1e-3, "DRAM activity of the burst's tick")
			continue
		}
		assert.InDelta(t, 0.1, v, 1e-3, "tensor at %v", at)
		assert.InDelta(t, 0.85, dram[at], 1e-3, "DRAM at %v", at)
	}

	// The throttled share between consecutive throttle-time points.
	throttle := tickSeries(m, "nvidia.gpu.throttle.time", map[string]any{"nvidia.gpu.throttle.reason": "sw_power_cap"}, t0)
	for at := interval; at <= 10*time.Second; at += interval {
		throttled := (throttle[at] - throttle[at-interval]) / interval.Seconds()
		if at == burstTick {
			assert.InDelta(t, share, throttled, 1e-3, "throttled share of the burst's tick")
			continue
		}
		assert.InDelta(t, 0, throttled, 1e-3, "throttled share at %v", at)
	}
	// The energy counter, read on flush ticks only (0.75 s, 1.75 s, ...):
	// mean power between them, the burst inside the second that holds it.
	flush := defaultConfig().Samples.FlushInterval
	var energy []float64
	forEachPointTS(m, func(name string, _ map[string]any, _ pcommon.Timestamp, v float64) {
		if name == "hw.energy" {
			energy = append(energy, v)
		}
	})
	require.Len(t, energy, 11, "the flush ticks handed on, 0.75 s to 10.75 s")
	for i := 1; i < len(energy); i++ {
		watts := (energy[i] - energy[i-1]) / flush.Seconds()
		if i == 1 { // 0.75 s to 1.75 s
			b := burstLen.Seconds() / flush.Seconds()
			assert.InDelta(t, b*690+(1-b)*450, watts, 1, "power of the second holding the burst")
			continue
		}
		assert.InDelta(t, 450, watts, 1, "power of second %d", i)
	}

	// Read once per 10 s scrape, the burst is a blur.
	scraped := tickSeries(readBurst(t, scrapeOnly()), "nvidia.gpu.tensor.activity", nil, t0)
	require.Len(t, scraped, 1)
	for _, v := range scraped {
		assert.InDelta(t, 0.02*0.9+0.98*0.1, v, 1e-3)
	}
}

func TestTickFallsBackWhereTheDriverLacksAField(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	dev.GetFieldValuesFunc = withoutFields(dev.GetFieldValuesFunc, nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION, nvml.FI_DEV_POWER_INSTANT)
	clock := newVirtualClock(time.Now())
	d := startDriven(t, defaultConfig(), lib, BackendNVML, clock)
	var batches []pmetric.Metrics
	for range 8 {
		clock.advance(defaultConfig().Samples.Interval)
		if m, ok := d.Tick(); ok {
			batches = append(batches, m)
		}
	}
	m := joinBatches(batches)
	// The fixture's dedicated calls: 123456789 mJ + 1 J a call, 412345 mW.
	// The energy counter on the flush tick (the 4th) only; the 8th's is
	// handed on at the next flush.
	assert.Equal(t, []float64{123457.789}, pointsOf(m, "hw.energy", nil)[dev.UUID])
	// A run: its first point (tick 1) and its latest at each hand-on (ticks 3 and 7).
	assert.Equal(t, []float64{412.345, 412.345, 412.345}, pointsOf(m, "hw.power", nil)[dev.UUID])
	// Ticks 1-7 were handed on (a flush carries the ticks before it), and
	// every tick, the first included, fell back.
	assert.Len(t, dev.GetTotalEnergyConsumptionCalls(), 2, "the fallback on flush ticks, from the first that found the field missing on")
	assert.Len(t, dev.GetPowerUsageCalls(), 8)
	assert.Len(t, dev.GetFieldValuesCalls(), 8, "the throttle times are still fields")
}

func TestGPMHeldElsewhereIsReported(t *testing.T) {
	lib := fixtureServer(2)
	inUse := true
	lib.GpmSampleGetFunc = func(dev nvml.Device, _ nvml.GpmSample) nvml.Return {
		if inUse && dev == lib.Devices[1] {
			return nvml.ERROR_IN_USE
		}
		return nvml.SUCCESS
	}
	clock := newVirtualClock(time.Now())
	d := startDriven(t, defaultConfig(), lib, BackendNVML, clock)
	status := func() map[string]map[string]float64 {
		m, err := d.Scrape(context.Background())
		require.NoError(t, err)
		out := map[string]map[string]float64{}
		forEachPoint(m, func(name string, attrs map[string]any, v float64) {
			if name == "nvidia.gpu.gpm.status" {
				id := attrs["hw.id"].(string)
				if out[id] == nil {
					out[id] = map[string]float64{}
				}
				out[id][attrs["nvidia.gpu.gpm.state"].(string)] = v
			}
		})
		return out
	}
	tick := func(n int) {
		for range n {
			clock.advance(defaultConfig().Samples.Interval)
			d.Tick()
		}
	}
	tick(2)
	got := status()
	assert.Equal(t, map[string]float64{"active": 1, "in_use": 0, "unavailable": 0}, got[device(lib, 0).UUID])
	assert.Equal(t, map[string]float64{"active": 0, "in_use": 1, "unavailable": 0}, got[device(lib, 1).UUID])
	inUse = false // the other client lets go
	tick(2)
	assert.Equal(t, map[string]float64{"active": 1, "in_use": 0, "unavailable": 0}, status()[device(lib, 1).UUID])
}

// countPoints counts a metric's points in the first 10 s after the burst
// script's start.
func countPoints(m pmetric.Metrics, metric string) int {
	t0 := time.Unix(1_800_000_000, 0)
	n := 0
	forEachPointTS(m, func(name string, _ map[string]any, ts pcommon.Timestamp, _ float64) {
		if name == metric && !ts.AsTime().After(t0.Add(10*time.Second)) {
			n++
		}
	})
	return n
}

func TestRunsOfEqualValuesKeepTheirEnds(t *testing.T) {
	type point struct {
		tick int
		v    float64
	}
	for name, tc := range map[string]struct {
		values []float64 // one per tick
		flush  int       // a hand-on after every flush-th tick (0: none)
		want   []point
	}{
		"changing every tick":  {values: []float64{1, 2, 3}, want: []point{{0, 1}, {1, 2}, {2, 3}}},
		"a run, then a change": {values: []float64{1, 1, 1, 1, 2}, want: []point{{0, 1}, {3, 1}, {4, 2}}},
		"a run to the end: its end waits for the next change or hand-on": {values: []float64{5, 5, 5}, want: []point{{0, 5}}},
		"hand-ons carry the latest point":                                {values: []float64{0, 0, 0, 0, 0, 0, 7}, flush: 2, want: []point{{0, 0}, {1, 0}, {3, 0}, {5, 0}, {6, 7}}},
		"a hand-on inside a run, then a change":                          {values: []float64{4, 4, 4, 4, 9}, flush: 3, want: []point{{0, 4}, {2, 4}, {3, 4}, {4, 9}}},
	} {
		t.Run(name, func(t *testing.T) {
			var run seriesRun
			var got []point
			record := func(ts pcommon.Timestamp, x float64) { got = append(got, point{int(ts), x}) }
			for i, v := range tc.values {
				run.take(pcommon.Timestamp(i), v, record)
				if tc.flush > 0 && (i+1)%tc.flush == 0 {
					run.flush(record)
				}
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestRunsLoseNothing is the property the run compression rests on: read
// as "each point holds since the previous one", what is recorded gives
// back every tick's value from the first point to the last recorded one,
// and a hand-on gives back every tick up to it.
func TestRunsLoseNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + rng.IntN(60)
		values := make([]float64, n)
		for i := range values {
			if i == 0 || rng.IntN(3) == 0 {
				values[i] = float64(rng.IntN(4)) // few distinct values: long runs
			} else {
				values[i] = values[i-1]
			}
		}
		flushEvery := 1 + rng.IntN(6)
		var run seriesRun
		points := map[time.Duration]float64{}
		last := time.Duration(-1)
		record := func(ts pcommon.Timestamp, x float64) {
			require.Greater(t, time.Duration(ts), last, "in time order, once")
			points[time.Duration(ts)], last = x, time.Duration(ts)
		}
		for i, v := range values {
			run.take(pcommon.Timestamp(i), v, record)
			if (i+1)%flushEvery == 0 {
				run.flush(record)
				require.Equal(t, time.Duration(i), last, "a hand-on carries the latest tick")
			}
		}
		for tick, v := range stepsAtTicks(points, 1, last) {
			require.Equal(t, values[int(tick)], v, "tick %d of %v (hand-on every %d)", tick, values, flushEvery)
		}
	}
}

// The driver's field timestamps (the CPU's wall clock, µs) step back with
// the system clock (NTP after boot): the readings go on, rather than stop
// until the clock passes the newest timestamp seen.
func TestFieldValuesAfterTheClockSteppedBack(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	inner := dev.GetFieldValuesFunc
	var calls atomic.Int64
	base := time.Now().UnixMicro()
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		ret := inner(values)
		c := calls.Add(1)
		ts := base + c*1_000_000
		if c > 2 {
			ts -= 3600 * 1_000_000 // the clock was stepped back an hour
		}
		for i := range values {
			values[i].Timestamp = ts
		}
		return ret
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	var power []int
	for range 5 {
		m, _ := s.scrape(context.Background())
		power = append(power, len(pointsOf(m, "hw.power", nil)[dev.UUID]))
	}
	assert.Equal(t, []int{1, 1, 1, 1, 1}, power, "hw.power points per scrape")
}

// The same for the driver's sample buffers: the newest sample seen, past
// the stepped-back clock, does not hide the samples after it.
func TestDriverSamplesAfterTheClockSteppedBack(t *testing.T) {
	var st sampleState
	lib := fixtureServer(1)
	dev := device(lib, 0)
	var now uint64 = 1_800_000_000_000_000 // µs since 1970
	dev.GetSamplesFunc = func(kind nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
		// NVML returns the samples newer than lastSeen.
		var out []nvml.Sample
		for _, ts := range []uint64{now - 100_000, now} {
			if ts > lastSeen {
				out = append(out, nvml.Sample{TimeStamp: ts})
			}
		}
		if len(out) == 0 {
			return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_FOUND
		}
		return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
	}
	var counts []int
	for step := range 4 {
		now += 1_000_000
		if step == 2 {
			now -= 3600 * 1_000_000
		}
		r := tickReading{at: pcommon.Timestamp(now * 1000)}
		require.Equal(t, nvml.SUCCESS, st.drain(dev, &r))
		counts = append(counts, len(r.samples))
	}
	assert.Equal(t, []int{8, 8, 8, 8}, counts, "samples per drain (2 per buffer, 4 buffers)")
}

// One buffer that fails does not keep the others from being drained: a
// driver that answers ERROR_UNKNOWN for the utilization samples, every
// time, still has its power samples read. The failure is still reported.
func TestDriverSamplesOneFailingBufferSparesTheOthers(t *testing.T) {
	var st sampleState
	lib := fixtureServer(1)
	dev := device(lib, 0)
	const now uint64 = 1_800_000_000_000_000 // µs since 1970
	dev.GetSamplesFunc = func(kind nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
		if kind == nvml.GPU_UTILIZATION_SAMPLES {
			return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_UNKNOWN
		}
		return nvml.VALUE_TYPE_UNSIGNED_INT, []nvml.Sample{{TimeStamp: now - 100_000}}, nvml.SUCCESS
	}
	r := tickReading{at: pcommon.Timestamp(now * 1000)}
	assert.Equal(t, nvml.ERROR_UNKNOWN, st.drain(dev, &r))
	var kinds []nvml.SamplingType
	for _, smp := range r.samples {
		kinds = append(kinds, sampleKinds[smp.kind])
	}
	assert.ElementsMatch(t, []nvml.SamplingType{nvml.MEMORY_UTILIZATION_SAMPLES, nvml.TOTAL_POWER_SAMPLES, nvml.PROCESSOR_CLK_SAMPLES}, kinds)
}

// A re-partition between ticks can give a new GPU instance the ID of one
// destroyed (GPU instance 1: MIG-a's 3g, then MIG-x's 4g): no GPM interval
// is rated across the two, and the new one is measured from its second
// sample on. A compute instance added to a GPU instance, or one of its
// compute instances destroyed, leaves it the same instance.
func TestTickMIGInstanceIDReusedIsNotRatedAcrossInstances(t *testing.T) {
	lib := fixtureServer(1)
	var dev nvml.Device = device(lib, 0)
	current := "MIG-a" // the instance GPU instance 1 is now
	from := map[nvml.GpmSample]string{}
	lib.GpmMigSampleGetFunc = func(_ nvml.Device, _ int, smp nvml.GpmSample) nvml.Return {
		from[smp] = current
		return nvml.SUCCESS
	}
	var rated [][2]string
	lib.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		rated = append(rated, [2]string{from[m.Sample1], from[m.Sample2]})
		return nvml.SUCCESS
	}
	var handle atomic.Pointer[nvml.Device]
	handle.Store(&dev)
	tk := &tickState{dev: dev, handle: &handle, logger: zap.NewNop(), gpm: newGPMState(lib), wantMIG: true}
	layout := func(insts ...migInstance) { tk.migLayout.Store(&insts) }
	at := time.Unix(1_800_000_000, 0)
	tick := func() []string {
		at = at.Add(time.Second)
		var measured []string
		for _, a := range tk.read(lib, symbols{}, at, false).mig {
			measured = append(measured, a.inst.uuid)
		}
		return measured
	}

	layout(migInstance{uuid: "MIG-a", profile: "3g.40gb", gi: 1})
	assert.Empty(t, tick(), "the first sample opens the interval")
	assert.Equal(t, []string{"MIG-a"}, tick())

	current = "MIG-x"
	layout(migInstance{uuid: "MIG-x", profile: "4g.40gb", gi: 1})
	assert.Empty(t, tick(), "the new instance's first sample opens its interval")
	assert.Equal(t, []string{"MIG-x"}, tick())

	layout(migInstance{uuid: "MIG-x", profile: "4g.40gb", gi: 1}, migInstance{uuid: "MIG-y", profile: "4g.40gb", gi: 1, ci: 1})
	assert.Equal(t, []string{"MIG-x", "MIG-y"}, tick(), "a compute instance more: the same GPU instance")

	layout(migInstance{uuid: "MIG-y", profile: "4g.40gb", gi: 1, ci: 1})
	assert.Equal(t, []string{"MIG-y"}, tick(), "its first compute instance gone, the other left: the same GPU instance")

	require.NotEmpty(t, rated)
	for _, r := range rated {
		assert.Equal(t, r[0], r[1], "one interval rated across two instances")
	}
}
