package main

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// requestSource produces the requests of the sequential schedule or of
// synthetic mode that finished in [from, to) (Unix ns), in order of their
// end. Consecutive calls are given consecutive ranges.
type requestSource interface {
	Requests(from, to int64) []nvmlsim.Request
}

// simulatedSource replays the simulated GPUs' schedules: exactly the
// schedules the collector's simulated backend follows for the same (model,
// seed), GPU by GPU, so every request's prefill and decode fall on the
// simulated GPU's prefill and decode segments.
type simulatedSource struct {
	schedules []*nvmlsim.Schedule
}

func newSimulatedSource(model nvmlsim.Model, seed uint64, gpus int) *simulatedSource {
	s := &simulatedSource{}
	for i := range gpus {
		s.schedules = append(s.schedules, nvmlsim.NewSchedule(model, seed, i))
	}
	return s
}

func (s *simulatedSource) Requests(from, to int64) []nvmlsim.Request {
	var out []nvmlsim.Request
	for _, sched := range s.schedules {
		out = append(out, sched.Requests(from, to)...)
	}
	sortByEnd(out)
	return out
}

func sortByEnd(reqs []nvmlsim.Request) {
	slices.SortStableFunc(reqs, func(a, b nvmlsim.Request) int {
		switch {
		case a.End < b.End:
			return -1
		case a.End > b.End:
			return 1
		}
		return a.GPU - b.GPU
	})
}

// syntheticShape bounds the random phases of synthetic requests.
type syntheticShape struct {
	schedDelay [2]time.Duration // the scheduler's own queueing, even with a free slot
	prefill    [2]time.Duration
	decode     [2]time.Duration
	// promptRate and outputRate turn phase lengths into token counts
	// (tokens per second).
	promptRate, outputRate float64
}

// defaultShape is what --mode synthetic uses.
var defaultShape = syntheticShape{
	schedDelay: [2]time.Duration{500 * time.Microsecond, 20 * time.Millisecond},
	prefill:    [2]time.Duration{50 * time.Millisecond, 400 * time.Millisecond},
	decode:     [2]time.Duration{500 * time.Millisecond, 8 * time.Second},
	promptRate: 10000,
	outputRate: 60,
}

// syntheticSource is an M/G/c queue: Poisson arrivals at rate per second,
// at most concurrency requests in the model at once (first come, first
// served), random prefill and decode lengths. Arrivals that find
// maxWaiting requests already waiting are turned away (counted in dropped),
// as a server's admission limit would, so the queue stays bounded when the
// rate exceeds what the slots serve. It is a pure function of its random
// source, simulated ahead of the clock as far as Requests is asked.
type syntheticSource struct {
	rng        *rand.Rand
	rate       float64
	shape      syntheticShape
	maxWaiting int

	next    int64    // the next arrival
	slots   slotHeap // when each of the concurrency slots is free next
	pending []nvmlsim.Request
	dropped int64
}

func newSyntheticSource(start int64, rate float64, concurrency int, shape syntheticShape, rng *rand.Rand) *syntheticSource {
	s := &syntheticSource{rng: rng, rate: rate, shape: shape, maxWaiting: 4 * concurrency}
	s.slots = make(slotHeap, concurrency)
	for i := range s.slots {
		s.slots[i] = start
	}
	s.next = start + s.interarrival()
	return s
}

func (s *syntheticSource) interarrival() int64 {
	return max(1, int64(s.rng.ExpFloat64()/s.rate*float64(time.Second)))
}

func (s *syntheticSource) between(r [2]time.Duration) int64 {
	return int64(r[0]) + int64(s.rng.Float64()*float64(r[1]-r[0]))
}

// Requests admits every arrival before to, then returns (and forgets) the
// requests that ended before to.
func (s *syntheticSource) Requests(_, to int64) []nvmlsim.Request {
	for s.next < to {
		s.arrive(s.next)
		s.next += s.interarrival()
	}
	var done []nvmlsim.Request
	kept := s.pending[:0]
	for _, r := range s.pending {
		if r.End < to {
			done = append(done, r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(s.pending[len(kept):])
	s.pending = kept
	sortByEnd(done)
	return done
}

func (s *syntheticSource) arrive(at int64) {
	waiting := 0
	for _, r := range s.pending {
		if r.PrefillStart > at {
			waiting++
		}
	}
	if waiting >= s.maxWaiting {
		s.dropped++
		return
	}
	ready := at + s.between(s.shape.schedDelay)
	admit := max(ready, s.slots[0])
	prefill := s.between(s.shape.prefill)
	decode := s.between(s.shape.decode)
	r := nvmlsim.Request{
		GPU:          -1,
		ID:           s.rng.Uint64(),
		Arrival:      at,
		PrefillStart: admit,
		DecodeStart:  admit + prefill,
		End:          admit + prefill + decode,
		PromptTokens: max(1, int64(float64(prefill)/1e9*s.shape.promptRate)),
		OutputTokens: max(1, int64(float64(decode)/1e9*s.shape.outputRate)),
	}
	s.slots[0] = r.End
	heap.Fix(&s.slots, 0)
	s.pending = append(s.pending, r)
}

// slotHeap is a min-heap of the times the slots free up.
type slotHeap []int64

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h slotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *slotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
