package nvmlsim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// FaultKind is what a Fault does to a simulated GPU.
type FaultKind string

const (
	// FaultError makes calls fail with Error, a Rate share of them.
	FaultError FaultKind = "error"
	// FaultHang makes every call of Calls block for Sleep.
	FaultHang FaultKind = "hang"
	// FaultUnsupported makes Calls answer NOT_SUPPORTED, as a GPU or driver
	// without the feature does.
	FaultUnsupported FaultKind = "unsupported"
	// FaultMissing removes the optional entry points Calls from the library,
	// as an older driver lacks them: LookupSymbol reports them missing.
	FaultMissing FaultKind = "missing"
	// FaultReset resets the GPU: for Duration every call answers
	// GPU_IS_LOST; then its cumulative counters restart from zero and the
	// handles issued before answer INVALID_ARGUMENT, as an invalid handle
	// does, until a new one is taken.
	FaultReset FaultKind = "reset"
	// FaultXidStorm raises Xid critical errors (code Xid) at Rate per second.
	FaultXidStorm FaultKind = "xid_storm"
)

// Fault is one fault injected into a simulated server, through the same
// nvml.Interface the receiver reads real GPUs through. Times count from
// when the server's faults are armed (WithFaults, at New).
type Fault struct {
	Kind FaultKind `mapstructure:"kind"`
	// GPU is the index of the faulty GPU (not for missing).
	GPU int `mapstructure:"gpu"`
	// Calls are NVML entry points by their C names
	// (nvmlDeviceGetTemperature, ...): for error, empty means every one;
	// hang, unsupported and missing need at least one.
	Calls []string `mapstructure:"calls"`
	// Error is error's return: unknown, timeout or gpu_is_lost.
	Error string `mapstructure:"error"`
	// Rate is error's share of failing calls, (0, 1]; xid_storm's Xids a second.
	Rate float64 `mapstructure:"rate"`
	// Sleep is how long a hung call blocks.
	Sleep time.Duration `mapstructure:"sleep"`
	// Xid is xid_storm's code.
	Xid uint64 `mapstructure:"xid"`
	// After is when the fault starts.
	After time.Duration `mapstructure:"after"`
	// Duration is how long it lasts; 0 means until the end (reset: how
	// long the GPU is gone, which must be set).
	Duration time.Duration `mapstructure:"duration"`
	// Every repeats the fault: it starts again every Every after After.
	Every time.Duration `mapstructure:"every"`

	_ struct{}
}

// faultErrors are the returns an error fault can inject.
var faultErrors = map[string]nvml.Return{
	"unknown":     nvml.ERROR_UNKNOWN,
	"timeout":     nvml.ERROR_TIMEOUT,
	"gpu_is_lost": nvml.ERROR_GPU_IS_LOST,
}

// maxXidRate bounds a storm: beyond it the simulation would cost more CPU
// than the receiver it tests.
const maxXidRate = 10000

// faultableCalls are the entry points a fault can name: the device calls
// of faultcalls.go and the GPM calls. A missing fault names optional
// symbols instead.
var faultableCalls = []string{
	"nvmlDeviceGetClockInfo", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetCurrentClocksEventReasons",
	"nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetFieldValues", "nvmlDeviceGetIndex", "nvmlDeviceGetMemoryInfo",
	"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPcieThroughput",
	"nvmlDeviceGetPerformanceState", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetProcessUtilization",
	"nvmlDeviceGetSamples", "nvmlDeviceGetTemperature", "nvmlDeviceGetTotalEnergyConsumption",
	"nvmlDeviceGetUUID", "nvmlDeviceGetUtilizationRates",
	"nvmlGpmMetricsGet", "nvmlGpmMigSampleGet", "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet",
}

