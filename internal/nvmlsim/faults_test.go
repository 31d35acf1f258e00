package nvmlsim

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func faultyServer(t *testing.T, c *clock, faults ...Fault) *Server {
	t.Helper()
	s, err := New("h200", 4, 1, c.now, WithScenario(DefaultScenario), WithFaults(faults))
	require.NoError(t, err)
	require.Equal(t, nvml.SUCCESS, s.Init())
	return s
}

func handle(t *testing.T, s *Server, i int) nvml.Device {
	t.Helper()
	d, ret := s.DeviceGetHandleByIndex(i)
	require.Equal(t, nvml.SUCCESS, ret)
	return d
}

func TestFaultValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault Fault
		err   string
	}{
		{"unknown kind", Fault{Kind: "meltdown"}, `kind: "meltdown" is not a fault`},
		{"no such GPU", Fault{Kind: FaultError, GPU: 4}, "gpu: there is no GPU 4: the server has 4 (0 to 3)"},
		{"unknown call", Fault{Kind: FaultHang, Calls: []string{"nvmlDeviceGetFanSpeed"}, Sleep: time.Second}, `calls[0]: "nvmlDeviceGetFanSpeed" cannot be faulted here`},
		{"hang without calls", Fault{Kind: FaultHang, Sleep: time.Second}, "calls: a hang fault names at least one entry point"},
		{"hang without sleep", Fault{Kind: FaultHang, Calls: []string{"nvmlDeviceGetTemperature"}}, "sleep: 0s: a hang fault sleeps"},
		{"bad error", Fault{Kind: FaultError, Error: "enoent"}, `error: "enoent" is not an injectable error`},
		{"rate above 1", Fault{Kind: FaultError, Rate: 1.5}, "rate: 1.5 is not a share of calls"},
		{"missing a required symbol", Fault{Kind: FaultMissing, Calls: []string{"nvmlDeviceGetTemperature"}}, `calls[0]: "nvmlDeviceGetTemperature" cannot be faulted here`},
		{"missing later", Fault{Kind: FaultMissing, Calls: []string{"nvmlGpmSampleGet"}, After: time.Second}, "after: missing entry points are missing from the start"},
		{"reset without duration", Fault{Kind: FaultReset}, "duration: a reset lasts a positive time"},
		{"storm without rate", Fault{Kind: FaultXidStorm, Xid: 13}, "rate: 0 Xids a second is out of range"},
		{"storm too fast", Fault{Kind: FaultXidStorm, Xid: 13, Rate: maxXidRate + 1}, "rate: 10001 Xids a second is out of range"},
		{"storm without code", Fault{Kind: FaultXidStorm, Rate: 10}, "xid: 0: an xid_storm fault raises a nonzero Xid code"},
		{"every not beyond duration", Fault{Kind: FaultError, Duration: time.Minute, Every: time.Minute}, "every: 1m0s: a repeating fault lasts a positive duration shorter than every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, tc.fault.Validate(4), tc.err)
			_, err := New("h200", 4, 1, nil, WithFaults([]Fault{tc.fault}))
			assert.ErrorContains(t, err, "faults[0]."+tc.err)
		})
	}
	ok := Fault{Kind: FaultError, GPU: 3, Calls: []string{"nvmlDeviceGetTemperature"}, Error: "timeout", Rate: 0.5, After: time.Second, Duration: time.Second, Every: time.Minute}
	assert.NoError(t, ok.Validate(4))
	every := Fault{Kind: FaultError, Rate: 1}
	assert.NoError(t, every.Validate(4), "a rate of 1 fails every call")
	fastest := Fault{Kind: FaultXidStorm, Xid: 13, Rate: maxXidRate}
	assert.NoError(t, fastest.Validate(4))
}

func TestFaultWindow(t *testing.T) {
	once := Fault{After: 10 * time.Second, Duration: 5 * time.Second}
	forever := Fault{After: 10 * time.Second}
	cycling := Fault{After: 10 * time.Second, Duration: 5 * time.Second, Every: 20 * time.Second}
	for _, tc := range []struct {
		f       Fault
		at      time.Duration
		n       int64
		inside  bool
		comment string
	}{
		{once, 9 * time.Second, -1, false, "before"},
		{once, 10 * time.Second, 0, true, "at the start"},
		{once, 15 * time.Second, 0, false, "at the end"},
		{forever, time.Hour, 0, true, "no duration: until the end"},
		{cycling, 29 * time.Second, 0, false, "between occurrences"},
		{cycling, 31 * time.Second, 1, true, "second occurrence"},
		{cycling, 15 * time.Second, 0, false, "at the end of an occurrence"},
	} {
		n, in := tc.f.window(tc.at)
		assert.Equal(t, tc.n, n, tc.comment)
		assert.Equal(t, tc.inside, in, tc.comment)
	}
}

