package score

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

var approx = cmpopts.EquateApprox(0, 1e-9)

const (
	compute = infersim.LabelComputeBound
	memory  = infersim.LabelMemoryBound
	idle    = infersim.LabelIdle
)

// enriched are the attributes of a vLLM span the processor enriched.
func enriched(energy float64, more ...any) map[string]any {
	m := map[string]any{attrFamily: "vllm", attrEnergy: energy}
	for i := 0; i < len(more); i += 2 {
		m[more[i].(string)] = more[i+1]
	}
	return m
}

func TestCoverageAndSpanChoice(t *testing.T) {
	f := newFixture(engine(infersim.MatchAttribute, 0))
	f.bins(0, t0, 10, 0, slices.Repeat([]string{idle}, 10)...)
	// 1: a GenAI client span, exported first, and the server span, both
	// enriched: the server span is the estimate, the client span an extra.
	f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0, Scheduled: t0 + 100*ms, FirstToken: t0 + 200*ms, Finished: t0 + 500*ms,
		PromptTokens: 900, Energy: 8, PrefillEnergy: 2, DecodeEnergy: 6})
	f.span(1, 0x11, "chat", t0, t0+510*ms, map[string]any{attrFamily: "genai", attrEnergy: 12.0})
	f.span(1, 1, "llm_request", t0, t0+500*ms, enriched(10, attrPrefillEnergy, 3.0, attrDecodeEnergy, 6.0, attrBottleneck, compute))
	// 2: aborted, no span.
	f.request(2, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 600*ms, Scheduled: t0 + 700*ms, FirstToken: t0 + 800*ms, Finished: t0 + 1000*ms,
		Energy: 5, Finish: infersim.FinishAbort})
	// 3: its span came through un-enriched.
	f.request(3, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 100*ms, Scheduled: t0 + 200*ms, FirstToken: t0 + 300*ms, Finished: t0 + 900*ms, Energy: 7})
	f.span(3, 3, "llm_request", t0+100*ms, t0+900*ms, nil)
	// 4: the enriched span has another ID than the truth's; aggregate and
	// phase spans beside it are no request spans.
	f.request(4, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 200*ms, Scheduled: t0 + 300*ms, FirstToken: t0 + 400*ms, Finished: t0 + 800*ms,
		PromptTokens: 100, Energy: 20, PrefillEnergy: 0, DecodeEnergy: 20})
	f.span(4, 0x44, "llm_request", t0+200*ms, t0+800*ms, enriched(23, attrPrefillEnergy, 1.0, attrDecodeEnergy, 22.0))
	f.span(4, 0x45, "decode", t0+400*ms, t0+500*ms, map[string]any{attrFamily: "tgi", attrEnergy: 100.0})
	f.span(4, 0x46, "compute", t0+300*ms, t0+800*ms, map[string]any{attrFamily: "triton", attrEnergy: 100.0})
	f.span(4, 0x47, "gpu.decode", t0+400*ms, t0+800*ms, map[string]any{attrEnergy: 22.0, attrBottleneck: memory})
	f.span(9, 9, "llm_request", t0, t0+100*ms, enriched(1))

	rep := f.score(t, Options{})

	if diff := cmp.Diff(Coverage{Requests: 4, Aborted: 1, WithSpan: 3, Enriched: 2, Share: 2.0 / 3, ExtraEnriched: 1, UnknownTraces: 1}, rep.Coverage, approx); diff != "" {
		t.Errorf("coverage (-want +got):\n%s", diff)
	}
	// Request errors |10−8|/8 = 0.25 and |23−20|/20 = 0.15, weighted
	// (2 + 3) / (8 + 20); prefill 1/2 and request 4's true 0; decode 0 and
	// 2/20, weighted 2 / (6 + 20). The costliest tenth of two requests is
	// request 4 alone. By prompt, request 4's 100 tokens come first: of
	// two requests, the second and fourth quartiles hold one each.
	want := EnergyErrors{
		Request:          ErrorStats{Count: 2, Median: 0.2, P90: 0.24, Max: 0.25, Weighted: 5.0 / 28},
		Prefill:          ErrorStats{Count: 1, ZeroTruth: 1, Median: 0.5, P90: 0.5, Max: 0.5, Weighted: 0.5},
		Decode:           ErrorStats{Count: 2, Median: 0.05, P90: 0.09, Max: 0.1, Weighted: 2.0 / 26},
		Costliest:        ErrorStats{Count: 1, Median: 0.15, P90: 0.15, Max: 0.15, Weighted: 0.15},
		ByPrompt:         [4]float64{0, 23.0 / 20, 0, 10.0 / 8},
		ByPromptRequests: [4]int{0, 1, 0, 1},
	}
	if diff := cmp.Diff(want, rep.Energy, approx); diff != "" {
		t.Errorf("energy errors (-want +got):\n%s", diff)
	}
	if l := rep.Labels; l.Request.Spans != 1 || l.Request.Missing != 1 || l.Prefill.Spans != 0 || l.Prefill.Missing != 2 {
		t.Errorf("label counts: request %d scored, %d missing; prefill %d scored, %d missing; want 1, 1, 0, 2",
			l.Request.Spans, l.Request.Missing, l.Prefill.Spans, l.Prefill.Missing)
	}
	// Trace 1's spans both count: 10 + 12, and 23 for trace 4.
	if c := rep.Conservation; c.AttributedJ != 45 || c.TrueJ != 40 || c.Ratio != 1.125 {
		t.Errorf("conservation: attributed %g J of %g J (ratio %g), want 45 of 40 (1.125)", c.AttributedJ, c.TrueJ, c.Ratio)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("report does not serialise: %v", err)
	}
}

