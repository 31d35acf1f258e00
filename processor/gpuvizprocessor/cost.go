package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
)

// Default token rates for a phase whose span does not say how many tokens
// it handled: a decode stream makes 20–100 tokens/s on current GPUs, and a
// prefill chunk runs thousands (docs/attribution.md).
const (
	defaultDecodeTokensPerSecond  = 50
	defaultPrefillTokensPerSecond = 5000
)

// contextTokensPerToken is how many tokens of context a decode step reads
// from the KV cache in the time one token's math takes: about 2,500 for a
// 70B Llama-3-class model with grouped-query attention at 16-bit KV on an
// H200, at the attainable peaks (docs/attribution.md).
const contextTokensPerToken = 2500

// stepWeightTokens is what reading the weights once costs an engine step,
// in tokens' math: about 170 on an H200 (2 bytes a parameter against 2
// FLOP) and about 15 for the step's launch. The books give a decode-only
// step's read to its decodes and a chunked step's to its chunk
// (attribution.Group.steps, docs/attribution.md).
const stepWeightTokens = 185

// costPieces estimates what a request cost its GPUs over time, as pieces
// at a constant rate: requests running in the same bin share its energy in
// proportion. A token costs its math and a read of its context's KV cache,
// so a request's cost rate is the tokens per second it pushed through the
// GPU: its prompt tokens over its prefill, its generated tokens over its
// decode, these weighted by their context. Each generated token also takes
// a step, whose weight read the step's requests share: a decode's shared
// cost. A prefill is marked a chunk: while it runs, its engine's steps
// carry its prompt. Queue time runs nothing and costs nothing. A request
// whose phases are unknown costs as a decode stream over its whole window.
func costPieces(req inference.Request, dst []attribution.Piece) []attribution.Piece {
	if len(req.Phases) == 0 {
		return append(dst, attribution.Piece{Start: req.Start.UnixNano(), End: req.End.UnixNano(),
			Rate: defaultDecodeTokensPerSecond, Shared: stepWeightTokens * defaultDecodeTokensPerSecond})
	}
	for _, ph := range req.Phases {
		p := attribution.Piece{Start: ph.Start.UnixNano(), End: ph.End.UnixNano()}
		secs := float64(p.End-p.Start) / 1e9
		switch ph.Name {
		case inference.PhaseQueue:
		case inference.PhasePrefill:
			p.Rate = tokenRate(req.InputTokens, secs, defaultPrefillTokensPerSecond)
			p.Chunk = true
		case inference.PhaseDecode:
			// The first token came out of the prefill. Each generated
			// token also reads its context's KV cache: on average the
			// prompt and half the output.
			p.Rate = tokenRate(req.OutputTokens-1, secs, defaultDecodeTokensPerSecond)
			p.Shared = stepWeightTokens * p.Rate
			if req.InputTokens >= 0 && req.OutputTokens >= 0 {
				p.Rate *= 1 + (float64(req.InputTokens)+float64(req.OutputTokens)/2)/contextTokensPerToken
			}
		default: // prefill and decode together
			p.Rate = tokenRate(req.InputTokens+req.OutputTokens, secs, defaultDecodeTokensPerSecond)
			if req.InputTokens < 0 || req.OutputTokens < 0 {
				p.Rate = defaultDecodeTokensPerSecond
			}
			p.Shared = stepWeightTokens * tokenRate(req.OutputTokens, secs, defaultDecodeTokensPerSecond)
		}
		dst = append(dst, p)
	}
	return dst
}

// tokenRate is tokens over secs, at least one token's worth; fallback
// when the count is unknown.
func tokenRate(tokens int64, secs, fallback float64) float64 {
	if secs <= 0 {
		return 0
	}
	if tokens < 0 {
		return fallback
	}
	return float64(max(tokens, 1)) / secs
}
