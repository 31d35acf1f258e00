package nvmlsim

import (
	"math/rand/v2"
	"time"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// Phase, Segment and Totals are the inference engine model's: the
// sequential schedule and the batching engines describe GPU activity alike.
type (
	Phase   = infersim.Phase
	Segment = infersim.Segment
	Totals  = infersim.Totals
)

// The phases.
const (
	PhaseIdle    = infersim.PhaseIdle
	PhasePrefill = infersim.PhasePrefill
	PhaseDecode  = infersim.PhaseDecode
)

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
				Busy: f32(between(0.97, 1)), MemBusy: f32(between(0.25, 0.4)),
				PowerW: prefillW, PowerCapped: capped,
				SMActive: f32(between(0.85, 0.95)), Tensor: f32(between(0.6, 0.8)), DRAM: f32(between(0.25, 0.4)),
				PCIeRx: f32(between(0.5e9, 2e9)), PCIeTx: f32(between(10e6, 50e6)), NVLink: f32(between(30e9, 60e9)),
				KVFrom: 0, KVTo: f32(kvPrompt),
			},
			Segment{
				Start: cursor + gap + prefill, End: cursor + gap + prefill + decode, Phase: PhaseDecode,
				Busy: f32(between(0.85, 0.97)), MemBusy: f32(decodeMem),
				PowerW:   m.IdlePowerW + dynamic*between(0.45, 0.65),
				SMActive: f32(between(0.45, 0.65)), Tensor: f32(between(0.12, 0.25)), DRAM: f32(decodeMem * between(0.9, 1)),
				PCIeRx: f32(between(5e6, 20e6)), PCIeTx: f32(between(20e6, 80e6)), NVLink: f32(between(8e9, 20e9)),
				KVFrom: f32(kvPrompt), KVTo: f32(kvOut),
			},
		)
		cursor += gap + prefill + decode
	}
	return append(out, Segment{Start: cursor, End: end, Phase: PhaseIdle, PowerW: idleW})
}

func f32(x float64) float32 { return float32(x) }

// At returns the segment that contains t.
func (s *Schedule) At(t int64) Segment { return infersim.SegmentAt(s.Segments(windowOf(t)), t) }

// Integrate returns the integrals of the schedule over [from, to).
func (s *Schedule) Integrate(from, to int64) Totals {
	var tot Totals
	if to <= from {
		return tot
	}
	tot.Seconds = float64(to-from) / 1e9
	for w := windowOf(from); w <= windowOf(to-1); w++ {
		infersim.Accumulate(&tot, s.Segments(w), from, to)
	}
	return tot
}