func TestLabelAgreement(t *testing.T) {
	f := newFixture(engine(infersim.MatchAttribute, 0), engine(infersim.MatchAttribute, 1))
	f.bins(0, t0, 1, 0, compute, compute, memory, memory, compute)
	f.bins(1, t0, 1, 0, memory, memory, memory)
	// Request 1 on GPU 0 over [50, 450) ms: 200 ms compute-bound, 200 ms
	// memory-bound, and it says memory_bound: right for half its time.
	f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0, Scheduled: t0 + 50*ms, FirstToken: t0 + 150*ms, Finished: t0 + 450*ms, Energy: 1})
	f.span(1, 1, "llm_request", t0, t0+450*ms, enriched(1, attrBottleneck, memory, attrPrefillLabel, compute, attrDecodeLabel, memory))
	// Request 2 on GPU 1 over [0, 300) ms, memory-bound throughout, says
	// compute_bound for the request and its prefill.
	f.request(2, infersim.TruthRequest{Engine: 1, GPUs: []int{1}, Arrival: t0, Scheduled: t0, FirstToken: t0 + 100*ms, Finished: t0 + 300*ms, Energy: 1})
	f.span(2, 2, "llm_request", t0, t0+300*ms, enriched(1, attrBottleneck, compute, attrPrefillLabel, compute, attrDecodeLabel, memory))

	got := f.score(t, Options{}).Labels

	want := Labels{
		// 0.2 s right of 0.7 s; the truth is memory-bound for 0.5 s.
		Request: LabelScore{Spans: 2, Seconds: 0.7, Agreement: 2.0 / 7, Trivial: memory, TrivialAgreement: 5.0 / 7,
			// Request 1's window is 0.2 s of each, request 2's 0.3 s
			// memory-bound: no one label per span could be right for more.
			Ceiling:   5.0 / 7,
			Confusion: map[string]map[string]float64{compute: {memory: 0.2}, memory: {memory: 0.2, compute: 0.3}}},
		// Request 1's [50, 150) is compute-bound (right), request 2's
		// [0, 100) memory-bound (wrong); the tie goes to compute_bound.
		Prefill: LabelScore{Spans: 2, Seconds: 0.2, Agreement: 0.5, Trivial: compute, TrivialAgreement: 0.5, Ceiling: 1,
			Confusion: map[string]map[string]float64{compute: {compute: 0.1}, memory: {compute: 0.1}}},
		// Request 1's [150, 450): 100 ms compute, 200 ms memory; request
		// 2's [100, 300) memory.
		Decode: LabelScore{Spans: 2, Seconds: 0.5, Agreement: 0.8, Trivial: memory, TrivialAgreement: 0.8, Ceiling: 0.8,
			Confusion: map[string]map[string]float64{compute: {memory: 0.1}, memory: {memory: 0.4}}},
		Phases: LabelScore{Spans: 4, Seconds: 0.7, Agreement: 5.0 / 7, Trivial: memory, TrivialAgreement: 5.0 / 7, Ceiling: 6.0 / 7,
			Confusion: map[string]map[string]float64{compute: {compute: 0.1, memory: 0.1}, memory: {compute: 0.1, memory: 0.4}}},
	}
	// No intervals handed over: none scored (an empty confusion).
	if diff := cmp.Diff(want, got, approx, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

func TestIntervalLabels(t *testing.T) {
	f := newFixture(engine(infersim.MatchAttribute, 0), engine(infersim.MatchAttribute, 1))
	f.bins(0, t0, 1, 0, compute, compute, memory, memory, compute)
	f.bins(1, t0, 1, 0, memory, memory, memory)
	intervals := []GPUInterval{
		{GPU: 0, Start: t0, End: t0 + 200*ms, Label: compute},          // right for 0.2 s
		{GPU: 0, Start: t0 + 200*ms, End: t0 + 300*ms, Label: compute}, // wrong for 0.1 s
		{GPU: 1, Start: t0, End: t0 + 300*ms, Label: memory},           // right for 0.3 s
		// Wrong over the last true bin's second half; past the truth's
		// end, not scored.
		{GPU: 0, Start: t0 + 450*ms, End: t0 + 600*ms, Label: idle},
	}

	got := f.score(t, Options{Intervals: intervals}).Labels.Intervals

	want := LabelScore{Spans: 4, Seconds: 0.65, Agreement: 0.5 / 0.65, Trivial: memory, TrivialAgreement: 0.4 / 0.65, Ceiling: 1,
		Confusion: map[string]map[string]float64{compute: {compute: 0.2, idle: 0.05}, memory: {compute: 0.1, memory: 0.3}}}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("interval labels (-want +got):\n%s", diff)
	}
	if got := f.score(t, Options{}).Labels.Intervals; got.Spans != 0 || got.Seconds != 0 {
		t.Errorf("without intervals: %d scored over %g s, want none", got.Spans, got.Seconds)
	}
}