func TestFaultErrorOnOneGPU(t *testing.T) {
	c := newClock()
	s := faultyServer(t, c, Fault{Kind: FaultError, GPU: 2, Error: "gpu_is_lost", After: 10 * time.Second, Duration: 10 * time.Second})
	faulty, healthy := handle(t, s, 2), handle(t, s, 1)
	_, ret := faulty.GetTemperature(nvml.TEMPERATURE_GPU)
	assert.Equal(t, nvml.SUCCESS, ret, "before the fault")
	c.advance(12 * time.Second)
	_, ret = faulty.GetTemperature(nvml.TEMPERATURE_GPU)
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION}}
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, faulty.GetFieldValues(values))
	assert.Equal(t, uint32(nvml.ERROR_GPU_IS_LOST), values[0].NvmlReturn, "every value says so too")
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, s.GpmSampleGet(faulty, &gpmSample{}), "library calls on the GPU fail too")
	_, ret = healthy.GetTemperature(nvml.TEMPERATURE_GPU)
	assert.Equal(t, nvml.SUCCESS, ret, "the other GPUs are unaffected")
	c.advance(10 * time.Second)
	_, ret = faulty.GetTemperature(nvml.TEMPERATURE_GPU)
	assert.Equal(t, nvml.SUCCESS, ret, "after the fault")
}

func TestFaultErrorRate(t *testing.T) {
	c := newClock()
	s := faultyServer(t, c, Fault{Kind: FaultError, GPU: 0, Calls: []string{"nvmlDeviceGetPowerUsage"}, Rate: 0.3})
	dev := handle(t, s, 0)
	failed := 0
	const calls = 10000
	for range calls {
		if _, ret := dev.GetPowerUsage(); ret != nvml.SUCCESS {
			require.Equal(t, nvml.ERROR_UNKNOWN, ret)
			failed++
		}
	}
	assert.InDelta(t, 0.3, float64(failed)/calls, 0.02)
	_, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
	assert.Equal(t, nvml.SUCCESS, ret, "calls it does not name are not failed")
}

func TestFaultHangBlocksTheCall(t *testing.T) {
	c := newClock()
	const sleep = 50 * time.Millisecond
	s := faultyServer(t, c, Fault{Kind: FaultHang, GPU: 1, Calls: []string{"nvmlDeviceGetTemperature"}, Sleep: sleep})
	start := time.Now()
	_, ret := handle(t, s, 1).GetTemperature(nvml.TEMPERATURE_GPU)
	assert.Equal(t, nvml.SUCCESS, ret, "a hung call answers once it returns")
	assert.GreaterOrEqual(t, time.Since(start), sleep)
}

func TestFaultUnsupportedAndMissing(t *testing.T) {
	c := newClock()
	s := faultyServer(t, c,
		Fault{Kind: FaultUnsupported, GPU: 0, Calls: []string{"nvmlDeviceGetProcessUtilization", "nvmlGpmQueryDeviceSupport"}},
		Fault{Kind: FaultMissing, Calls: []string{"nvmlGpmSampleGet", "nvmlDeviceGetTotalEnergyConsumption"}})
	dev := handle(t, s, 0)
	_, ret := dev.GetProcessUtilization(0)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	_, ret = s.GpmQueryDeviceSupport(dev)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	_, ret = s.GpmQueryDeviceSupport(handle(t, s, 1))
	assert.Equal(t, nvml.SUCCESS, ret)
	assert.Error(t, s.LookupSymbol("nvmlGpmSampleGet"))
	assert.Error(t, s.LookupSymbol("nvmlDeviceGetTotalEnergyConsumption"))
	assert.NoError(t, s.LookupSymbol("nvmlGpmMetricsGet"))
}

func TestFaultResetRestartsCountersAndHandles(t *testing.T) {
	c := newClock()
	s := faultyServer(t, c, Fault{Kind: FaultReset, GPU: 3, After: 10 * time.Second, Duration: 5 * time.Second})
	old := handle(t, s, 3)
	assert.Same(t, old, handle(t, s, 3), "a handle is the same until a reset")
	c.advance(9 * time.Second)
	before, ret := old.GetTotalEnergyConsumption()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Greater(t, before, uint64(86400*250*1000), "the counter runs from driver load")

	c.advance(2 * time.Second)
	_, ret = old.GetTotalEnergyConsumption()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret, "gone while it resets")
	_, ret = handle(t, s, 3).GetUUID()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret, "a new handle too")

	c.advance(5 * time.Second)
	_, ret = old.GetTotalEnergyConsumption()
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret, "the old handle is invalid after the reset")
	fresh := handle(t, s, 3)
	assert.NotSame(t, old, fresh)
	after, ret := fresh.GetTotalEnergyConsumption()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Less(t, after, uint64(1000*1000*1000), "the counter restarted from zero: 1 s at under 1 kW")
	uuid, ret := fresh.GetUUID()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, simulatedUUID("h200", 1, 3), uuid, "the same GPU")
	other, ret := handle(t, s, 2).GetTotalEnergyConsumption()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Greater(t, other, uint64(86400*250*1000), "the other GPUs keep their counters")
}

