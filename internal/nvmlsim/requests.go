package nvmlsim

import (
	"math"
	"sort"
)

// Request is one inference request of a simulated GPU's schedule, as the
// inference server that ran it would report it: it arrived, waited in the
// queue, was prefilled during the schedule's prefill segment and decoded
// during the decode segment right after. All times are Unix nanoseconds.
type Request struct {
	GPU int
	// ID is a deterministic identifier of the request, a hash of (seed, GPU,
	// PrefillStart): the same request has the same ID every time.
	ID uint64
	// Arrival precedes PrefillStart by the request's queue time, which lies
	// inside the idle gap before the prefill segment.
	Arrival int64
	// PrefillStart, DecodeStart and End are the prefill segment's start, the
	// decode segment's start (the prefill's end) and the decode's end.
	PrefillStart, DecodeStart, End int64
	// PromptTokens and OutputTokens follow from the prefill and decode
	// lengths at the model's token rates (see TokenRates).
	PromptTokens, OutputTokens int64
}

// maxQueueShare is the largest share of the idle gap before a prefill that
// the request spent queued.
const maxQueueShare = 0.4

// tokenRates are the single-request throughputs assumed per model: prompt
// tokens per second of prefill and output tokens per second of decode.
var tokenRates = map[string][2]float64{
	"a100": {6000, 40},
	"h100": {10000, 60},
	"h200": {12000, 70},
	"b200": {18000, 80},
}

// defaultTokenRates apply to a Model not in the catalogue.
var defaultTokenRates = [2]float64{10000, 60}

// TokenRates returns the prompt tokens per second of prefill and the output
// tokens per second of decode that Requests assumes for the model.
func TokenRates(m Model) (prefill, decode float64) {
	r, ok := tokenRates[m.Name]
	if !ok {
		r = defaultTokenRates
	}
	return r[0], r[1]
}

// Requests returns the requests of the schedule whose End lies in [from,
// to), in order of End. Each prefill segment and the decode segment after it
// form one request, so consecutive ranges [a, b), [b, c) return every request
// exactly once. The result is a pure function of (model, seed, GPU, range).
func (s *Schedule) Requests(from, to int64) []Request {
	if to <= from {
		return nil
	}
	var out []Request
	// A request ends at or before its window's end, and may end exactly on
	// it: the window before from's can hold a request ending at from.
	for w := windowOf(from) - 1; w <= windowOf(to-1); w++ {
		segs := s.Segments(w)
		// Segments are in time order and so are the requests' ends: skip to
		// the first segment ending at or after from.
		first := sort.Search(len(segs), func(i int) bool { return segs[i].End >= from })
		for i := first; i < len(segs); i++ {
			if segs[i].Phase != PhaseDecode {
				continue
			}
			decode := segs[i]
			if decode.End >= to {
				break
			}
			if decode.End < from || i < 1 || segs[i-1].Phase != PhasePrefill {
				continue
			}
			var gap Segment
			if i >= 2 {
				gap = segs[i-2]
			}
			out = append(out, s.request(gap, segs[i-1], decode))
		}
	}
	return out
}

// request builds the request of one (idle gap, prefill, decode) triple.
func (s *Schedule) request(gap, prefill, decode Segment) Request {
	id := mix(s.seed ^ mix(s.gpu<<48^uint64(prefill.Start)))
	var queue int64
	if gap.Phase == PhaseIdle && gap.End == prefill.Start && gap.End > gap.Start {
		// The top 53 bits of a second hash make a uniform fraction in [0, 1).
		f := float64(mix(id)>>11) / (1 << 53)
		queue = int64(f * maxQueueShare * float64(gap.End-gap.Start))
	}
	prefillRate, decodeRate := TokenRates(s.model)
	return Request{
		GPU:          int(s.gpu),
		ID:           id,
		Arrival:      prefill.Start - queue,
		PrefillStart: prefill.Start,
		DecodeStart:  decode.Start,
		End:          decode.End,
		PromptTokens: tokens(prefill.End-prefill.Start, prefillRate),
		OutputTokens: tokens(decode.End-decode.Start, decodeRate),
	}
}

// tokens is the count processed in ns nanoseconds at rate per second; at
// least one.
func tokens(ns int64, rate float64) int64 {
	return max(1, int64(math.Round(float64(ns)/1e9*rate)))
}

// SimulatedPID returns the process ID of the inference server's worker on
// simulated GPU index, as the simulated NVML reports it among the GPU's
// compute processes.
func SimulatedPID(index int) uint32 { return simulatedPID(index) }

// SimulatedUUID returns the UUID of simulated GPU index of a server of the
// named model (case-insensitive, as LookupModel) driven by seed.
func SimulatedUUID(model string, seed uint64, index int) string {
	if m, err := LookupModel(model); err == nil {
		model = m.Name
	}
	return simulatedUUID(model, seed, index)
}