// Validate checks f for a server of gpus GPUs, naming the bad field.
func (f *Fault) Validate(gpus int) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	kinds := []FaultKind{FaultError, FaultHang, FaultUnsupported, FaultMissing, FaultReset, FaultXidStorm}
	if !slices.Contains(kinds, f.Kind) {
		names := make([]string, len(kinds))
		for i, k := range kinds {
			names[i] = string(k)
		}
		bad("kind", "%q is not a fault: use one of %s", f.Kind, strings.Join(names, ", "))
		return errors.Join(errs...)
	}
	if f.Kind != FaultMissing && (f.GPU < 0 || f.GPU >= gpus) {
		bad("gpu", "there is no GPU %d: the server has %d (0 to %d)", f.GPU, gpus, gpus-1)
	}
	allowed := faultableCalls
	if f.Kind == FaultMissing {
		allowed = symbols
	}
	for i, c := range f.Calls {
		if !slices.Contains(allowed, c) {
			bad(fmt.Sprintf("calls[%d]", i), "%q cannot be faulted here: use one of %s", c, strings.Join(allowed, ", "))
		}
	}
	needCalls := f.Kind == FaultHang || f.Kind == FaultUnsupported || f.Kind == FaultMissing
	if needCalls && len(f.Calls) == 0 {
		bad("calls", "a %s fault names at least one entry point", f.Kind)
	}
	if f.Kind != FaultError && f.Error != "" {
		bad("error", "only an error fault has one")
	}
	switch f.Kind {
	case FaultError:
		if _, ok := faultErrors[f.errorName()]; !ok {
			bad("error", "%q is not an injectable error: use unknown, timeout or gpu_is_lost", f.Error)
		}
		if f.Rate < 0 || f.Rate > 1 {
			bad("rate", "%v is not a share of calls: 0 (meaning 1) to 1", f.Rate)
		}
	case FaultXidStorm:
		if f.Rate <= 0 || f.Rate > maxXidRate {
			bad("rate", "%v Xids a second is out of range: more than 0, at most %d", f.Rate, maxXidRate)
		}
	default:
		if f.Rate != 0 {
			bad("rate", "only error and xid_storm faults have one")
		}
	}
	if (f.Kind == FaultHang) != (f.Sleep > 0) {
		bad("sleep", "%v: a hang fault sleeps for a positive time, and only a hang fault sleeps", f.Sleep)
	}
	if (f.Kind == FaultXidStorm) != (f.Xid != 0) {
		bad("xid", "%d: an xid_storm fault raises a nonzero Xid code, and only an xid_storm fault has one", f.Xid)
	}
	if f.Kind == FaultMissing {
		if f.After != 0 || f.Duration != 0 || f.Every != 0 {
			bad("after", "missing entry points are missing from the start: after, duration and every do not apply")
		}
		return errors.Join(errs...)
	}
	if f.After < 0 || f.Duration < 0 || f.Every < 0 {
		bad("after", "after, duration and every cannot be negative")
	}
	if f.Kind == FaultReset && f.Duration <= 0 {
		bad("duration", "a reset lasts a positive time (the GPU is gone meanwhile)")
	}
	if f.Every > 0 && (f.Duration == 0 || f.Every <= f.Duration) {
		bad("every", "%v: a repeating fault lasts a positive duration shorter than every (%v)", f.Every, f.Duration)
	}
	return errors.Join(errs...)
}

func (f *Fault) errorName() string {
	if f.Error == "" {
		return "unknown"
	}
	return f.Error
}

// window returns the current occurrence of the fault at elapsed (its
// number, from 0) and whether elapsed is inside it.
func (f *Fault) window(elapsed time.Duration) (int64, bool) {
	t := elapsed - f.After
	if t < 0 {
		return -1, false
	}
	if f.Every == 0 {
		return 0, f.Duration == 0 || t < f.Duration
	}
	n := int64(t / f.Every)
	return n, t%f.Every < f.Duration
}

// covers reports whether the fault applies to call.
func (f *Fault) covers(call string) bool {
	return len(f.Calls) == 0 || slices.Contains(f.Calls, call)
}

// WithFaults injects faults (each valid: Fault.Validate) into the server,
// armed from New on.
func WithFaults(faults []Fault) Option {
	return func(o *options) { o.faults = faults }
}

// faultState is the faults of a server and what they have done.
type faultState struct {
	faults []Fault
	start  time.Time
	now    func() time.Time
	gpus   []*faultGPU

	// storms: the Xids raised so far per xid_storm fault and occurrence.
	mu     sync.Mutex
	raised map[int]stormCount
}

type stormCount struct {
	occurrence int64
	n          int64
}

// faultGPU is one GPU's fault state, shared by all its handles.
type faultGPU struct {
	dev   *Device
	state *faultState
	calls atomic.Uint64 // calls made, the error faults' dice
	// resets counts the resets the GPU came back from; a handle issued
	// before the latest is invalid. current is the valid handle: the same
	// one until the next reset, as NVML's handles are.
	mu      sync.Mutex
	resets  int64
	current *faultDevice
}

// faultDevice is a handle of a GPU with faults: the calls the receiver
// makes pass through enter before they reach the simulated device.
type faultDevice struct {
	*Device
	gpu *faultGPU
	gen int64 // resets done when the handle was issued
}

