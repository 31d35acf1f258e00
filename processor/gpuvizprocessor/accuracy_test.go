//go:build accuracy

package gpuvizprocessor

// The accuracy harness (make accuracy): every batching scenario of
// internal/infersim runs through the gpuviz receiver's scraper and this
// processor on a virtual clock, the spans come from internal/inferspans as
// the load generator sends them, and internal/score compares what the
// processor attached with the engines' ground truth. Ten simulated minutes
// take seconds. Only the scorer reads the truth.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/score"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"
)

var (
	accuracyDoc   = flag.String("accuracy.doc", "", "rewrite the generated part of this Markdown file (docs/accuracy.md)")
	accuracySeeds = flag.String("accuracy.seeds", "100,101,102,103,104", "seeds to score; never the ones used while tuning (1-5)")
	accuracyOnly  = flag.String("accuracy.scenarios", "", "comma-separated scenarios (default: all)")
)

// accuracyEpoch anchors the runs: seed i of a scenario runs the episode
// that starts at or after it, plus i episodes, so that pooled runs never
// overlap in time.
var accuracyEpoch = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

const (
	accuracyModel = "h200"
	accuracyGPUs  = 8
	accuracyHost  = "sim-node-1"
	// tick is the load generator's: every 200 ms, the spans of the
	// requests that finished up to settle ago.
	accuracyTick   = 200 * time.Millisecond
	accuracySettle = 50 * time.Millisecond
)

func TestAccuracy(t *testing.T) {
	var seeds []uint64
	for _, s := range strings.Split(*accuracySeeds, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		require.NoError(t, err, "-accuracy.seeds")
		seeds = append(seeds, n)
	}
	scenarios := infersim.Scenarios()
	if *accuracyOnly != "" {
		scenarios = strings.Split(*accuracyOnly, ",")
	}
	var reports []score.Report
	for _, name := range scenarios {
		var pooled *infersim.Truth
		var traces []ptrace.Traces
		for i, seed := range seeds {
			truth, out := runAccuracy(t, name, seed, i)
			if pooled == nil {
				pooled = truth
			} else {
				pooled.Requests = append(pooled.Requests, truth.Requests...)
				pooled.Bins = append(pooled.Bins, truth.Bins...)
			}
			traces = append(traces, out...)
		}
		rep, err := score.Score(pooled, traces, score.Options{})
		require.NoError(t, err, name)
		rep.Seed = 0 // pooled over seeds
		t.Logf("%s\n%s", name, rep.Text())
		reports = append(reports, rep)
	}
	if *accuracyDoc != "" {
		require.NoError(t, writeAccuracyDoc(*accuracyDoc, seeds, reports))
	}
}

