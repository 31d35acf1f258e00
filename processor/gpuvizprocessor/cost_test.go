package gpuvizprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
)

func TestCostPieces(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	phases := func(names ...string) []inference.Phase {
		var out []inference.Phase
		for i, n := range names { // one second each
			out = append(out, inference.Phase{Name: n, Start: at(float64(i)), End: at(float64(i + 1))})
		}
		return out
	}
	piece := func(from, to, rate, shared float64) attribution.Piece {
		return attribution.Piece{Start: at(from).UnixNano(), End: at(to).UnixNano(), Rate: rate, Shared: shared}
	}
	for _, tc := range []struct {
		name          string
		phases        []inference.Phase
		input, output int64
		want          []attribution.Piece
	}{
		{
			// The decode's 100 tokens after the first read on average
			// 1,000 + 101/2 tokens of context, and take a step each.
			name: "queue, prefill and decode", phases: phases(inference.PhaseQueue, inference.PhasePrefill, inference.PhaseDecode),
			input: 1000, output: 101,
			want: []attribution.Piece{
				piece(0, 1, 0, 0),
				piece(1, 2, 1000, 0),
				piece(2, 3, 100*(1+(1000+101.0/2)/contextTokensPerToken), stepWeightTokens*100),
			},
		},
		{
			name: "token counts unknown: a decode stream's and a prefill's rates", phases: phases(inference.PhasePrefill, inference.PhaseDecode),
			input: -1, output: -1,
			want: []attribution.Piece{
				piece(0, 1, defaultPrefillTokensPerSecond, 0),
				piece(1, 2, defaultDecodeTokensPerSecond, stepWeightTokens*defaultDecodeTokensPerSecond),
			},
		},
		{
			// No token after the first: still a token's worth of cost.
			name: "one token generated", phases: phases(inference.PhasePrefill, inference.PhaseDecode),
			input: 1000, output: 1,
			want: []attribution.Piece{
				piece(0, 1, 1000, 0),
				piece(1, 2, 1+(1000+1.0/2)/contextTokensPerToken, stepWeightTokens),
			},
		},
		{
			name: "prompt unknown: the decode's context not weighed", phases: phases(inference.PhasePrefill, inference.PhaseDecode),
			input: -1, output: 101,
			want: []attribution.Piece{
				piece(0, 1, defaultPrefillTokensPerSecond, 0),
				piece(1, 2, 100, stepWeightTokens*100),
			},
		},
		{
			name: "prefill and decode together, the prompt unknown: a decode stream's rate", phases: phases(inference.PhaseInference),
			input: -1, output: 50,
			want: []attribution.Piece{piece(0, 1, defaultDecodeTokensPerSecond, stepWeightTokens*50)},
		},
		{
			name: "prefill and decode together: all tokens, a step a generated token", phases: phases(inference.PhaseInference),
			input: 300, output: 50,
			want: []attribution.Piece{piece(0, 1, 350, stepWeightTokens*50)},
		},
		{
			name: "no phases: a decode stream over the window", input: 300, output: 50,
			want: []attribution.Piece{piece(0, 2, defaultDecodeTokensPerSecond, stepWeightTokens*defaultDecodeTokensPerSecond)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := inference.Request{Start: at(0), End: at(2), Phases: tc.phases, InputTokens: tc.input, OutputTokens: tc.output}
			got := costPieces(req, nil)
			require.Len(t, got, len(tc.want))
			for i := range got {
				assert.Equal(t, tc.want[i].Start, got[i].Start, "piece %d", i)
				assert.Equal(t, tc.want[i].End, got[i].End, "piece %d", i)
				assert.InDelta(t, tc.want[i].Rate, got[i].Rate, 1e-9, "piece %d", i)
				assert.InDelta(t, tc.want[i].Shared, got[i].Shared, 1e-9, "piece %d", i)
			}
		})
	}
}