func (s *Server) armFaults(faults []Fault, now func() time.Time) {
	st := &faultState{faults: faults, start: now(), now: now, raised: map[int]stormCount{}}
	for _, d := range s.devices {
		st.gpus = append(st.gpus, &faultGPU{dev: d, state: st})
	}
	for _, f := range faults {
		if f.Kind == FaultMissing {
			for _, c := range f.Calls {
				delete(s.symbols, c)
			}
		}
	}
	s.faults = st
}

// handle returns a handle of GPU i: with faults, a faultDevice of the
// current generation.
func (s *Server) handle(i int) nvml.Device {
	if s.faults == nil {
		return s.devices[i]
	}
	g := s.faults.gpus[i]
	g.mu.Lock()
	defer g.mu.Unlock()
	g.settleReset()
	if g.current == nil || g.current.gen != g.resets {
		g.current = &faultDevice{Device: g.dev, gpu: g, gen: g.resets}
	}
	return g.current
}

// settleReset brings the GPU's resets up to date: a reset whose time away
// is over restarts the counters once, from when the GPU came back. g.mu is
// held.
func (g *faultGPU) settleReset() {
	st := g.state
	elapsed := st.now().Sub(st.start)
	for _, f := range st.faults {
		if f.Kind != FaultReset || f.GPU != g.dev.Index {
			continue
		}
		n, in := f.window(elapsed)
		done := n + 1 // occurrences whose time away has ended
		if in || n < 0 {
			done = max(n, 0)
		}
		if g.resets < done { // the counters restart as the latest reset ends
			g.resets = done
			back := f.After + time.Duration(done-1)*f.Every + f.Duration
			g.dev.restartCounters(st.start.Add(back).UnixNano())
		}
	}
}

// enter applies the faults to one call on handle h: it returns what the
// call must answer instead, or SUCCESS to make it (after a hang's sleep).
func (h *faultDevice) enter(call string) nvml.Return {
	g := h.gpu
	g.mu.Lock()
	g.settleReset()
	stale := h.gen < g.resets
	g.mu.Unlock()
	if stale {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return g.apply(call)
}

// apply applies the GPU's faults of this moment to one call.
func (g *faultGPU) apply(call string) nvml.Return {
	st := g.state
	elapsed := st.now().Sub(st.start)
	for i := range st.faults {
		f := &st.faults[i]
		if f.GPU != g.dev.Index || f.Kind == FaultMissing || f.Kind == FaultXidStorm {
			continue
		}
		if _, in := f.window(elapsed); !in {
			continue
		}
		switch f.Kind {
		case FaultReset:
			return nvml.ERROR_GPU_IS_LOST
		case FaultError:
			if f.covers(call) && g.fails(f.Rate) {
				return faultErrors[f.errorName()]
			}
		case FaultUnsupported:
			if f.covers(call) {
				return nvml.ERROR_NOT_SUPPORTED
			}
		case FaultHang:
			if f.covers(call) {
				time.Sleep(f.Sleep)
			}
		}
	}
	return nvml.SUCCESS
}

// fails rolls the dice for an error fault of the given rate (0 means 1):
// deterministic in the number of calls made.
func (g *faultGPU) fails(rate float64) bool {
	if rate == 0 || rate >= 1 {
		return true
	}
	n := g.calls.Add(1)
	return float64(mix(uint64(g.dev.Index)<<48^n)%1_000_000) < rate*1_000_000
}

// takeXid raises the next Xid a storm owes by now, if any: a storm raises
// its Xids evenly over each occurrence.
func (st *faultState) takeXid() (gpu int, code uint64, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now().Sub(st.start)
	for i := range st.faults {
		f := &st.faults[i]
		if f.Kind != FaultXidStorm {
			continue
		}
		n, in := f.window(now)
		if n < 0 {
			continue
		}
		into := f.Duration // an occurrence that has ended owes all of its Xids
		if in {
			into = now - f.After - time.Duration(n)*f.Every
		}
		c := st.raised[i]
		if c.occurrence != n {
			c = stormCount{occurrence: n}
		}
		if c.n < int64(into.Seconds()*f.Rate) {
			c.n++
			st.raised[i] = c
			return f.GPU, f.Xid, true
		}
		st.raised[i] = c
	}
	return 0, 0, false
}

// hasStorms reports whether any fault raises Xids.
func (st *faultState) hasStorms() bool {
	return slices.ContainsFunc(st.faults, func(f Fault) bool { return f.Kind == FaultXidStorm })
}
