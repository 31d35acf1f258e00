package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// drain asks the synthetic source for [start, start+d) in ticks.
func drain(s *syntheticSource, start int64, d time.Duration) []nvmlsim.Request {
	var out []nvmlsim.Request
	for from := start; from < start+int64(d); from += int64(tick) {
		out = append(out, s.Requests(from, from+int64(tick))...)
	}
	return out
}

// maxOverlap is the most requests in the model ([PrefillStart, End)) at once.
func maxOverlap(reqs []nvmlsim.Request) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, r := range reqs {
		edges = append(edges, edge{r.PrefillStart, 1}, edge{r.End, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta // ends first
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

func TestSyntheticRespectsConcurrency(t *testing.T) {
	// Overloaded: 20 arrivals a second, 3 slots, about 4.5 s a request.
	s := newSyntheticSource(testStart, 20, 3, defaultShape, rand.New(rand.NewPCG(7, 7)))
	reqs := drain(s, testStart, 10*time.Minute)
	require.NotEmpty(t, reqs)
	assert.Equal(t, 3, maxOverlap(reqs), "saturated, never above the limit")
	assert.Positive(t, s.dropped, "the waiting room is bounded")
	assert.LessOrEqual(t, len(s.pending), 3+s.maxWaiting)
	for i, r := range reqs {
		assert.Equal(t, -1, r.GPU)
		assert.GreaterOrEqual(t, r.PrefillStart-r.Arrival, int64(defaultShape.schedDelay[0]))
		assert.True(t, r.DecodeStart-r.PrefillStart >= int64(defaultShape.prefill[0]) && r.DecodeStart-r.PrefillStart <= int64(defaultShape.prefill[1]))
		assert.True(t, r.End-r.DecodeStart >= int64(defaultShape.decode[0]) && r.End-r.DecodeStart <= int64(defaultShape.decode[1]))
		assert.Positive(t, r.PromptTokens)
		assert.Positive(t, r.OutputTokens)
		if i > 0 {
			assert.GreaterOrEqual(t, r.End, reqs[i-1].End)
		}
	}
}

func TestSyntheticLightLoadBarelyQueues(t *testing.T) {
	rate := 2.0
	s := newSyntheticSource(testStart, rate, 16, defaultShape, rand.New(rand.NewPCG(1, 9)))
	d := 10 * time.Minute
	reqs := drain(s, testStart, d)
	assert.Zero(t, s.dropped)
	assert.LessOrEqual(t, maxOverlap(reqs), 16)
	// Poisson arrivals at the rate: 1200 expected, sd about 35.
	assert.InDelta(t, rate*d.Seconds(), float64(len(reqs)), 150)
	queued := 0
	for _, r := range reqs {
		if r.PrefillStart-r.Arrival > int64(defaultShape.schedDelay[1]) {
			queued++
		}
	}
	assert.Less(t, queued, len(reqs)/10, "with slots to spare, requests wait only for the scheduler")
}

func TestSyntheticRequestsComeOutOnceWhenTheyEnd(t *testing.T) {
	s := newSyntheticSource(testStart, 10, 4, defaultShape, rand.New(rand.NewPCG(3, 3)))
	seen := map[uint64]bool{}
	for from := testStart; from < testStart+int64(2*time.Minute); from += int64(tick) {
		to := from + int64(tick)
		for _, r := range s.Requests(from, to) {
			assert.False(t, seen[r.ID])
			seen[r.ID] = true
			assert.True(t, r.End >= from && r.End < to, "reported in the tick it ended")
		}
	}
	assert.NotEmpty(t, seen)
}

func TestSimulatedSourceInTicksEqualsOneRange(t *testing.T) {
	m, err := nvmlsim.LookupModel("a100")
	require.NoError(t, err)
	whole := newSimulatedSource(m, 4, 6).Requests(testStart, testStart+int64(2*time.Minute))
	ticked := newSimulatedSource(m, 4, 6)
	var got []nvmlsim.Request
	for from := testStart; from < testStart+int64(2*time.Minute); from += int64(tick) {
		got = append(got, ticked.Requests(from, from+int64(tick))...)
	}
	assert.Equal(t, whole, got)
	gpus := map[int]bool{}
	for _, r := range got {
		gpus[r.GPU] = true
	}
	assert.Len(t, gpus, 6)
}

func TestSyntheticModeSpans(t *testing.T) {
	spans, reqs, g := emitted(t, time.Minute, "--mode", "synthetic", "--rate", "4", "--concurrency", "8")
	require.Len(t, spans, len(reqs))
	for _, s := range spans {
		a := attrs(s.span.Attributes())
		assert.Equal(t, "llm_request", s.span.Name())
		assert.NotContains(t, attrs(s.res.Attributes()), inferspans.GPUUUIDKey)
		assert.Len(t, a, len(vllmAttributes))
	}
	assert.Len(t, g.src.(*legacySource).servers, 1)

	spans, _, _ = emitted(t, time.Minute, "--mode", "synthetic", "--match", "attribute", "--gpu-uuid", "GPU-1234")
	for _, s := range spans {
		assert.Equal(t, "GPU-1234", attrs(s.res.Attributes())[inferspans.GPUUUIDKey].Str())
	}
}
