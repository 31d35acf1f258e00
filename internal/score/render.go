package score

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// MarkdownHeader is the head of the table in docs/accuracy.md whose rows
// MarkdownRow writes.
func MarkdownHeader() string {
	return "| scenario | coverage | energy error median / p90 / max | baseline median / p90 / max | energy-weighted error (baseline) | costliest tenth median (baseline) | prefill median (baseline) | decode median (baseline) | request label agreement (trivial) | phase label agreement (trivial) | one-label ceiling request / phases | GPU interval label agreement (trivial) | attributed / true |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
}

// MarkdownRow is the run's headline numbers, one row of MarkdownHeader's
// table.
func (r Report) MarkdownRow() string {
	cells := []string{
		r.Scenario,
		r.Coverage.String(),
		spread(r.Energy.Request),
		spread(r.Baseline.Request),
		fmt.Sprintf("%s (%s)", weighted(r.Energy.Request), weighted(r.Baseline.Request)),
		fmt.Sprintf("%s (%s)", median(r.Energy.Costliest), median(r.Baseline.Costliest)),
		fmt.Sprintf("%s (%s)", median(r.Energy.Prefill), median(r.Baseline.Prefill)),
		fmt.Sprintf("%s (%s)", median(r.Energy.Decode), median(r.Baseline.Decode)),
		fmt.Sprintf("%s (%s)", agreement(r.Labels.Request), trivial(r.Labels.Request)),
		fmt.Sprintf("%s (%s)", agreement(r.Labels.Phases), trivial(r.Labels.Phases)),
		fmt.Sprintf("%s / %s", ceiling(r.Labels.Request), ceiling(r.Labels.Phases)),
		fmt.Sprintf("%s (%s)", agreement(r.Labels.Intervals), trivial(r.Labels.Intervals)),
		fmt.Sprintf("%.3f", r.Conservation.Ratio),
	}
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// MarkdownSection is the run's details for docs/accuracy.md: every error
// statistic, the label scores and their confusion matrices, conservation.
func (r Report) MarkdownSection() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s (%s, %s)\n\n", r.Scenario, r.seeds(), r.GPUModel)
	c := r.Coverage
	fmt.Fprintf(&b, "%d requests: %d aborted (no span), %d with a span, %d enriched (%s), %d extra enriched spans, %d unknown traces.\n\n",
		c.Requests, c.Aborted, c.WithSpan, c.Enriched, pct(c.Share), c.ExtraEnriched, c.UnknownTraces)

	b.WriteString("| energy error | requests | median | p90 | max | energy-weighted | no value | true 0 |\n|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.energyRows() {
		s := row.stats
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d | %d |\n", row.name, s.Count, orDash(s, s.Median), orDash(s, s.P90), orDash(s, s.Max), weighted(s), s.Missing, s.ZeroTruth)
	}
	fmt.Fprintf(&b, "\nShare of the true energy taken, by quartile of prompt tokens (shortest first): gpuviz %s, baseline %s.\n",
		quartiles(r.Energy), quartiles(r.Baseline))

	b.WriteString("\n| label | spans | GPU s | agreement | trivial label | trivial agreement | one-label ceiling | no label |\n|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.labelRows() {
		l := row.score
		fmt.Fprintf(&b, "| %s | %d | %.1f | %s | %s | %s | %s | %d |\n", row.name, l.Spans, l.Seconds, agreement(l), l.Trivial, trivial(l), ceiling(l), l.Missing)
	}

	k := r.Conservation
	fmt.Fprintf(&b, "\nConservation over the %.1f s the truth covers: the counters read %.0f J, %.0f J of it idle. "+
		"%d requests lie inside (%d straddle an edge and are left out): true %.0f J, %.0f J of it aborted; gpuviz attributed %.0f J (ratio %.3f).\n",
		seconds(k.WindowEnd-k.WindowStart), k.CounterJ, k.IdleJ, k.Requests, k.Straddling, k.TrueJ, k.AbortedJ, k.AttributedJ, k.Ratio)

	for _, row := range r.labelRows() {
		if row.name == phasesRow { // the sum of prefill and decode
			continue
		}
		fmt.Fprintf(&b, "\n%s label confusion, GPU seconds (rows: truth, columns: gpuviz):\n\n", row.name)
		writeConfusion(&b, row.score.Confusion)
	}
	return b.String()
}

// seeds names the run's seed, or the seeds pooled into it.
func (r Report) seeds() string {
	if len(r.PooledSeeds) == 0 {
		return fmt.Sprintf("seed %d", r.Seed)
	}
	s := make([]string, len(r.PooledSeeds))
	for i, seed := range r.PooledSeeds {
		s[i] = strconv.FormatUint(seed, 10)
	}
	return "seeds " + strings.Join(s, ", ")
}

