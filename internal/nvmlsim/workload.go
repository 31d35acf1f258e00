package nvmlsim

import (
	"math/rand/v2"
	"sort"
	"time"
)

// Phase is what the simulated inference server is doing on a GPU.
type Phase uint8

const (
	// PhaseIdle: no request in flight.
	PhaseIdle Phase = iota
	// PhasePrefill: the prompt is processed; compute-bound, near the power limit.
	PhasePrefill
	// PhaseDecode: tokens are generated one step at a time; memory-bandwidth-bound.
	PhaseDecode
)

func (p Phase) String() string {
	switch p {
	case PhasePrefill:
		return "prefill"
	case PhaseDecode:
		return "decode"
	default:
		return "idle"
	}
}

// Segment is a stretch of time [Start, End) in one phase at constant activity.
type Segment struct {
	Start, End int64 // Unix nanoseconds
	Phase      Phase
	Busy       float64 // fraction of the time a kernel runs
	MemBusy    float64 // fraction of the time the memory controller is busy
	PowerW     float64
	// PowerCapped is set when the segment runs at the power limit, held
	// there by the driver's software power cap.
	PowerCapped bool
	// What GPM would see: fraction of SMs busy, of tensor-pipe time, and of
	// peak DRAM bandwidth.
	SMActive, Tensor, DRAM float64
	// Bytes per second over PCIe (prompts in, tokens out) and NVLink
	// (tensor-parallel all-reduce), each direction.
	PCIeRx, PCIeTx, NVLink float64
	// KV-cache occupancy, as a fraction of the KV budget, at Start and at End;
	// linear in between.
	KVFrom, KVTo float64
}

// kvAt returns the KV-cache occupancy at t, which must lie in the segment.
func (s Segment) kvAt(t int64) float64 {
	if s.End <= s.Start {
		return s.KVTo
	}
	f := float64(t-s.Start) / float64(s.End-s.Start)
	return s.KVFrom + (s.KVTo-s.KVFrom)*f
}

// Window is the span of time whose schedule is generated in one go. Requests
// never cross a window's end, so each window is independent of the others and
// the schedule at any time can be computed without replaying history.
const Window = 60 * time.Second

// Schedule is the deterministic workload of one simulated GPU: a pure function
// of (seed, GPU index, time). Within each Window, traffic of a random intensity
// arrives as requests, each an idle gap, a short prefill and a longer decode.
// A Schedule caches recently generated windows and is not safe for concurrent
// use.
type Schedule struct {
	seed  uint64
	gpu   uint64
	model Model
	cache [3]cachedWindow
	next  int // cache slot to replace next
}

type cachedWindow struct {
	index    int64
	valid    bool
	segments []Segment
}

// NewSchedule returns the schedule of GPU index gpu of a simulated server of
// the given model, driven by seed.
func NewSchedule(model Model, seed uint64, gpu int) *Schedule {
	return &Schedule{seed: seed, gpu: uint64(gpu), model: model}
}

func windowOf(t int64) int64 {
	w := int64(Window)
	if t < 0 {
		return (t - w + 1) / w
	}
	return t / w
}

// Segments returns the segments that cover window w, [w*Window, (w+1)*Window),
// in time order. The slice is shared with the cache: do not modify it.
func (s *Schedule) Segments(w int64) []Segment {
	for i := range s.cache {
		if s.cache[i].valid && s.cache[i].index == w {
			return s.cache[i].segments
		}
	}
	slot := &s.cache[s.next]
	s.next = (s.next + 1) % len(s.cache)
	slot.index, slot.valid = w, true
	slot.segments = s.generate(w, slot.segments[:0])
	return slot.segments
}