func TestFaultXidStorm(t *testing.T) {
	c := newClock()
	s := faultyServer(t, c, Fault{Kind: FaultXidStorm, GPU: 1, Xid: 13, Rate: 100, After: 10 * time.Second, Duration: 2 * time.Second})
	set, _ := s.EventSetCreate()
	_, ret := s.EventSetWait(set, 1)
	assert.Equal(t, nvml.ERROR_TIMEOUT, ret, "no storm yet")
	c.advance(11 * time.Second) // one second into the storm: 100 Xids owed
	for i := range 100 {
		data, ret := s.EventSetWait(set, 1)
		require.Equal(t, nvml.SUCCESS, ret, "Xid %d", i)
		assert.Equal(t, uint64(13), data.EventData)
		assert.Equal(t, uint64(nvml.EventTypeXidCriticalError), data.EventType)
		assert.Same(t, handle(t, s, 1), data.Device, "on the GPU's handle")
	}
	_, ret = s.EventSetWait(set, 1)
	assert.Equal(t, nvml.ERROR_TIMEOUT, ret, "all owed Xids raised")
	c.advance(time.Hour) // the storm ended: its other 100 are owed, then none
	n := 0
	for ; ; n++ {
		if _, ret := s.EventSetWait(set, 1); ret != nvml.SUCCESS {
			break
		}
	}
	assert.Equal(t, 100, n)
}

// TestFaultResetLosesEveryCall: a GPU gone answers ERROR_GPU_IS_LOST from
// any call (reference nvml.md: "GPU gone: ERROR_GPU_IS_LOST from any
// call"; FaultReset: "for Duration every call answers GPU_IS_LOST"), the
// calls the receiver makes beyond faultableCalls too, and a handle from
// before the reset is invalid for them afterwards.
func TestFaultResetLosesEveryCall(t *testing.T) {
	c := newClock()
	s := faultyServer(t, c, Fault{Kind: FaultReset, GPU: 0, After: time.Second, Duration: time.Second})
	old := handle(t, s, 0)
	calls := map[string]func(nvml.Device) nvml.Return{
		"GetMigMode":                func(d nvml.Device) nvml.Return { _, _, r := d.GetMigMode(); return r },
		"GetMaxMigDeviceCount":      func(d nvml.Device) nvml.Return { _, r := d.GetMaxMigDeviceCount(); return r },
		"GetCurrPcieLinkGeneration": func(d nvml.Device) nvml.Return { _, r := d.GetCurrPcieLinkGeneration(); return r },
		"GetMaxPcieLinkWidth":       func(d nvml.Device) nvml.Return { _, r := d.GetMaxPcieLinkWidth(); return r },
		"GetEncoderUtilization":     func(d nvml.Device) nvml.Return { _, _, r := d.GetEncoderUtilization(); return r },
		"GetDecoderUtilization":     func(d nvml.Device) nvml.Return { _, _, r := d.GetDecoderUtilization(); return r },
		"GetFanSpeed":               func(d nvml.Device) nvml.Return { _, r := d.GetFanSpeed(); return r },
		"GetSupportedEventTypes":    func(d nvml.Device) nvml.Return { _, r := d.GetSupportedEventTypes(); return r },
		"GetMinorNumber":            func(d nvml.Device) nvml.Return { _, r := d.GetMinorNumber(); return r },
		"RegisterEvents":            func(d nvml.Device) nvml.Return { return d.RegisterEvents(nvml.EventTypeXidCriticalError, nil) },
	}
	c.advance(1500 * time.Millisecond)
	for name, call := range calls {
		assert.Equal(t, nvml.ERROR_GPU_IS_LOST, call(old), "%s while the GPU is gone", name)
	}
	c.advance(time.Second)
	for name, call := range calls {
		assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, call(old), "%s on a handle from before the reset", name)
	}
	_, _, ret := handle(t, s, 0).GetMigMode()
	assert.Equal(t, nvml.SUCCESS, ret, "a new handle works")
}

// TestFaultXidStormRepeats: a repeating storm raises its Xids afresh in
// every occurrence.
func TestFaultXidStormRepeats(t *testing.T) {
	c := newClock()
	s := faultyServer(t, c, Fault{Kind: FaultXidStorm, GPU: 0, Xid: 79, Rate: 10, Duration: time.Second, Every: time.Minute})
	set, _ := s.EventSetCreate()
	count := func() int {
		n := 0
		for ; ; n++ {
			if _, ret := s.EventSetWait(set, 1); ret != nvml.SUCCESS {
				return n
			}
		}
	}
	c.advance(2 * time.Second)
	assert.Equal(t, 10, count(), "the first occurrence")
	c.advance(time.Minute)
	assert.Equal(t, 10, count(), "the second")
}