func TestConservation(t *testing.T) {
	f := newFixture(engine(infersim.MatchAttribute, 0))
	f.bins(0, t0, 10, 2, slices.Repeat([]string{compute}, 10)...) // W = [t0, t0+1 s)
	f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 100*ms, Scheduled: t0 + 100*ms, FirstToken: t0 + 200*ms, Finished: t0 + 500*ms, Energy: 30})
	f.span(1, 1, "llm_request", t0+100*ms, t0+500*ms, enriched(28))
	f.span(1, 0x11, "chat", t0+100*ms, t0+500*ms, map[string]any{attrFamily: "genai", attrEnergy: 5.0})
	f.request(2, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 600*ms, Scheduled: t0 + 600*ms, FirstToken: t0 + 700*ms, Finished: t0 + 1000*ms,
		Energy: 12, Finish: infersim.FinishAbort})
	// Over the start, over the end, and after W altogether.
	f.request(3, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 - 200*ms, Scheduled: t0 - 100*ms, FirstToken: t0, Finished: t0 + 300*ms, Energy: 9})
	f.span(3, 3, "llm_request", t0-200*ms, t0+300*ms, enriched(7))
	f.request(4, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 800*ms, Scheduled: t0 + 800*ms, FirstToken: t0 + 900*ms, Finished: t0 + 1200*ms, Energy: 4})
	f.span(4, 4, "llm_request", t0+800*ms, t0+1200*ms, enriched(3))
	f.request(5, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 2000*ms, Scheduled: t0 + 2000*ms, FirstToken: t0 + 2100*ms, Finished: t0 + 3000*ms, Energy: 6})

	got := f.score(t, Options{}).Conservation

	want := Conservation{WindowStart: t0, WindowEnd: t0 + 1000*ms, CounterJ: 100, IdleJ: 20,
		Requests: 2, TrueJ: 42, AttributedJ: 33, Ratio: 33.0 / 42, AbortedJ: 12, Straddling: 2}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("conservation (-want +got):\n%s", diff)
	}
}

// estimates runs the baseline on the fixture.
func (f *fixture) estimates(t *testing.T, interval time.Duration) []estimate {
	t.Helper()
	tl, err := newTimeline(&f.truth)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _, err := matchRequests(&f.truth, indexSpans([]ptrace.Traces{f.td}))
	if err != nil {
		t.Fatal(err)
	}
	return baseline(&f.truth, reqs, tl, int64(interval))
}