// mix is SplitMix64's finaliser: it spreads (gpu, window) over the PRNG's seed space.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (s *Schedule) generate(w int64, out []Segment) []Segment {
	rng := rand.New(rand.NewPCG(s.seed, mix(s.gpu<<40^uint64(w))))
	m := s.model
	start := w * int64(Window)
	end := start + int64(Window)
	dur := func(lo, spread time.Duration) int64 { return int64(lo) + int64(rng.Float64()*float64(spread)) }
	between := func(lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }
	dynamic := m.PowerLimitW - m.IdlePowerW

	// Traffic intensity of this window: the mean idle gap between requests
	// shrinks from 2.8 s at the lightest to 0.3 s at the heaviest.
	load := between(0.35, 1)
	meanGap := 0.3 + 2.5*(1-load)
	idleW := m.IdlePowerW * between(0.97, 1.03)

	cursor := start
	for {
		gap := max(int64(rng.ExpFloat64()*meanGap*float64(time.Second)), int64(20*time.Millisecond))
		prefill := dur(80*time.Millisecond, 320*time.Millisecond)
		decode := dur(800*time.Millisecond, 5200*time.Millisecond)
		if cursor+gap+prefill+decode > end {
			break
		}
		kvPrompt := between(0.02, 0.17)
		kvOut := kvPrompt + between(0.05, 0.4)
		// A third of prefills are long enough to run into the power cap.
		capped := rng.Float64() < 0.3
		prefillW := m.IdlePowerW + dynamic*between(0.86, 0.94)
		if capped {
			prefillW = m.PowerLimitW
		}
		decodeMem := between(0.65, 0.9)
		out = append(out,
			Segment{Start: cursor, End: cursor + gap, Phase: PhaseIdle, PowerW: idleW},
			Segment{
				Start: cursor + gap, End: cursor + gap + prefill, Phase: PhasePrefill,
				Busy: between(0.97, 1), MemBusy: between(0.25, 0.4),
				PowerW: prefillW, PowerCapped: capped,
				SMActive: between(0.85, 0.95), Tensor: between(0.6, 0.8), DRAM: between(0.25, 0.4),
				PCIeRx: between(0.5e9, 2e9), PCIeTx: between(10e6, 50e6), NVLink: between(30e9, 60e9),
				KVFrom: 0, KVTo: kvPrompt,
			},
			Segment{
				Start: cursor + gap + prefill, End: cursor + gap + prefill + decode, Phase: PhaseDecode,
				Busy: between(0.85, 0.97), MemBusy: decodeMem,
				PowerW:   m.IdlePowerW + dynamic*between(0.45, 0.65),
				SMActive: between(0.45, 0.65), Tensor: between(0.12, 0.25), DRAM: decodeMem * between(0.9, 1),
				PCIeRx: between(5e6, 20e6), PCIeTx: between(20e6, 80e6), NVLink: between(8e9, 20e9),
				KVFrom: kvPrompt, KVTo: kvOut,
			},
		)
		cursor += gap + prefill + decode
	}
	return append(out, Segment{Start: cursor, End: end, Phase: PhaseIdle, PowerW: idleW})
}

// At returns the segment that contains t.
func (s *Schedule) At(t int64) Segment {
	segs := s.Segments(windowOf(t))
	i := sort.Search(len(segs), func(i int) bool { return segs[i].End > t })
	return segs[min(i, len(segs)-1)]
}

// Totals are integrals of the schedule over an interval.
type Totals struct {
	Seconds       float64 // length of the interval
	BusySeconds   float64 // time a kernel ran
	MemSeconds    float64 // time the memory controller was busy
	Joules        float64 // energy drawn
	MaxPowerW     float64 // highest power of any segment in the interval
	IdleSeconds   float64 // time with no request in flight
	CappedSeconds float64 // time held at the power cap
	SMSeconds     float64 // SM-seconds busy, as a fraction of all SMs
	TensorSeconds float64
	DRAMSeconds   float64
	PCIeRxBytes   float64
	PCIeTxBytes   float64
	NVLinkBytes   float64 // each direction
}

// Integrate returns the integrals of the schedule over [from, to).
func (s *Schedule) Integrate(from, to int64) Totals {
	var tot Totals
	if to <= from {
		return tot
	}
	tot.Seconds = float64(to-from) / 1e9
	for w := windowOf(from); w <= windowOf(to-1); w++ {
		segs := s.Segments(w)
		// Segments are in time order: skip straight to the first that ends after from.
		first := sort.Search(len(segs), func(i int) bool { return segs[i].End > from })
		for _, seg := range segs[first:] {
			if seg.Start >= to {
				break
			}
			lo, hi := max(seg.Start, from), min(seg.End, to)
			d := float64(hi-lo) / 1e9
			tot.BusySeconds += seg.Busy * d
			tot.MemSeconds += seg.MemBusy * d
			tot.Joules += seg.PowerW * d
			tot.MaxPowerW = max(tot.MaxPowerW, seg.PowerW)
			if seg.Phase == PhaseIdle {
				tot.IdleSeconds += d
			}
			if seg.PowerCapped {
				tot.CappedSeconds += d
			}
			tot.SMSeconds += seg.SMActive * d
			tot.TensorSeconds += seg.Tensor * d
			tot.DRAMSeconds += seg.DRAM * d
			tot.PCIeRxBytes += seg.PCIeRx * d
			tot.PCIeTxBytes += seg.PCIeTx * d
			tot.NVLinkBytes += seg.NVLink * d
		}
	}
	return tot
}

// add sums o into t; MaxPowerW takes the larger.
func (t *Totals) add(o Totals) {
	t.Seconds += o.Seconds
	t.BusySeconds += o.BusySeconds
	t.MemSeconds += o.MemSeconds
	t.Joules += o.Joules
	t.MaxPowerW = max(t.MaxPowerW, o.MaxPowerW)
	t.IdleSeconds += o.IdleSeconds
	t.CappedSeconds += o.CappedSeconds
	t.SMSeconds += o.SMSeconds
	t.TensorSeconds += o.TensorSeconds
	t.DRAMSeconds += o.DRAMSeconds
	t.PCIeRxBytes += o.PCIeRxBytes
	t.PCIeTxBytes += o.PCIeTxBytes
	t.NVLinkBytes += o.NVLinkBytes
}
