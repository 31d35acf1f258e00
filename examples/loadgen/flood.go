package main

import (
	"math/rand/v2"
	"time"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/otlpsend"
)

// floodSource is flood mode's source: requests end evenly spaced, rate per
// second from start on, each lasting otlpsend.FloodShape.Total, with no
// queue and no bound on how many run at once. It costs O(1) per request, so a load
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
		arrival := end - s.between(otlpsend.FloodShape.Total)
		scheduled := arrival + s.between(otlpsend.FloodShape.Queue)
		prefill := s.between(otlpsend.FloodShape.Prefill)
		decode := end - scheduled - prefill
		out = append(out, nvmlsim.Request{
			GPU:          -1,
			ID:           s.rng.Uint64(),
			Arrival:      arrival,
			PrefillStart: scheduled,
			DecodeStart:  scheduled + prefill,
			End:          end,
			PromptTokens: max(1, int64(float64(prefill)/1e9*otlpsend.FloodShape.PromptRate)),
			OutputTokens: max(1, int64(float64(decode)/1e9*otlpsend.FloodShape.OutputRate)),
		})
	}
}
