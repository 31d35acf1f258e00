package main

import (
	"math/rand/v2"
	"time"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// floodShape bounds flood mode's requests: the whole request (arrival to
// end), the scheduler's queueing and the prefill; the decode is the rest.
var floodShape = struct {
	total, queue, prefill  [2]time.Duration
	promptRate, outputRate float64 // tokens per second of prefill and decode
}{
	total:      [2]time.Duration{500 * time.Millisecond, 3500 * time.Millisecond},
	queue:      [2]time.Duration{time.Millisecond, 20 * time.Millisecond},
	prefill:    [2]time.Duration{50 * time.Millisecond, 400 * time.Millisecond},
	promptRate: 10000,
	outputRate: 60,
}

// floodSource is flood mode's source: requests end evenly spaced, rate per
// second from start on, each lasting floodShape.total, with no queue and no
// bound on how many run at once. It costs O(1) per request, so a load
// generator can hold tens of thousands of spans a second steady, which the
// Poisson queue of synthetic mode (O(requests in flight) per arrival)
// cannot.
type floodSource struct {
	rng   *rand.Rand
	start int64
	step  float64 // ns between two ends
	n     int64   // requests emitted: the next ends at start + n*step
}

func newFloodSource(start int64, rate float64, rng *rand.Rand) *floodSource {
	return &floodSource{rng: rng, start: start, step: float64(time.Second) / rate}
}

func (s *floodSource) between(r [2]time.Duration) int64 {
	return int64(r[0]) + int64(s.rng.Float64()*float64(r[1]-r[0]))
}

// Requests returns the requests that end before to, in order of their end.
func (s *floodSource) Requests(_, to int64) []nvmlsim.Request {
	var out []nvmlsim.Request
	if ahead := (float64(to-s.start) - float64(s.n)*s.step) / s.step; ahead > 0 {
		out = make([]nvmlsim.Request, 0, int(ahead)+1)
	}
	for {
		end := s.start + int64(float64(s.n)*s.step)
		if end >= to {
			return out
		}
		s.n++
		arrival := end - s.between(floodShape.total)
		scheduled := arrival + s.between(floodShape.queue)
		prefill := s.between(floodShape.prefill)
		decode := end - scheduled - prefill
		out = append(out, nvmlsim.Request{
			GPU:          -1,
			ID:           s.rng.Uint64(),
			Arrival:      arrival,
			PrefillStart: scheduled,
			DecodeStart:  scheduled + prefill,
			End:          end,
			PromptTokens: max(1, int64(float64(prefill)/1e9*floodShape.promptRate)),
			OutputTokens: max(1, int64(float64(decode)/1e9*floodShape.outputRate)),
		})
	}
}