func TestBaselineSplitsIntervalsByOverlap(t *testing.T) {
	f := newFixture(engine(infersim.MatchAttribute, 0))
	f.bins(0, t0, 10, 0, slices.Repeat([]string{compute}, 10)...)       // [0, 1) s: 100 J
	f.bins(0, t0+1000*ms, 5, 0, slices.Repeat([]string{memory}, 10)...) // [1, 2) s: 50 J
	// A runs [0, 1.5) s, B [0.5, 1) s. The first interval's 100 J goes
	// 1 : 0.5 to A and B, the second's 50 J to A alone.
	f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0, Scheduled: t0 + 200*ms, FirstToken: t0 + 400*ms, Finished: t0 + 1500*ms,
		Energy: 100, PrefillEnergy: 10, DecodeEnergy: 90})
	f.span(1, 1, "llm_request", t0, t0+1500*ms, enriched(100, attrPrefillEnergy, 10.0, attrDecodeEnergy, 90.0))
	f.request(2, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 500*ms, Scheduled: t0 + 500*ms, FirstToken: t0 + 600*ms, Finished: t0 + 1000*ms,
		Energy: 40, PrefillEnergy: 8, DecodeEnergy: 32})
	f.span(2, 2, "llm_request", t0+500*ms, t0+1000*ms, enriched(40, attrPrefillEnergy, 8.0, attrDecodeEnergy, 32.0))

	got := f.estimates(t, time.Second)

	want := []estimate{
		// 200/3 J spread over A's 1 s of the first interval, then 50 J:
		// prefill 0.2 s of the first, decode 0.6 s of it and all the second.
		{total: 200.0/3 + 50, prefill: 40.0 / 3, decode: 40 + 50},
		// 100/3 J over B's 0.5 s: prefill 0.1 s, decode 0.4 s.
		{total: 100.0 / 3, prefill: 20.0 / 3, decode: 80.0 / 3},
	}
	if diff := cmp.Diff(want, got, approx, cmp.AllowUnexported(estimate{})); diff != "" {
		t.Errorf("baseline estimates (-want +got):\n%s", diff)
	}
	// Request errors are 1/6 for both; prefill 1/3 and 1/6, weighted
	// (10/3 + 4/3) / (10 + 8); decode 0 and 1/6, weighted (16/3) / (90 +
	// 32). The costliest tenth is A alone.
	wantErr := EnergyErrors{
		Request:   ErrorStats{Count: 2, Median: 1.0 / 6, P90: 1.0 / 6, Max: 1.0 / 6, Weighted: 1.0 / 6},
		Prefill:   ErrorStats{Count: 2, Median: 0.25, P90: 1.0/6 + 0.9*(1.0/6), Max: 1.0 / 3, Weighted: 7.0 / 27},
		Decode:    ErrorStats{Count: 2, Median: 1.0 / 12, P90: 0.15, Max: 1.0 / 6, Weighted: 8.0 / 183},
		Costliest: ErrorStats{Count: 1, Median: 1.0 / 6, P90: 1.0 / 6, Max: 1.0 / 6, Weighted: 1.0 / 6},
		// Equal prompts keep the truth's order: A, then B.
		ByPrompt:         [4]float64{0, 7.0 / 6, 0, 5.0 / 6},
		ByPromptRequests: [4]int{0, 1, 0, 1},
	}
	if diff := cmp.Diff(wantErr, f.score(t, Options{BaselineInterval: time.Second}).Baseline, approx); diff != "" {
		t.Errorf("baseline errors (-want +got):\n%s", diff)
	}
}

func TestBaselineGPUsFollowTheMatch(t *testing.T) {
	for _, tc := range []struct {
		match string
		want  float64
	}{
		{infersim.MatchAttribute, 100}, // its own GPU's 10 × 10 J
		{infersim.MatchHost, 140},      // and GPU 1's 10 × 4 J
	} {
		t.Run(tc.match, func(t *testing.T) {
			f := newFixture(engine(tc.match, 0, 1))
			f.bins(0, t0, 10, 0, slices.Repeat([]string{compute}, 10)...)
			f.bins(1, t0, 4, 0, slices.Repeat([]string{compute}, 10)...)
			f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0, Scheduled: t0, FirstToken: t0 + 100*ms, Finished: t0 + 1000*ms, Energy: 100})
			f.span(1, 1, "llm_request", t0, t0+1000*ms, enriched(100))
			if got := f.estimates(t, time.Second)[0].total; got != tc.want {
				t.Errorf("baseline energy %g J, want %g", got, tc.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		sorted []float64
		q      float64
		want   float64
	}{
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4}, 0.9, 3.7}, // 1 + 0.9 × 3 ranks
		{[]float64{1, 2, 3}, 0.5, 2},
		{[]float64{7}, 0.9, 7},
		{[]float64{1, 2, 3, 4}, 1, 4},
		// A span's +Inf energy is an infinite error: it takes its ranks
		// and leaves the others' as they are.
		{[]float64{1, 2, math.Inf(1)}, 0.5, 2},
		{[]float64{1, math.Inf(1), math.Inf(1)}, 0.5, math.Inf(1)},
		{[]float64{1, math.Inf(1)}, 0.5, math.Inf(1)},
		{[]float64{1, math.Inf(1), math.Inf(1), math.Inf(1)}, 0.5, math.Inf(1)}, // between two of its ranks
		{append(slices.Repeat([]float64{0.1}, 10), math.Inf(1)), 0.9, 0.1},
	} {
		if got := quantile(tc.sorted, tc.q); !cmp.Equal(got, tc.want, approx) {
			t.Errorf("quantile(%v, %g) = %g, want %g", tc.sorted, tc.q, got, tc.want)
		}
	}
}

