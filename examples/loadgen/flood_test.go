package main

import (
	"github.com/gpuviz/gpuviz/internal/otlpsend"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/inferspans"
)

func TestFloodSourceHoldsItsRate(t *testing.T) {
	rate := 20000.0
	s := newFloodSource(testStart, rate, rand.New(rand.NewPCG(5, 5)))
	d := 10 * time.Second
	total := 0
	last := int64(0)
	for from := testStart; from < testStart+int64(d); from += int64(tick) {
		to := from + int64(tick)
		reqs := s.Requests(from, to)
		// Evenly spaced ends: every tick holds rate × tick, give or take one.
		assert.InDelta(t, rate*tick.Seconds(), float64(len(reqs)), 1)
		for _, r := range reqs {
			assert.True(t, r.End >= from && r.End < to, "reported in the tick it ended")
			assert.GreaterOrEqual(t, r.End, last, "in order of their end")
			last = r.End
			assert.Equal(t, -1, r.GPU)
			assert.True(t, r.End-r.Arrival >= int64(otlpsend.FloodShape.Total[0]) && r.End-r.Arrival <= int64(otlpsend.FloodShape.Total[1]), "0.5 to 3.5 s")
			assert.Less(t, r.Arrival, r.PrefillStart)
			assert.Less(t, r.PrefillStart, r.DecodeStart)
			assert.Less(t, r.DecodeStart, r.End)
			assert.Positive(t, r.PromptTokens)
			assert.Positive(t, r.OutputTokens)
		}
		total += len(reqs)
	}
	assert.Equal(t, int(rate*d.Seconds()), total)
	// A late tick (the exporter fell behind) catches up: nothing is lost.
	assert.Len(t, s.Requests(0, testStart+int64(d)+int64(time.Second)), int(rate))
}

func TestFloodModeSpans(t *testing.T) {
	spans, reqs, g := emitted(t, 2*time.Second, "--mode", "flood", "--rate", "500", "--match", "host")
	require.Len(t, spans, len(reqs))
	assert.InDelta(t, 1000, len(spans), 1)
	assert.Len(t, g.src.(*legacySource).servers, 1)
	for _, s := range spans {
		assert.Equal(t, "llm_request", s.span.Name())
		res := attrs(s.res.Attributes())
		assert.NotContains(t, res, inferspans.GPUUUIDKey)
		assert.Equal(t, hostname(t), res["host.name"].Str())
		d := s.span.EndTimestamp().AsTime().Sub(s.span.StartTimestamp().AsTime())
		assert.True(t, d >= otlpsend.FloodShape.Total[0] && d <= otlpsend.FloodShape.Total[1], "span of %v", d)
	}
}

func TestFloodFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--mode", "flood", "--rate", "20000", "--match", "host"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 20000.0, cfg.Rate)
	for args, want := range map[string][]string{
		"--rate 0":             {"--mode", "flood", "--rate", "0"},
		"--concurrency":        {"--mode", "flood", "--concurrency", "8"},
		"--scenario":           {"--mode", "flood", "--scenario", "steady"},
		"needs --gpu-uuid":     {"--mode", "flood", "--match", "attribute"},
		`unknown family "trt"`: {"--mode", "flood", "--families", "trt"},
	} {
		_, err := parseFlags(want, io.Discard)
		assert.ErrorContains(t, err, args, want)
	}
}
