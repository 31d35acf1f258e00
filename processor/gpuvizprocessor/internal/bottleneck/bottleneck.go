package bottleneck // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"

import (
	"errors"
	"fmt"
	"math"
)

// Label names why a GPU was slow, or idle, during an interval. See the
// package documentation for what each means.
type Label string

// The labels. The package documentation gives each one's meaning and the
// rules that assign it.
const (
	Idle              Label = "idle"
	ComputeBound      Label = "compute_bound"
	MemoryBound       Label = "memory_bound"       // DRAM bandwidth
	InterconnectBound Label = "interconnect_bound" // PCIe or NVLink near capacity
	PowerThrottled    Label = "power_throttled"
	ThermalThrottled  Label = "thermal_throttled"
	MemoryCapacity    Label = "memory_capacity" // memory nearly full
	HostBound         Label = "host_bound"      // requests in flight but the GPU mostly idle: starved by CPU, scheduler or I/O
	Unknown           Label = "unknown"         // not enough signals to say
)

// order is the fixed label order behind Labels and Dominant's tie-breaks.
var order = [...]Label{
	ThermalThrottled,
	PowerThrottled,
	MemoryCapacity,
	InterconnectBound,
	MemoryBound,
	ComputeBound,
	HostBound,
	Idle,
	Unknown,
}

// Labels lists every label once, in a fixed order: the order in which
// [Dominant] breaks ties, from the label that explains slowness best to
// unknown (see the package documentation). Callers must not modify it.
var Labels = append([]Label(nil), order[:]...)

// Inputs are the GPU's signals over one interval. A false Has* means the
// signal was not measured (e.g. no GPM before Hopper): the classifier then
// falls back, never treating missing as zero. A value that is NaN or
// infinite counts as not measured too.
type Inputs struct {
	// NVML utilization.gpu: share of time a kernel ran, 0..1.
	Utilization    float64
	HasUtilization bool
	// NVML utilization.memory: share of time the memory controller was
	// busy, 0..1.
	MemoryController    float64
	HasMemoryController bool
	// GPM: share of SM cycles with a warp resident, over all SMs, 0..1.
	SMActivity    float64
	HasSMActivity bool
	// GPM: share of cycles the tensor pipes were active, 0..1.
	TensorActivity    float64
	HasTensorActivity bool
	// GPM: share of peak DRAM bandwidth used, 0..1.
	DRAMActivity    float64
	HasDRAMActivity bool
	// Memory used / memory limit, 0..1.
	MemoryUsedFraction float64
	HasMemoryUsed      bool
	// Max over directions of PCIe throughput / link capacity, 0..1.
	PCIeFraction float64
	HasPCIe      bool
	// Max over directions of NVLink throughput / NVLink capacity, 0..1.
	NVLinkFraction float64
	HasNVLink      bool
	// Share of the interval clocks were held down by power reasons, 0..1.
	PowerThrottled    float64
	HasPowerThrottled bool
	// Share of the interval clocks were held down by thermal reasons, 0..1.
	ThermalThrottled    float64
	HasThermalThrottled bool
	// Inference requests known to be running on this GPU in the interval.
	RequestsInFlight int
	// Where power is read finer than the other signals (the driver's
	// 20 ms samples against GPM and throttle readings of 250 ms or more),
	// rule 0 places the interval within its readings: Power is the
	// interval's mean power and PowerLimit the limit the driver holds the
	// GPU under; ActivityReadingPower is the mean power over the stretches
	// its tensor and DRAM readings describe, ThrottleReadingPower over
	// those its throttle readings describe (all W, 0 unknown), and
	// ThrottleSpan how many times the interval's length those last (≥ 1).
	Power, PowerLimit                          float64
	ActivityReadingPower, ThrottleReadingPower float64
	ThrottleSpan                               float64
	HasPowerDetail                             bool
}

// Thresholds are the bounds the rules compare signals against, each a
// share in (0, 1]. The package documentation gives every default's
// reasoning.
type Thresholds struct {
	IdleUtilization        float64 // Utilization below: idle (or host_bound if requests in flight); used without SM activity
	BusySMActivity         float64 // GPM: SM activity at/above which the GPU counts as busy; below: idle or host_bound
	ComputeTensor          float64 // tensor activity at/above which work is compute bound
	ComputeSM              float64 // SM activity (without GPM: Utilization) for compute bound without tensor work (FP32 etc.)
	MemoryDRAM             float64 // DRAM activity at/above which memory bound
	MemoryControllerBusy   float64 // fallback without DRAM activity: memory-controller busy share for memory bound
	InterconnectFraction   float64 // PCIe/NVLink share of capacity for interconnect bound
	MemoryCapacityFraction float64 // memory used share for memory_capacity
	ThrottledShare         float64 // share of the interval throttled for power/thermal labels
	// What GPM reads for each unit while it is the limit: rules 7 and 10
	// compare tensor and DRAM activity as shares of these.
	TensorAtLimit float64
	DRAMAtLimit   float64
	// PowerSwing is the power between a GPU at its tensor limit and one at
	// its DRAM limit, a share of its power limit: rule 0 reads an
	// interval's power above its activity readings' as that share of a
	// shift from DRAM to tensor work, and places throttling only where a
	// free board draws at least half of it below the limit. 0 turns rule 0
	// off.
	PowerSwing float64
}