// runAccuracy runs one scenario and seed: the simulated server, the
// receiver's scraper at its default interval and the processor with its
// defaults, all on one virtual clock, over one whole episode and a tail for
// the last spans to be released.
func runAccuracy(t *testing.T, scenario string, seed uint64, offset int) (*infersim.Truth, []ptrace.Traces) {
	t.Helper()
	ctx := context.Background()
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Load()) }

	node, err := nvmlsim.NewNode(accuracyModel, scenario, accuracyGPUs, seed)
	require.NoError(t, err)
	episode := int64(node.Scenario().Episode)
	start := (accuracyEpoch.UnixNano()+episode-1)/episode*episode + int64(offset)*episode
	end := start + episode
	clock.Store(start) // before the server: its counters start now
	lib, err := nvmlsim.New(accuracyModel, accuracyGPUs, seed, now, nvmlsim.WithScenario(scenario))
	require.NoError(t, err)
	node = lib.Node()

	rcfg := gpuvizreceiver.NewFactory().CreateDefaultConfig().(*gpuvizreceiver.Config)
	rcfg.Backend = gpuvizreceiver.BackendSimulated
	rcfg.Simulated = gpuvizreceiver.SimulatedConfig{Model: accuracyModel, GPUs: accuracyGPUs, Seed: seed, Scenario: scenario}
	rcfg.XidEvents.Enabled = false // its goroutine waits in real time
	scr, err := gpuvizreceiver.NewScraper(rcfg, receivertest.NewNopSettings(component.MustNewType("gpuviz")), lib, gpuvizreceiver.BackendSimulated, now)
	require.NoError(t, err)
	require.NoError(t, scr.Start(ctx, componenttest.NewNopHost()))

	pcfg := createDefaultConfig()
	fac := &factory{cores: map[*Config]*core{}}
	set := processortest.NewNopSettings(metadata.Type)
	metricsOut, tracesOut := new(consumertest.MetricsSink), new(consumertest.TracesSink)
	mp, err := fac.createMetrics(ctx, set, pcfg, metricsOut)
	require.NoError(t, err)
	tp, err := fac.createTraces(ctx, set, pcfg, tracesOut)
	require.NoError(t, err)
	c := fac.cores[pcfg]
	c.now = now
	c.ticker = func() (<-chan time.Time, func()) { return nil, func() {} } // the harness releases
	require.NoError(t, mp.Start(ctx, componenttest.NewNopHost()))
	require.NoError(t, tp.Start(ctx, componenttest.NewNopHost()))

	ids := make([]string, accuracyGPUs)
	for i := range ids {
		ids[i] = nvmlsim.SimulatedUUID(accuracyModel, seed, i)
	}
	env := inferspans.Env{Host: accuracyHost, GPUIDs: ids}
	interval := int64(rcfg.CollectionInterval)
	nextScrape := start + int64(rcfg.InitialDelay) // the controller's first scrape, then every interval
	last := start
	tail := int64(pcfg.MaxWait) + 2*interval
	for t0 := start + int64(accuracyTick); t0 <= end+tail; t0 += int64(accuracyTick) {
		clock.Store(t0)
		if t0 >= nextScrape {
			md, err := scr.ScrapeMetrics(ctx)
			require.NoError(t, err)
			require.NoError(t, mp.ConsumeMetrics(ctx, md))
			nextScrape += interval
		}
		to := min(t0-int64(accuracySettle), end)
		if to > last {
			td := ptrace.NewTraces()
			for _, r := range node.Finished(last, to) {
				inferspans.Append(td, r, node.Scenario().Engines[r.Engine], env)
			}
			last = to
			if td.SpanCount() > 0 {
				require.NoError(t, tp.ConsumeTraces(ctx, td))
			}
		}
		c.release(now(), func(*heldBatch) bool { return false })
	}
	require.NoError(t, tp.Shutdown(ctx))
	require.NoError(t, mp.Shutdown(ctx))
	require.NoError(t, scr.Shutdown(ctx))
	return node.Truth(node.Header(seed, ids, accuracyHost), start, end), tracesOut.AllTraces()
}

const (
	docBegin = "<!-- accuracy:begin (generated by make accuracy) -->"
	docEnd   = "<!-- accuracy:end -->"
)

// writeAccuracyDoc replaces what lies between the markers of path with the
// reports.
func writeAccuracyDoc(path string, seeds []uint64, reports []score.Report) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(doc)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q section", path, docBegin, docEnd)
	}
	var b strings.Builder
	b.WriteString(docBegin + "\n\n")
	fmt.Fprintf(&b, "Seeds %v (never used while tuning), one 10-minute episode each, pooled per scenario; %s × %d, receiver and processor defaults.\n\n",
		seeds, accuracyModel, accuracyGPUs)
	b.WriteString(score.MarkdownHeader())
	for _, r := range reports {
		b.WriteString(r.MarkdownRow())
	}
	b.WriteString("\n")
	for _, r := range reports {
		b.WriteString(r.MarkdownSection())
		b.WriteString("\n")
	}
	b.WriteString(docEnd)
	return os.WriteFile(path, []byte(s[:i]+b.String()+s[j+len(docEnd):]), 0o644)
}
