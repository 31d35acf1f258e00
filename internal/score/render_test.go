package score

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

func sampleReport() Report {
	return Report{
		Scenario: "steady", Seed: 7, GPUModel: "H200", BaselineIntervalS: 10,
		Coverage: Coverage{Requests: 42, Aborted: 2, WithSpan: 40, Enriched: 39, Share: 39.0 / 40, ExtraEnriched: 1},
		Energy: EnergyErrors{
			Request:          ErrorStats{Count: 39, Median: 0.031, P90: 0.08, Max: 0.4, Weighted: 0.027},
			Prefill:          ErrorStats{Count: 39, Median: 0.05},
			Decode:           ErrorStats{Count: 39, Median: 0.032},
			Costliest:        ErrorStats{Count: 4, Median: 0.012, P90: 0.02, Max: 0.03, Weighted: 0.011},
			ByPrompt:         [4]float64{0.81, 0.9, 1.0004, 1.08},
			ByPromptRequests: [4]int{9, 10, 10, 10},
		},
		Baseline: EnergyErrors{
			Request: ErrorStats{Count: 39, Median: 0.12, P90: 0.301, Max: 2.005, Weighted: 0.14},
			Prefill: ErrorStats{Count: 39, Median: 0.201},
		},
		Labels: Labels{
			Request: LabelScore{Spans: 39, Seconds: 10, Agreement: 0.812, Trivial: memory, TrivialAgreement: 0.64, Ceiling: 0.9,
				Confusion: map[string]map[string]float64{memory: {memory: 6.4, "unknown": 0.5}, compute: {memory: 1.3, compute: 1.8}}},
			Phases: LabelScore{Spans: 78, Seconds: 10, Agreement: 0.77, Trivial: memory, TrivialAgreement: 0.501, Ceiling: 0.855},
			Intervals: LabelScore{Spans: 100, Seconds: 10, Agreement: 0.93, Trivial: memory, TrivialAgreement: 0.6, Ceiling: 1,
				Confusion: map[string]map[string]float64{memory: {memory: 6, compute: 0.7}}},
		},
		Conservation: Conservation{Ratio: 0.9984},
	}
}

func TestMarkdownRow(t *testing.T) {
	want := "| steady | 97.5% (39/40) | 3.1% / 8.0% / 40.0% | 12.0% / 30.1% / 200.5% | 2.7% (14.0%) | 1.2% (–) | 5.0% (20.1%) | 3.2% (–) | 81.2% (64.0%) | 77.0% (50.1%) | 90.0% / 85.5% | 93.0% (60.0%) | 0.998 |\n"
	if got := sampleReport().MarkdownRow(); got != want {
		t.Errorf("row\n%s want\n%s", got, want)
	}
	if cols, header := strings.Count(want, "|"), strings.SplitN(MarkdownHeader(), "\n", 2)[0]; strings.Count(header, "|") != cols {
		t.Errorf("the header has %d columns, a row %d", strings.Count(header, "|")-1, cols-1)
	}
}