// DefaultThresholds returns the default thresholds. The package
// documentation ("Default thresholds") gives the full reasoning.
func DefaultThresholds() Thresholds {
	return Thresholds{
		// Kernels ran under 30% of the time: the GPU waited at least 70% of it.
		IdleUtilization: 0.3,
		// A GPU that is the limit (compute or HBM bandwidth) occupies most
		// SMs; under 0.3 two thirds of SM time went unused. Decode reads
		// 0.45-0.65, so it keeps a margin.
		BusySMActivity: 0.3,
		// Tensor pipes busy half of all cycles: matrix math dominates
		// (prefill 0.6-0.8, decode 0.12-0.25).
		ComputeTensor: 0.5,
		// DCGM: SM activity ≥ 0.8 is needed for effective GPU use; with
		// memory unsaturated, busy SMs are the limit.
		ComputeSM: 0.8,
		// Bandwidth-bound kernels reach 70-90% of peak HBM bandwidth;
		// compute-bound GEMMs stay at 0.2-0.4 (decode 0.59-0.9).
		MemoryDRAM: 0.5,
		// Time with any traffic reads higher than bandwidth share
		// (decode 0.65-0.9, prefill 0.25-0.4).
		MemoryControllerBusy: 0.6,
		// Protocol overhead caps payload at ~80-90% of the raw rate:
		// 70% of raw is near what the link can carry.
		InterconnectFraction: 0.7,
		// Engines preallocate KV cache to 0.9-0.96 of memory; only above
		// that is the device itself out of room.
		MemoryCapacityFraction: 0.97,
		// A throttle explains the interval when it held for most of it.
		ThrottledShare: 0.5,
		// Large GEMMs sustain about 70% of the tensor cores' dense peak;
		// bandwidth-bound kernels about 85% of peak HBM bandwidth.
		TensorAtLimit: 0.7,
		DRAMAtLimit:   0.85,
		// An H200 drew 691 W in back-to-back bf16 GEMMs (at its 700 W
		// cap) and 413 W in a streaming copy: 0.40 of the limit apart.
		PowerSwing: 0.4,
	}
}

// Validate checks that every threshold is a share in (0, 1]. Errors name
// the field as configured (snake_case); all bad fields are reported.
func (t Thresholds) Validate() error {
	fields := []struct {
		name string
		v    float64
	}{
		{"idle_utilization", t.IdleUtilization},
		{"busy_sm_activity", t.BusySMActivity},
		{"compute_tensor", t.ComputeTensor},
		{"compute_sm", t.ComputeSM},
		{"memory_dram", t.MemoryDRAM},
		{"memory_controller_busy", t.MemoryControllerBusy},
		{"interconnect_fraction", t.InterconnectFraction},
		{"memory_capacity_fraction", t.MemoryCapacityFraction},
		{"throttled_share", t.ThrottledShare},
		{"tensor_at_limit", t.TensorAtLimit},
		{"dram_at_limit", t.DRAMAtLimit},
	}
	var errs []error
	for _, f := range fields {
		if !(f.v > 0 && f.v <= 1) { // also rejects NaN
			errs = append(errs, fmt.Errorf("%s: %v must be a share in (0, 1] (0.5 means 50%%)", f.name, f.v))
		}
	}
	if !(t.PowerSwing >= 0 && t.PowerSwing <= 1) {
		errs = append(errs, fmt.Errorf("power_swing: %v must be a share in [0, 1] (0 turns it off)", t.PowerSwing))
	}
	return errors.Join(errs...)
}

// signal is one input, with whether it was measured.
type signal struct {
	v  float64
	ok bool
}

// measured returns the signal; NaN and infinities count as not measured.
func measured(v float64, has bool) signal {
	return signal{v: v, ok: has && !math.IsNaN(v) && !math.IsInf(v, 0)}
}

// atLeast reports whether the signal was measured at or above bound.
func (s signal) atLeast(bound float64) bool { return s.ok && s.v >= bound }