func TestScoreRejectsBadInput(t *testing.T) {
	valid := func() *fixture {
		f := newFixture(engine(infersim.MatchAttribute, 0))
		f.bins(0, t0, 1, 0, compute)
		f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0, Finished: t0 + 100*ms})
		return f
	}
	for _, tc := range []struct {
		name, want string
		opts       Options
		spoil      func(*fixture)
	}{
		{name: "no bins", want: "no bins", spoil: func(f *fixture) { f.truth.Bins = nil }},
		{name: "no bin width", want: "bin_width_ns", spoil: func(f *fixture) { f.truth.Header.BinWidthNS = 0 }},
		{name: "interval off the bins", want: "not a positive multiple", opts: Options{BaselineInterval: 150 * time.Millisecond}},
		{name: "negative interval", want: "not a positive multiple", opts: Options{BaselineInterval: -time.Second}},
		{name: "unknown engine", want: "engine 3", spoil: func(f *fixture) { f.truth.Requests[0].Engine = 3 }},
		{name: "unknown match", want: `match "process"`, spoil: func(f *fixture) { f.truth.Header.Engines[0].Match = "process" }},
		{name: "bad trace ID", want: "trace_id", spoil: func(f *fixture) { f.truth.Requests[0].TraceID = "xyz" }},
		{name: "bad span ID", want: "span_id", spoil: func(f *fixture) { f.truth.Requests[0].SpanID = "00" }},
		{name: "trace ID twice", want: "another request", spoil: func(f *fixture) {
			f.truth.Requests = append(f.truth.Requests, f.truth.Requests[0])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := valid()
			if tc.spoil != nil {
				tc.spoil(f)
			}
			_, err := Score(&f.truth, []ptrace.Traces{f.td}, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestBaselinePhasesOnTheRequestsGpuvizScores: a span without phase
// energies (TGI's) leaves the phases out of gpuviz's score, counted as
// missing; the baseline's phases leave out the same requests, so that the
// two medians compare the same requests.
func TestBaselinePhasesOnTheRequestsGpuvizScores(t *testing.T) {
	f := newFixture(engine(infersim.MatchAttribute, 0))
	f.bins(0, t0, 10, 0, slices.Repeat([]string{compute}, 10)...)
	f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0, Scheduled: t0, FirstToken: t0 + 100*ms, Finished: t0 + 500*ms,
		Energy: 50, PrefillEnergy: 20, DecodeEnergy: 30})
	f.span(1, 1, "llm_request", t0, t0+500*ms, enriched(50, attrPrefillEnergy, 20.0, attrDecodeEnergy, 30.0))
	f.request(2, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 500*ms, Scheduled: t0 + 500*ms, FirstToken: t0 + 600*ms, Finished: t0 + 1000*ms,
		Energy: 50, PrefillEnergy: 20, DecodeEnergy: 30})
	f.span(2, 2, "llm_request", t0+500*ms, t0+1000*ms, enriched(50))

	rep := f.score(t, Options{BaselineInterval: time.Second})

	for _, phase := range []struct {
		name          string
		gpuviz, naive ErrorStats
	}{
		{"prefill", rep.Energy.Prefill, rep.Baseline.Prefill},
		{"decode", rep.Energy.Decode, rep.Baseline.Decode},
	} {
		if g, b := phase.gpuviz, phase.naive; g.Count != 1 || g.Missing != 1 || b.Count != g.Count || b.Missing != g.Missing {
			t.Errorf("%s: gpuviz scored %d (%d missing), baseline %d (%d missing); want 1 (1) for both",
				phase.name, g.Count, g.Missing, b.Count, b.Missing)
		}
	}
	if b := rep.Baseline.Request; b.Count != 2 {
		t.Errorf("baseline request errors over %d requests, want both", b.Count)
	}
}