func TestMarkdownSection(t *testing.T) {
	got := sampleReport().MarkdownSection()
	for _, want := range []string{
		"### steady (seed 7, H200)\n",
		"42 requests: 2 aborted (no span), 40 with a span, 39 enriched (97.5%), 1 extra enriched spans, 0 unknown traces.",
		"| baseline request | 39 | 12.0% | 30.1% | 200.5% | 14.0% | 0 | 0 |\n",
		"| gpuviz costliest tenth | 4 | 1.2% | 2.0% | 3.0% | 1.1% | 0 | 0 |\n",
		"| baseline costliest tenth | 0 | – | – | – | – | 0 | 0 |\n",
		"\nShare of the true energy taken, by quartile of prompt tokens (shortest first): gpuviz 0.810 / 0.900 / 1.000 / 1.080, baseline – / – / – / –.\n",
		"| request | 39 | 10.0 | 81.2% | memory_bound | 64.0% | 90.0% | 0 |\n",
		// Rows and columns in infersim.Labels order, unknown last.
		"| truth \\ gpuviz | compute_bound | memory_bound | unknown |\n|---|---|---|---|\n" +
			"| compute_bound | 1.8 | 1.3 | 0.0 |\n| memory_bound | 0.0 | 6.4 | 0.5 |\n",
		"prefill label confusion, GPU seconds (rows: truth, columns: gpuviz):\n\n(nothing scored)\n",
		"| gpu interval | 100 | 10.0 | 93.0% | memory_bound | 60.0% | 100.0% | 0 |\n",
		"gpu interval label confusion, GPU seconds (rows: truth, columns: gpuviz):\n\n| truth \\ gpuviz | compute_bound | memory_bound |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
}

func TestIntervalRowsOnlyWhereScored(t *testing.T) {
	r := sampleReport()
	r.Labels.Intervals = LabelScore{}
	if got := r.MarkdownSection() + r.Text(); strings.Contains(got, "gpu interval") {
		t.Errorf("a run without interval labels shows them:\n%s", got)
	}
	if got := r.MarkdownRow(); !strings.Contains(got, "| – (–) |") {
		t.Errorf("row without interval labels: %s", got)
	}
}

func TestText(t *testing.T) {
	got := sampleReport().Text()
	for _, want := range []string{
		"97.5% (39/40) enriched; 2 aborted, 1 extra enriched spans",
		"gpuviz request            3.1% / 8.0% / 40.0%     2.7%   (n=39)\n",
		"gpuviz costliest tenth    1.2% / 2.0% / 3.0%      1.1%   (n=4)\n",
		"  by prompt quartile        share of the true energy: gpuviz 0.810 / 0.900 / 1.000 / 1.080, baseline – / – / – / –\n",
		"phases                    77.0%, memory_bound 50.1%, 85.5%\n",
		"= 0.998",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("text lacks %q:\n%s", want, got)
		}
	}
}

func TestPooledSeedsAreNamed(t *testing.T) {
	r := sampleReport()
	r.Seed, r.PooledSeeds = 0, []uint64{100, 101, 102}
	if got := r.MarkdownSection(); !strings.HasPrefix(got, "### steady (seeds 100, 101, 102, H200)\n") {
		t.Errorf("a pooled report's heading: %q", got[:strings.Index(got, "\n")])
	}
	if got := r.Text(); !strings.Contains(got, "steady (seeds 100, 101, 102, H200)") {
		t.Errorf("a pooled report's text: %q", got[:strings.Index(got, "\n")])
	}
}

// A quartile whose requests an estimator gave no energy reads 0.000, its
// worst; a dash is a quartile without requests.
func TestQuartileGivenNothingIsNotEmpty(t *testing.T) {
	f := newFixture(engine(infersim.MatchAttribute, 0))
	f.bins(0, t0, 10, 0, slices.Repeat([]string{compute}, 10)...)
	// Of two requests, the second quartile holds the short prompt, which
	// gpuviz gave 0 J, the fourth the long one.
	f.request(1, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0, Scheduled: t0, FirstToken: t0 + 100*ms, Finished: t0 + 500*ms, PromptTokens: 10, Energy: 40})
	f.span(1, 1, "llm_request", t0, t0+500*ms, enriched(0))
	f.request(2, infersim.TruthRequest{GPUs: []int{0}, Arrival: t0 + 500*ms, Scheduled: t0 + 500*ms, FirstToken: t0 + 600*ms, Finished: t0 + 1000*ms, PromptTokens: 900, Energy: 60})
	f.span(2, 2, "llm_request", t0+500*ms, t0+1000*ms, enriched(60))

	rep := f.score(t, Options{BaselineInterval: time.Second})

	want := "gpuviz – / 0.000 / – / 1.000, baseline – / 1.250 / – / 0.833"
	for name, got := range map[string]string{"text": rep.Text(), "markdown": rep.MarkdownSection()} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", name, want, got)
		}
	}
}