// below reports whether the signal was measured strictly below bound.
func (s signal) below(bound float64) bool { return s.ok && s.v < bound }

// Classify labels one interval. It applies the package's rules in order
// (see the package documentation) and always returns a member of
// [Labels]. Thresholds are assumed valid ([Thresholds.Validate]); with
// invalid ones Classify still returns a member of Labels.
func Classify(in Inputs, th Thresholds) Label {
	placeByPower(&in, th)
	util := measured(in.Utilization, in.HasUtilization)
	sm := measured(in.SMActivity, in.HasSMActivity)

	// Rule 1: without an activity signal, idle and busy look alike.
	if !util.ok && !sm.ok {
		return Unknown
	}

	// Activity: SM activity where measured (it sees space as well as
	// time), else utilization, each with its own idle bound.
	activity, idleBound := util, th.IdleUtilization
	if sm.ok {
		activity, idleBound = sm, th.BusySMActivity
	}

	// Memory bandwidth: DRAM activity where measured, else the memory
	// controller's busy share, each with its own bound.
	dram := measured(in.DRAMActivity, in.HasDRAMActivity)
	mem, memBound := dram, th.MemoryDRAM
	if !dram.ok {
		mem, memBound = measured(in.MemoryController, in.HasMemoryController), th.MemoryControllerBusy
	}

	linkSaturated := measured(in.PCIeFraction, in.HasPCIe).atLeast(th.InterconnectFraction) ||
		measured(in.NVLinkFraction, in.HasNVLink).atLeast(th.InterconnectFraction)

	// Rule 2: mostly not working, and no bandwidth resource saturated
	// (that would mean the GPU was waiting on it, not idle).
	if activity.below(idleBound) && !linkSaturated && !dram.atLeast(th.MemoryDRAM) {
		if in.RequestsInFlight > 0 {
			return HostBound
		}
		return Idle
	}

	// Rules 3 and 4: throttles, thermal first.
	if measured(in.ThermalThrottled, in.HasThermalThrottled).atLeast(th.ThrottledShare) {
		return ThermalThrottled
	}
	if measured(in.PowerThrottled, in.HasPowerThrottled).atLeast(th.ThrottledShare) {
		return PowerThrottled
	}

	// Rule 5: memory nearly full.
	if measured(in.MemoryUsedFraction, in.HasMemoryUsed).atLeast(th.MemoryCapacityFraction) {
		return MemoryCapacity
	}

	// Rule 6: a link near capacity.
	if linkSaturated {
		return InterconnectBound
	}

	// Rule 7: memory bandwidth, unless the tensor pipes are nearer what
	// they reach as the limit (an exact tie goes to memory).
	tensor := measured(in.TensorActivity, in.HasTensorActivity)
	tensorSaturated := tensor.atLeast(th.ComputeTensor)
	tensorNearer := tensorSaturated && tensor.v > mem.v // against the memory controller: both raw
	if tensor.ok && dram.ok {
		tensorNearer = tensor.v/th.TensorAtLimit > dram.v/th.DRAMAtLimit
	}
	if mem.atLeast(memBound) && !tensorNearer {
		return MemoryBound
	}

	// Rule 8: tensor math.
	if tensorSaturated {
		return ComputeBound
	}

	// Rule 9: busy SMs, with memory measured (and, by rule 7, not
	// saturated): the time went on-chip.
	if activity.atLeast(th.ComputeSM) && mem.ok {
		return ComputeBound
	}

	// Rule 10: busy, nothing saturated: the unit nearer what it reaches
	// as the limit, if one is at least half-way to its bound (GPM only).
	if tensor.ok && dram.ok {
		switch {
		case max(tensor.v/th.ComputeTensor, dram.v/th.MemoryDRAM) < nearestBoundShare:
		case tensorNearer:
			return ComputeBound
		default:
			return MemoryBound
		}
	}

	// Rule 11: busy, but nothing measured says why.
	return Unknown
}