// Text is the plain-text summary the CLI prints.
func (r Report) Text() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	c, k := r.Coverage, r.Conservation
	fmt.Fprintf(w, "scenario\t%s (%s, %s), baseline interval %gs\n", r.Scenario, r.seeds(), r.GPUModel, r.BaselineIntervalS)
	fmt.Fprintf(w, "coverage\t%s enriched; %d aborted, %d extra enriched spans, %d unknown traces\n", c, c.Aborted, c.ExtraEnriched, c.UnknownTraces)
	fmt.Fprintf(w, "energy error\tmedian / p90 / max\tenergy-weighted\n")
	for _, row := range r.energyRows() {
		fmt.Fprintf(w, "  %s\t%s\t%s\t(n=%d)\n", row.name, spread(row.stats), weighted(row.stats), row.stats.Count)
	}
	fmt.Fprintf(w, "  by prompt quartile\tshare of the true energy: gpuviz %s, baseline %s\n", quartiles(r.Energy), quartiles(r.Baseline))
	fmt.Fprintf(w, "label agreement\tgpuviz, trivial, one-label ceiling\n")
	for _, row := range r.labelRows() {
		fmt.Fprintf(w, "  %s\t%s, %s %s, %s\n", row.name, agreement(row.score), row.score.Trivial, trivial(row.score), ceiling(row.score))
	}
	fmt.Fprintf(w, "conservation\tattributed %.0f J / true %.0f J = %.3f (counters %.0f J, idle %.0f J, aborted %.0f J, %d straddling left out)\n",
		k.AttributedJ, k.TrueJ, k.Ratio, k.CounterJ, k.IdleJ, k.AbortedJ, k.Straddling)
	w.Flush() // a strings.Builder does not fail
	return b.String()
}

// String is the share enriched with its counts, e.g. "97.5% (39/40)".
func (c Coverage) String() string {
	return fmt.Sprintf("%s (%d/%d)", pct(c.Share), c.Enriched, c.Requests-c.Aborted)
}

type energyRow struct {
	name  string
	stats ErrorStats
}

func (r Report) energyRows() []energyRow {
	return []energyRow{
		{"gpuviz request", r.Energy.Request}, {"gpuviz prefill", r.Energy.Prefill}, {"gpuviz decode", r.Energy.Decode},
		{"gpuviz costliest tenth", r.Energy.Costliest},
		{"baseline request", r.Baseline.Request}, {"baseline prefill", r.Baseline.Prefill}, {"baseline decode", r.Baseline.Decode},
		{"baseline costliest tenth", r.Baseline.Costliest},
	}
}

type labelRow struct {
	name  string
	score LabelScore
}

const phasesRow = "phases"

// labelRows are the label scores in report order; GPU intervals only where
// the run handed them over.
func (r Report) labelRows() []labelRow {
	rows := []labelRow{{"request", r.Labels.Request}, {"prefill", r.Labels.Prefill}, {"decode", r.Labels.Decode}, {phasesRow, r.Labels.Phases}}
	if r.Labels.Intervals.Spans > 0 {
		rows = append(rows, labelRow{"gpu interval", r.Labels.Intervals})
	}
	return rows
}

func writeConfusion(b *strings.Builder, m map[string]map[string]float64) {
	if len(m) == 0 {
		b.WriteString("(nothing scored)\n")
		return
	}
	cols := map[string]bool{}
	for _, row := range m {
		for got := range row {
			cols[got] = true
		}
	}
	gotLabels := ordered(slices.Collect(maps.Keys(cols)))
	b.WriteString("| truth \\ gpuviz | " + strings.Join(gotLabels, " | ") + " |\n|---" + strings.Repeat("|---", len(gotLabels)) + "|\n")
	for _, truth := range ordered(slices.Collect(maps.Keys(m))) {
		b.WriteString("| " + truth)
		for _, got := range gotLabels {
			fmt.Fprintf(b, " | %.1f", m[truth][got])
		}
		b.WriteString(" |\n")
	}
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// orDash is v as a percentage, or a dash when nothing was scored.
func orDash(s ErrorStats, v float64) string {
	if s.Count == 0 {
		return "–"
	}
	return pct(v)
}

func spread(s ErrorStats) string {
	return orDash(s, s.Median) + " / " + orDash(s, s.P90) + " / " + orDash(s, s.Max)
}

func median(s ErrorStats) string { return orDash(s, s.Median) }

func weighted(s ErrorStats) string { return orDash(s, s.Weighted) }

// quartiles writes EnergyErrors.ByPrompt, a dash for a quartile without
// requests: a share of 0 over requests is written, it is the estimator's
// worst.
func quartiles(e EnergyErrors) string {
	cells := make([]string, len(e.ByPrompt))
	for i, v := range e.ByPrompt {
		cells[i] = "–"
		if e.ByPromptRequests[i] > 0 {
			cells[i] = fmt.Sprintf("%.3f", v)
		}
	}
	return strings.Join(cells, " / ")
}

func agreement(l LabelScore) string {
	if l.Seconds == 0 {
		return "–"
	}
	return pct(l.Agreement)
}

func trivial(l LabelScore) string {
	if l.Seconds == 0 {
		return "–"
	}
	return pct(l.TrivialAgreement)
}

func ceiling(l LabelScore) string {
	if l.Seconds == 0 {
		return "–"
	}
	return pct(l.Ceiling)
}
