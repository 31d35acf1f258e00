package view

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every field of a request reaches the answer as docs/view.md says.
func TestARequestIsAnsweredAsRecorded(t *testing.T) {
	now := t0.Add(time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	sim, hw := s.GPU("h", "sim"), s.GPU("h", "real")
	sim.SetSimulated(true)
	start := t0.Add(10 * time.Second).UnixNano()
	req := Request{GPUs: []*GPU{sim, hw}, Model: "llama", Family: "vllm", Start: start, End: start + 3e9,
		Bottleneck: "memory_bound", Share: 0.5, Energy: 90, EnergyKnown: true, PerToken: 0.75,
		InputTokens: 7, OutputTokens: 120, NumPhases: MaxPhases}
	for i, n := range []string{"queue", "prefill", "decode", "inference"} {
		p0 := start + int64(i)*5e8
		req.Phases[i] = Phase{Name: n, Start: p0, End: p0 + 4e8, Bottleneck: labelNames[i], Share: 1, Energy: float64(10 * (i + 1))}
	}
	s.AddRequest(&req)
	// Unknown energy, tokens and per-token energy read null; a share
	// outside 0..1 is unknown too; no output tokens is 0, not unknown.
	s.AddRequest(&Request{GPUs: []*GPU{hw}, Start: start, End: start + 1e9, Share: 1.5, PerToken: 2,
		InputTokens: -1, OutputTokens: 0, NumPhases: 1, Phases: [MaxPhases]Phase{{Name: "decode", Start: start, End: start + 1e9, Energy: 5}}})
	s.AddRequest(&Request{GPUs: []*GPU{hw}, Start: start, End: start + 1e9, EnergyKnown: true, Energy: 3, InputTokens: -1, OutputTokens: -1})

	code, _, body := query(t, r, "/api/v1/view?range=60")
	require.Equal(t, http.StatusOK, code, body)
	var a struct {
		Requests []map[string]any `json:"requests"`
		Summary  struct {
			PerToken map[string]float64 `json:"energy_per_token_j"`
		} `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &a))
	require.Len(t, a.Requests, 3)
	ms := func(ns int64) float64 { return float64(ns / 1e6) }
	phases := []any{}
	for i, n := range []string{"queue", "prefill", "decode", "inference"} {
		p0 := start + int64(i)*5e8
		phases = append(phases, map[string]any{"name": n, "start": ms(p0), "end": ms(p0 + 4e8),
			"bottleneck": labelNames[i], "bottleneck_share": 1.0, "energy_j": float64(10 * (i + 1))})
	}
	first := a.Requests[0]
	delete(first, "trace_id")
	delete(first, "span_id")
	assert.Equal(t, map[string]any{"seq": 1.0, "gpus": []any{"h/sim", "h/real"}, "model": "llama", "family": "vllm",
		"start": ms(start), "end": ms(start + 3e9), "bottleneck": "memory_bound", "bottleneck_share": 0.5,
		"energy_j": 90.0, "energy_per_token_j": 0.75, "input_tokens": 7.0, "output_tokens": 120.0,
		"simulated": true, "phases": phases}, first, "a request over a simulated and a real GPU is simulated")

	unknown := a.Requests[1]
	for _, f := range []string{"bottleneck", "bottleneck_share", "energy_j", "energy_per_token_j", "input_tokens"} {
		assert.Nil(t, unknown[f], f)
	}
	assert.Equal(t, 0.0, unknown["output_tokens"])
	assert.Equal(t, false, unknown["simulated"])
	assert.Equal(t, []any{map[string]any{"name": "decode", "start": ms(start), "end": ms(start + 1e9),
		"bottleneck": nil, "bottleneck_share": nil, "energy_j": nil}}, unknown["phases"], "no energy known, none for a phase")
	assert.Nil(t, a.Requests[2]["energy_per_token_j"], "energy known, per token not")
	assert.Equal(t, map[string]float64{"p50": 0.75, "p90": 0.75, "p99": 0.75}, a.Summary.PerToken, "only known per-token energies")
}

// At most MaxRequestsSent requests go out, the newest.
func TestTheNewestRequestsAreSent(t *testing.T) {
	now := t0.Add(time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	for range MaxRequestsSent + 100 {
		s.AddRequest(&Request{GPUs: []*GPU{g}, Start: t0.UnixNano(), End: t0.Add(time.Second).UnixNano()})
	}
	_, a, _ := query(t, r, "/api/v1/view?range=60")
	require.Len(t, a.Requests, MaxRequestsSent)
	assert.EqualValues(t, 101, a.Requests[0].Seq)
	assert.EqualValues(t, MaxRequestsSent+100, a.Requests[MaxRequestsSent-1].Seq)
}

// Columns, final_ms and the GPUs' order as docs/view.md says.
func TestColumnsAndFinalMS(t *testing.T) {
	lim := testLimits()
	lim.Retention = time.Hour
	now := t0.Add(30*time.Minute + 700*time.Millisecond)
	r := NewRegistry(lim, "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")

	// step_ms is ceil(range/columns) rounded up to a whole second: never
	// more columns than asked, and the partial newest.
	for _, tc := range []struct {
		rng, cols int
		step      int64
	}{{305, 10, 31000}, {1501, 1500, 2000}, {60, 4000, 1000}} {
		_, a, _ := query(t, r, fmt.Sprintf("/api/v1/view?range=%d&columns=%d", tc.rng, tc.cols))
		assert.Equal(t, tc.step, a.StepMS, "%d s in %d", tc.rng, tc.cols)
		assert.LessOrEqual(t, len(a.Time), tc.cols+1)
	}

	// No labels yet: final at the newest sample's second's end, floored
	// to a column start.
	a, b, c := s.GPU("b", "x"), s.GPU("a", "y"), s.GPU("a", "z")
	a.SetInfo(0, "")
	b.SetInfo(1, "")
	c.SetInfo(0, "")
	newest := now.Add(-11 * time.Second).Truncate(time.Second)
	a.Add(Power, newest.UnixNano(), 1)
	_, ans, _ := query(t, r, "/api/v1/view?range=300&columns=150") // 2 s columns
	assert.Equal(t, newest.Add(time.Second).UnixMilli()/2000*2000, ans.FinalMS)
	var order []string
	for _, g := range ans.GPUs {
		require.NotNil(t, g.Index, "index 0 is an index")
		order = append(order, fmt.Sprintf("%s/%d", g.Host, *g.Index))
	}
	assert.Equal(t, []string{"a/0", "a/1", "b/0"}, order, "by host, then index")

	// Labels: final at the oldest of the GPUs' newest labels, floored.
	from := now.Add(-5 * time.Minute).Truncate(time.Second)
	for ts := from; ts.Before(now.Add(-20 * time.Second)); ts = ts.Add(time.Second) {
		// A column of two seconds, the first memory bound, the second
		// 600 ms compute bound: memory bound holds the column longest.
		if ts.Unix()%2 == 0 {
			a.Label(ts.UnixNano(), 1e9, "memory_bound")
		} else {
			a.Label(ts.UnixNano(), 4e8, "memory_bound")
			a.Label(ts.Add(400*time.Millisecond).UnixNano(), 6e8, "compute_bound")
		}
		b.Label(ts.UnixNano(), 1e9, "idle")
	}
	c.Label(from.UnixNano(), int64(5*time.Minute-40*time.Second-300*time.Millisecond), "idle")
	_, ans, _ = query(t, r, "/api/v1/view?range=300&columns=150")
	lastC := from.Add(5*time.Minute - 40*time.Second - 300*time.Millisecond)
	assert.Equal(t, lastC.UnixMilli()/2000*2000, ans.FinalMS, "the GPU labelled least far")
	for i, l := range ans.Labels["b/x"] {
		if ans.Time[i] >= from.UnixMilli() && ans.Time[i]+2000 <= now.Add(-20*time.Second).UnixMilli() {
			require.NotNil(t, l)
			assert.Equal(t, "memory_bound", *l, "column %d", i)
		}
	}

	// With since: columns from since rounded up; the summary and the
	// requests still cover the whole range.
	s.AddRequest(&Request{GPUs: []*GPU{a}, Start: from.UnixNano(), End: from.Add(time.Second).UnixNano(), EnergyKnown: true, Energy: 1})
	_, full, _ := query(t, r, "/api/v1/view?range=300&columns=150")
	last := full.Time[len(full.Time)-1]
	_, inc, _ := query(t, r, fmt.Sprintf("/api/v1/view?range=300&columns=150&since=%d", last-3500))
	assert.Equal(t, []int64{last - 2000, last}, inc.Time)
	assert.Equal(t, full.Summary, inc.Summary)
	assert.Len(t, inc.Requests, 1)
}

// A GPU silent for 30 s is stale and nothing else; a GPU without its
// memory total is never full; a GPU without an index is named by UUID.
func TestStaleAndUnknownGPUsAnomalies(t *testing.T) {
	now := t0.Add(2 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	quiet, noTotal := s.GPU("h", "GPU-quiet"), s.GPU("h", "GPU-nototal")
	lastQuiet := now.Add(-anomalyStale * time.Second)
	for ts := t0; !ts.After(now); ts = ts.Add(time.Second) {
		if !ts.After(lastQuiet) {
			quiet.Add(Temperature, ts.UnixNano(), 90)
		}
		noTotal.Add(MemoryUsed, ts.UnixNano(), 80e9)
	}
	_, a, _ := query(t, r, "/api/v1/view?range=60")
	require.Len(t, a.Summary.Anomalies, 1)
	an := a.Summary.Anomalies[0]
	assert.Equal(t, "stale", an.Kind, "hot before it went quiet: stale only")
	assert.Equal(t, lastQuiet.Add(time.Second).UnixMilli(), an.Since, "from the first second without data")
	assert.Equal(t, "GPU GPU-quiet: no data for 30 s", an.Text)
}

// A source's GPUs and requests: registered once per processor side,
// released once each, its counts kept once gone.
func TestSourcesAreSharedAndCounted(t *testing.T) {
	r := NewRegistry(Limits{Retention: time.Minute, MaxGPUs: 2, MaxRequests: 1}, "", func() time.Time { return t0 })
	first, releaseFirst := r.RegisterSource("gpuviz")
	second, releaseSecond := r.RegisterSource("gpuviz/edge")
	traces, releaseTraces := r.RegisterSource("gpuviz") // the processor's other side
	require.Same(t, first, traces)

	second.GPU("h", "a")
	first.GPU("h", "a").SetSimulated(true)
	first.GPU("h", "b")
	first.GPU("h", "c") // refused: max_gpus 2
	second.GPU("h", "b")
	second.GPU("h", "c")          // refused
	second.AddRequest(&Request{}) // overwritten
	second.AddRequest(&Request{}) // kept
	assert.Equal(t, Dropped{GPUs: 2, RequestsOverwritten: 1}, r.Dropped())
	var srcs struct {
		Sources []struct {
			ID        string
			Simulated bool
		}
	}
	require.NoError(t, json.Unmarshal(r.AppendSources(nil), &srcs))
	assert.Equal(t, "gpuviz", srcs.Sources[0].ID)
	assert.True(t, srcs.Sources[0].Simulated)
	_, a, _ := query(t, r, "/api/v1/view")
	assert.Equal(t, "gpuviz", a.Source, "the first registered is the default")

	releaseFirst()
	releaseFirst() // once only
	_, a, _ = query(t, r, "/api/v1/view")
	assert.Equal(t, "gpuviz", a.Source, "still held by the other side")
	releaseTraces()
	_, a, _ = query(t, r, "/api/v1/view")
	assert.Equal(t, "gpuviz/edge", a.Source)
	assert.Equal(t, Dropped{GPUs: 2, RequestsOverwritten: 1}, r.Dropped(), "what a released source dropped still counts")
	releaseSecond()
	assert.Equal(t, Dropped{GPUs: 2, RequestsOverwritten: 1}, r.Dropped())
	assert.Zero(t, r.GPUs())
}

// A GPU made but not yet given a sample holds its place: the processor
// makes a GPU on its first reading of any kind (its info, its backend).
func TestAGPUNotYetSampledIsNotEvicted(t *testing.T) {
	lim := testLimits()
	lim.MaxGPUs, lim.Retention = 1, time.Minute
	now := t0
	r := NewRegistry(lim, "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	a := s.GPU("h", "a")
	a.SetInfo(0, "H200")
	assert.Nil(t, s.GPU("h", "b"), "a was made now")
	now = now.Add(2 * time.Minute)
	assert.NotNil(t, s.GPU("h", "b"), "a silent for the retention since made")
	assert.True(t, a.Evicted())
}

// A GPU whose host's clock runs ahead of the view's (ingest takes points
// up to a minute ahead) does not break the answer.
func TestSamplesAheadOfTheViewsClock(t *testing.T) {
	now := t0.Add(5 * time.Minute)
	r := NewRegistry(testLimits(), "", func() time.Time { return now })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	for ts := now.Add(-time.Minute); ts.Before(now.Add(50 * time.Second)); ts = ts.Add(time.Second) {
		g.Add(Power, ts.UnixNano(), 100)
		g.Label(ts.UnixNano(), 1e9, "idle")
	}
	code, a, body := query(t, r, "/api/v1/view?range=60&columns=60")
	require.Equal(t, http.StatusOK, code, body)
	assert.Len(t, a.Series["h/a"]["power_w"].Mean, len(a.Time))
}

// SetInfo without a name (a reading that carries none) keeps the name.
func TestInfoWithoutANameKeepsIt(t *testing.T) {
	r := NewRegistry(testLimits(), "", func() time.Time { return t0 })
	s, _ := r.RegisterSource("gpuviz")
	g := s.GPU("h", "a")
	g.SetInfo(3, "NVIDIA H200")
	g.SetInfo(-1, "")
	_, a, _ := query(t, r, "/api/v1/view?range=60")
	require.Len(t, a.GPUs, 1)
	require.NotNil(t, a.GPUs[0].Index)
	assert.Equal(t, 3, *a.GPUs[0].Index)
	assert.Equal(t, "NVIDIA H200", a.GPUs[0].Name)
}

// A source interns at most maxInternedStrings model names: a span
// attribute unique per request (a model with a request ID in it) does not
// grow the table.
func TestInternedNamesAreBounded(t *testing.T) {
	r := NewRegistry(testLimits(), "", func() time.Time { return t0 })
	s, _ := r.RegisterSource("gpuviz")
	for i := range 3 * maxInternedStrings {
		s.AddRequest(&Request{Model: fmt.Sprint("model-", i)})
	}
	assert.Len(t, s.strings, maxInternedStrings)
}