// placeByPower is rule 0. GPM activity and throttle times are read over
// ticks longer than an interval, and under continuous batching a tick mixes
// compute-bound steps (a prompt's chunk) with memory-bound ones (decodes
// only), throttled ones with free ones, while the driver's power samples
// see each interval. Two things move power, and each places the interval
// within its readings:
//   - Power rises with tensor work and falls with DRAM work, PowerSwing of
//     the power limit from one limit to the other: an interval that drew
//     ΔW more than its activity readings' stretches ran a share x = ΔW /
//     (PowerSwing × PowerLimit) more of its time at the tensor limit and
//     less at the DRAM limit, so its tensor activity moves by
//     x × TensorAtLimit and its DRAM activity by −x × DRAMAtLimit.
//   - A board its power limit throttles draws the limit. Throttle readings
//     that were throttled θ of the time at mean power R ran free at
//     F = (R − θL) / (1 − θ), so an interval drawing P was throttled
//     (P − F) / (L − F) of its time, within what the readings allow: no
//     more than all their throttled time (θ × ThrottleSpan) and no less
//     than what their free time leaves (1 − (1 − θ) × ThrottleSpan). Only
//     where F lies at least half the swing below the limit: a board that
//     runs free near its cap (an H200's GEMMs, throttled 80% of the time,
//     drew within ±10% of the limit in every 100 ms either way) says
//     nothing by its power of when it was throttled.
//
// Each result is kept in [0, 1]. PowerSwing 0 turns rule 0 off. The
// package documentation gives the reasoning.
func placeByPower(in *Inputs, th Thresholds) {
	p, l := in.Power, in.PowerLimit
	if !in.HasPowerDetail || th.PowerSwing <= 0 || !(l > 0) || !(p >= 0) || math.IsInf(p+l, 0) {
		return
	}
	swing := th.PowerSwing * l
	if r := in.ActivityReadingPower; r > 0 && !math.IsInf(r, 0) && in.HasTensorActivity && in.HasDRAMActivity {
		x := (p - r) / swing
		in.TensorActivity = min(1, max(0, in.TensorActivity+x*th.TensorAtLimit))
		in.DRAMActivity = min(1, max(0, in.DRAMActivity-x*th.DRAMAtLimit))
	}
	r, theta := in.ThrottleReadingPower, in.PowerThrottled
	if !in.HasPowerThrottled || !(theta > 0 && theta < 1) || !(r > 0 && r < l) {
		return
	}
	free := (r - theta*l) / (1 - theta)
	if l-free < swing/2 {
		return
	}
	span := max(1, in.ThrottleSpan)
	lo, hi := max(0, 1-(1-theta)*span), min(1, theta*span)
	in.PowerThrottled = min(hi, max(lo, (p-free)/(l-free)))
}

// nearestBoundShare is how far towards its bound (ComputeTensor,
// MemoryDRAM) the busier of tensor and DRAM must be for rule 10 to name
// either.
const nearestBoundShare = 0.5

// Dominant returns the label with the most time. Ties go to the label
// earlier in [Labels]: a throttle explains slowness better than the
// workload's shape, system limits (capacity, links) better than the
// kernels' own, memory before compute, starvation (host_bound) before
// idle, and any label before unknown; the package documentation gives the
// reasoning. Keys that are not in Labels, and times that are zero,
// negative or NaN, are ignored. An empty or all-zero map gives Unknown.
func Dominant(time map[Label]float64) Label {
	var t Times
	for l, d := range time {
		t.Add(l, d)
	}
	return t.Dominant()
}

// Times accumulates time per label without allocating: the hot path's
// alternative to a map for Dominant.
type Times [len(order)]float64

// Add adds d seconds to label l; unknown labels and negative or NaN times
// are ignored.
func (t *Times) Add(l Label, d float64) {
	if i := Index(l); i >= 0 && d > 0 {
		t[i] += d
	}
}

// Of returns label l's time; 0 for a label not in Labels.
func (t *Times) Of(l Label) float64 {
	if i := Index(l); i >= 0 {
		return t[i]
	}
	return 0
}

// Dominant returns the label with the most time, ties broken as Dominant.
func (t *Times) Dominant() Label { return t.DominantID().Label() }

// ID is a label's place in Labels: a label held without a pointer (a
// Label is a string), for values the garbage collector need not scan.
type ID uint8

// Label returns the label of id.
func (id ID) Label() Label { return order[id] }

var unknownID = ID(Index(Unknown))

// DominantID returns the ID of the label with the most time, ties broken
// as Dominant.
func (t *Times) DominantID() ID {
	best, most := unknownID, 0.0
	for i, d := range t {
		if d > most { // strict: an earlier label keeps a tie; NaN never wins
			best, most = ID(i), d
		}
	}
	return best
}

// Share returns id's part of the time of all labels, in [0, 1]; 0 when no
// label has time.
func (t *Times) Share(id ID) float64 {
	var all float64
	for _, d := range t {
		if d > 0 {
			all += d
		}
	}
	if all <= 0 || !(t[id] > 0) {
		return 0
	}
	return min(1, t[id]/all)
}

// Index returns l's place in Labels, -1 for a label not in it.
func Index(l Label) int {
	for i, o := range order {
		if o == l {
			return i
		}
	}
	return -1
}
