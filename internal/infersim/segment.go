package infersim

import "sort"

// Phase is what a GPU is doing during a Segment.
type Phase uint8

const (
	// PhaseIdle: no request is running.
	PhaseIdle Phase = iota
	// PhasePrefill: a step whose cost is mostly prompt tokens.
	PhasePrefill
	// PhaseDecode: a step whose cost is mostly decode tokens.
	PhaseDecode
	// PhaseHost: requests are running but the GPU waits for the host (the
	// engine's CPU work between steps); clocks stay up, no kernel runs.
	PhaseHost
)

func (p Phase) String() string {
	switch p {
	case PhasePrefill:
		return "prefill"
	case PhaseDecode:
		return "decode"
	case PhaseHost:
		return "host"
	default:
		return "idle"
	}
}

// Segment is a stretch of time [Start, End) of one GPU at constant activity:
// one engine step, a host gap, or idle time. A node keeps tens of thousands
// per episode, so ratios and rates are float32 (their precision far exceeds
// any NVML reading's); power stays float64, since energies are its
// integrals and must add up exactly.
type Segment struct {
	Start, End int64 // Unix nanoseconds
	PowerW     float64
	// ClockMHz is the SM clock; zero means the reader derives it (the
	// sequential schedule does).
	ClockMHz uint32
	Phase    Phase
	// PowerCapped is set when the driver's software power cap holds the
	// clocks down; ThermalSlowdown when the temperature does.
	PowerCapped, ThermalSlowdown bool
	Busy                         float32 // fraction of the time a kernel runs
	MemBusy                      float32 // fraction of the time the memory controller is busy
	// What GPM would see: fraction of SMs busy, of tensor-pipe time, and of
	// peak DRAM bandwidth.
	SMActive, Tensor, DRAM float32
	// Bytes per second over PCIe (prompts in, tokens out) and NVLink
	// (tensor-parallel all-reduce), each direction.
	PCIeRx, PCIeTx, NVLink float32
	// KV-cache occupancy, as a fraction of the KV budget, at Start and at End;
	// linear in between.
	KVFrom, KVTo float32
	// TempC is the die temperature at Start; zero means the reader derives
	// it.
	TempC float32
}

// KVAt returns the KV-cache occupancy at t, which must lie in the segment.
func (s Segment) KVAt(t int64) float64 {
	if s.End <= s.Start {
		return float64(s.KVTo)
	}
	f := float64(t-s.Start) / float64(s.End-s.Start)
	return float64(s.KVFrom) + float64(s.KVTo-s.KVFrom)*f
}

// Totals are integrals of a GPU's segments over an interval.
type Totals struct {
	Seconds        float64 // length of the interval
	BusySeconds    float64 // time a kernel ran
	MemSeconds     float64 // time the memory controller was busy
	Joules         float64 // energy drawn
	MaxPowerW      float64 // highest power of any segment in the interval
	IdleSeconds    float64 // time with no request running
	CappedSeconds  float64 // time held at the power cap
	ThermalSeconds float64 // time held down by temperature
	SMSeconds      float64 // SM-seconds busy, as a fraction of all SMs
	TensorSeconds  float64
	DRAMSeconds    float64
	PCIeRxBytes    float64
	PCIeTxBytes    float64
	NVLinkBytes    float64 // each direction
}

// Add sums o into t; MaxPowerW takes the larger.
func (t *Totals) Add(o Totals) {
	t.Seconds += o.Seconds
	t.BusySeconds += o.BusySeconds
	t.MemSeconds += o.MemSeconds
	t.Joules += o.Joules
	t.MaxPowerW = max(t.MaxPowerW, o.MaxPowerW)
	t.IdleSeconds += o.IdleSeconds
	t.CappedSeconds += o.CappedSeconds
	t.ThermalSeconds += o.ThermalSeconds
	t.SMSeconds += o.SMSeconds
	t.TensorSeconds += o.TensorSeconds
	t.DRAMSeconds += o.DRAMSeconds
	t.PCIeRxBytes += o.PCIeRxBytes
	t.PCIeTxBytes += o.PCIeTxBytes
	t.NVLinkBytes += o.NVLinkBytes
}

// Accumulate adds the integrals over [from, to) of segs, which are in time
// order, to tot; the caller sets tot.Seconds.
func Accumulate(tot *Totals, segs []Segment, from, to int64) {
	first := sort.Search(len(segs), func(i int) bool { return segs[i].End > from })
	for _, seg := range segs[first:] {
		if seg.Start >= to {
			break
		}
		lo, hi := max(seg.Start, from), min(seg.End, to)
		if hi <= lo {
			continue
		}
		d := float64(hi-lo) / 1e9
		tot.BusySeconds += float64(seg.Busy) * d
		tot.MemSeconds += float64(seg.MemBusy) * d
		tot.Joules += seg.PowerW * d
		tot.MaxPowerW = max(tot.MaxPowerW, seg.PowerW)
		if seg.Phase == PhaseIdle {
			tot.IdleSeconds += d
		}
		if seg.PowerCapped {
			tot.CappedSeconds += d
		}
		if seg.ThermalSlowdown {
			tot.ThermalSeconds += d
		}
		tot.SMSeconds += float64(seg.SMActive) * d
		tot.TensorSeconds += float64(seg.Tensor) * d
		tot.DRAMSeconds += float64(seg.DRAM) * d
		tot.PCIeRxBytes += float64(seg.PCIeRx) * d
		tot.PCIeTxBytes += float64(seg.PCIeTx) * d
		tot.NVLinkBytes += float64(seg.NVLink) * d
	}
}

// SegmentAt returns the segment of segs (in time order, non-empty) that
// contains t, or the last one.
func SegmentAt(segs []Segment, t int64) Segment {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].End > t })
	return segs[min(i, len(segs)-1)]
}
