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
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/score"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"
)

var (
	accuracyLive    = flag.String("accuracy.live", "", "a directory where make e2e left a live run (truth.jsonl, report.json, spans.jsonl): replay it in-process and compare")
	accuracyDoc     = flag.String("accuracy.doc", "", "rewrite the generated part of this Markdown file (docs/accuracy.md)")
	accuracySeeds   = flag.String("accuracy.seeds", "100,101,102,103,104", "seeds to score; never the ones used while tuning (1-5)")
	accuracyOnly    = flag.String("accuracy.scenarios", "", "comma-separated scenarios (default: all)")
	accuracyWait    = flag.Duration("accuracy.settle", 0, "attribution.settle_window for the run (0: the default), max_wait and horizon raised to fit: what holding spans longer buys")
	accuracySamples = flag.Duration("accuracy.samples", 0, "the receiver's samples.interval for the run (0: the default): what a finer sampling clock buys")
	accuracyBins    = flag.Duration("accuracy.resolution", 0, "attribution.resolution for the run (0: the default): what finer books buy")
	accuracyFirst   = flag.Duration("accuracy.first", 0, "score only the requests that finished in each run's first this long (0: all): how the books do while they warm up")
	accuracyEngines = flag.Duration("accuracy.engines", 15*time.Second, "how often the engines' running-request gauges are scraped (0: never): what the engines' own counts buy")
	accuracyModel   = flag.String("accuracy.model", "h200", "the simulated GPU (nvmlsim's models): how the estimate's H200-derived constants carry to other GPUs")
)

// accuracyEpoch anchors the runs: seed i of a scenario runs the episode
// that starts at or after it, plus i episodes, so that pooled runs never
// overlap in time.
var accuracyEpoch = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

const (
	accuracyGPUs = 8
	accuracyHost = "sim-node-1"
	// tick is the load generator's: every 200 ms, the spans of the
	// requests that finished up to settle ago.
	accuracyTick   = 200 * time.Millisecond
	accuracySettle = 50 * time.Millisecond
	// accuracyTickPhase puts the sampling clock off the 100 ms grid of
	// the processor's bins and the truth's: a live clock starts anywhere,
	// and half a bin is the worst phase for a 100 ms tick.
	accuracyTickPhase = 50 * time.Millisecond
	// accuracyEnginePhase puts the engines' scrapes off both.
	accuracyEnginePhase = 130 * time.Millisecond
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
		var intervals []score.GPUInterval
		for i, seed := range seeds {
			truth, out := runAccuracy(t, name, seed, i)
			// The runs are pooled on one time line, each episode after the
			// last: an interval past its own run's truth would be scored
			// against the next seed's.
			from, to := truthWindow(truth)
			for _, iv := range out.intervals {
				require.True(t, iv.Start >= from && iv.End <= to, "%s seed %d: GPU interval [%d, %d) outside its run's truth [%d, %d)", name, seed, iv.Start, iv.End, from, to)
			}
			if pooled == nil {
				pooled = truth
			} else {
				pooled.Requests = append(pooled.Requests, truth.Requests...)
				pooled.Bins = append(pooled.Bins, truth.Bins...)
			}
			traces = append(traces, out.traces...)
			intervals = append(intervals, out.intervals...)
		}
		rep, err := score.Score(pooled, traces, score.Options{Intervals: intervals})
		require.NoError(t, err, name)
		rep.Seed, rep.PooledSeeds = 0, seeds
		t.Logf("%s\n%s", name, rep.Text())
		reports = append(reports, rep)
	}
	if *accuracyDoc != "" {
		require.NoError(t, writeAccuracyDoc(*accuracyDoc, seeds, reports))
	}
}

// runAccuracy runs one scenario and seed over one whole episode (the
// offset-th from accuracyEpoch) with the receiver's and the processor's
// defaults.
func runAccuracy(t *testing.T, scenario string, seed uint64, offset int) (*infersim.Truth, pipelineOut) {
	t.Helper()
	node, err := nvmlsim.NewNode(*accuracyModel, scenario, accuracyGPUs, seed)
	require.NoError(t, err)
	episode := int64(node.Scenario().Episode)
	start := (accuracyEpoch.UnixNano()+episode-1)/episode*episode + int64(offset)*episode
	rcfg := gpuvizreceiver.NewFactory().CreateDefaultConfig().(*gpuvizreceiver.Config)
	rcfg.Simulated = gpuvizreceiver.SimulatedConfig{Model: *accuracyModel, GPUs: accuracyGPUs, Seed: seed, Scenario: scenario}
	if *accuracySamples > 0 {
		rcfg.Samples.Interval = *accuracySamples
	}
	pcfg := createDefaultConfig()
	if *accuracyBins > 0 {
		pcfg.Attribution.Resolution = *accuracyBins
	}
	if *accuracyWait > 0 {
		pcfg.Attribution.SettleWindow = *accuracyWait
		pcfg.MaxWait = *accuracyWait + time.Minute
		pcfg.Attribution.FinalizeAfter = max(pcfg.Attribution.FinalizeAfter, *accuracyWait)
		pcfg.Attribution.Horizon = pcfg.Attribution.FinalizeAfter + pcfg.MaxWait + 5*time.Minute
		pcfg.MaxPendingSpans = 1 << 30
	}
	return runPipeline(t, rcfg, pcfg, start, start+episode, *accuracyEngines)
}

// pipelineOut is what a harness run exported: the traces, and every GPU
// bin's label as it became final (what the bottleneck-time counter counts).
type pipelineOut struct {
	traces    []ptrace.Traces
	intervals []score.GPUInterval
}

// runPipeline runs the simulated server rcfg describes, the receiver's
// scraper on rcfg and the processor on pcfg, all on one virtual clock,
// over [start, end) and a tail for the last spans to be released; the
// servers' running counts are scraped every engines (0: never).
func runPipeline(t *testing.T, rcfg *gpuvizreceiver.Config, pcfg *Config, start, end int64, engines time.Duration) (*infersim.Truth, pipelineOut) {
	t.Helper()
	ctx := context.Background()
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	sim := rcfg.Simulated
	clock.Store(start) // before the server: its counters start now
	lib, err := nvmlsim.New(sim.Model, sim.GPUs, sim.Seed, now, nvmlsim.WithScenario(sim.Scenario))
	require.NoError(t, err)
	node := lib.Node()

	rcfg.Backend = gpuvizreceiver.BackendSimulated
	rcfg.XidEvents.Enabled = false // its goroutine waits in real time
	recv := gpuvizreceiver.NewDriven(rcfg, receivertest.NewNopSettings(component.MustNewType("gpuviz")), lib, gpuvizreceiver.BackendSimulated, now)
	require.NoError(t, recv.Start(ctx))

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

	ids := make([]string, sim.GPUs)
	gpuIndex := map[string]int{} // GPU UUID: the truth's index
	for i := range ids {
		ids[i] = nvmlsim.SimulatedUUID(sim.Model, sim.Seed, i)
		gpuIndex[ids[i]] = i
	}
	// Every bin's label as the books make it final, through the hook the
	// live view uses (no view here: Start left it unset), inside [start,
	// end): the books also label the seconds around it, which the truth
	// returned does not cover (and a pooled run's neighbour does).
	var intervals []score.GPUInterval
	width := int64(pcfg.Attribution.Resolution)
	c.spans.pipeline.onFinal = func(k timeline.Key, binStart int64, l bottleneck.Label) {
		g, ok := gpuIndex[k.GPU]
		require.True(t, ok, "a book for GPU %s, which the simulation does not have", k.GPU)
		if l != "" && binStart >= start && binStart+width <= end {
			intervals = append(intervals, score.GPUInterval{GPU: g, Start: binStart, End: binStart + width, Label: string(l)})
		}
	}
	env := inferspans.Env{Host: accuracyHost, GPUIDs: ids}
	interval := int64(rcfg.CollectionInterval)
	nextScrape := start + int64(rcfg.InitialDelay) // the controller's first scrape, then every interval
	// The sampling clock ticks every samples.interval; the harness sends
	// spans and releases every accuracyTick.
	tickEvery, nextTick := int64(rcfg.Samples.Interval), start+int64(rcfg.Samples.Interval+accuracyTickPhase)
	if !rcfg.Samples.Enabled {
		nextTick = math.MaxInt64
	}
	nextStep := start + int64(accuracyTick)
	// The engines' running-request gauges, scraped as a prometheus
	// receiver would, off the other clocks' phase.
	engineEvery, nextEngines := int64(engines), start+int64(engines)+int64(accuracyEnginePhase)
	if engineEvery <= 0 {
		nextEngines = math.MaxInt64
	}
	last := start
	firstLag := map[string]time.Duration{}   // when each GPU's GPM lag was first taken
	firstValue := map[string]time.Duration{} // and what it was then
	tail := int64(pcfg.MaxWait) + 2*interval
	for t0 := min(nextScrape, nextTick, nextStep, nextEngines); t0 <= end+tail; t0 = min(nextScrape, nextTick, nextStep, nextEngines) {
		clock.Store(t0)
		if t0 >= nextEngines {
			md := pmetric.NewMetrics()
			inferspans.AppendRunning(md, node, t0, env)
			require.NoError(t, mp.ConsumeMetrics(ctx, md))
			nextEngines += engineEvery
		}
		if t0 >= nextScrape {
			md, err := recv.Scrape(ctx)
			require.NoError(t, err)
			require.NoError(t, mp.ConsumeMetrics(ctx, md))
			nextScrape += interval
		}
		if t0 >= nextTick {
			if md, ok := recv.Tick(); ok {
				require.NoError(t, mp.ConsumeMetrics(ctx, md))
			}
			nextTick += tickEvery
		}
		if t0 < nextStep {
			continue
		}
		nextStep += int64(accuracyTick)
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
		c.tick(now())
		c.ingest.mu.Lock()
		for k, g := range c.ingest.gpus {
			if _, seen := firstLag[k.GPU]; !seen && g.gpm.lag != 0 {
				firstLag[k.GPU] = time.Duration(t0 - start)
				firstValue[k.GPU] = g.gpm.lag
			}
		}
		c.ingest.mu.Unlock()
	}
	// Each GPU's GPM lag as learned at the end against the simulation's,
	// and how far into the run it was first taken.
	var lags []string
	for k, g := range c.ingest.gpus {
		if i, ok := gpuIndex[k.GPU]; ok {
			taken, ok := firstLag[k.GPU]
			at := "never"
			if ok {
				at = taken.Round(time.Second).String() + " at " + firstValue[k.GPU].Round(time.Millisecond).String()
			}
			from, spans := "none", "none"
			if g.gpm.prefills.ok {
				from, spans = "spans", g.gpm.prefills.lag.String()
			}
			if g.gpm.fromEdges {
				from = "edges"
			}
			lags = append(lags, fmt.Sprintf("GPU %d %v/%v (%s; %s, spans' %s)", i, g.gpm.lag.Round(time.Millisecond), lib.Device(i).GPMLag().Round(time.Millisecond), at, from, spans))
		}
	}
	slices.Sort(lags)
	t.Logf("GPM lag learned/true (first taken; from, the spans' reading): %s", strings.Join(lags, ", "))
	require.NoError(t, tp.Shutdown(ctx))
	require.NoError(t, mp.Shutdown(ctx))
	require.NoError(t, recv.Shutdown(ctx))
	tr := node.Truth(node.Header(sim.Seed, ids, accuracyHost), start, end)
	if *accuracyFirst > 0 {
		// Only the requests of the run's first minutes: the books' warm-up.
		first := tr.Requests[:0]
		for _, r := range tr.Requests {
			if r.Finished < start+int64(*accuracyFirst) {
				first = append(first, r)
			}
		}
		tr.Requests = first
	}
	return tr, pipelineOut{tracesOut.AllTraces(), intervals}
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
	fmt.Fprintf(&b, "Seeds %v (not the tuning seeds 1-5; some choices were also read on these, and fresh seeds score the same: docs/reliability.md), one 10-minute episode each, pooled per scenario; %s × %d, receiver and processor defaults.\n\n",
		seeds, *accuracyModel, accuracyGPUs)
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

// TestInProcessMatchesLive replays, in-process on a virtual clock, the
// window that make e2e ran in real time through the built collector (same
// collector settings, scenario and seed), and compares: the harness must be
// the real path, so the numbers it scores must be the live run's.
func TestInProcessMatchesLive(t *testing.T) {
	if *accuracyLive == "" {
		t.Skip("-accuracy.live not set (make e2e sets it)")
	}
	f, err := os.Open(filepath.Join(*accuracyLive, "truth.jsonl"))
	require.NoError(t, err)
	live, err := infersim.ReadTruth(f)
	f.Close()
	require.NoError(t, err)
	var liveReport score.Report
	b, err := os.ReadFile(filepath.Join(*accuracyLive, "report.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &liveReport))
	sf, err := os.Open(filepath.Join(*accuracyLive, "spans.jsonl"))
	require.NoError(t, err)
	liveTraces, err := score.ReadTraces(sf)
	sf.Close()
	require.NoError(t, err)

	// The collector's own settings, from the file make e2e ran it on.
	cm, err := confmaptest.LoadConf(filepath.Join("..", "..", "examples", "e2e", "collector.yaml"))
	require.NoError(t, err)
	rcfg := gpuvizreceiver.NewFactory().CreateDefaultConfig().(*gpuvizreceiver.Config)
	sub, err := cm.Sub("receivers::gpuviz")
	require.NoError(t, err)
	require.NoError(t, sub.Unmarshal(rcfg))
	pcfg := createDefaultConfig()
	sub, err = cm.Sub("processors::gpuviz")
	require.NoError(t, err)
	require.NoError(t, sub.Unmarshal(pcfg))
	rcfg.Simulated.Seed, rcfg.Simulated.Scenario, rcfg.Simulated.GPUs = live.Header.Seed, live.Header.Scenario, len(live.Header.GPUIDs)

	start, end := live.Bins[0].Start, live.Bins[0].Start
	for _, b := range live.Bins {
		start, end = min(start, b.Start), max(end, b.Start+live.Header.BinWidthNS)
	}
	// The live collector scraped the simulated servers' counts as often.
	var servers struct {
		Config struct {
			ScrapeConfigs []struct {
				ScrapeInterval time.Duration `mapstructure:"scrape_interval"`
			} `mapstructure:"scrape_configs"`
		} `mapstructure:"config"`
	}
	sub, err = cm.Sub("receivers::prometheus/servers")
	require.NoError(t, err)
	require.NoError(t, sub.Unmarshal(&servers, confmap.WithIgnoreUnused()))
	require.Len(t, servers.Config.ScrapeConfigs, 1)
	truth, out := runPipeline(t, rcfg, pcfg, start, end, servers.Config.ScrapeConfigs[0].ScrapeInterval)
	traces := out.traces
	rep, err := score.Score(truth, traces, score.Options{BaselineInterval: rcfg.CollectionInterval})
	require.NoError(t, err)
	t.Logf("live:\n%s\nin-process:\n%s", liveReport.Text(), rep.Text())

	// Request by request: the same trace, enriched live and in-process.
	liveEnergy, ours := enrichedEnergies(liveTraces), enrichedEnergies(traces)
	var diffs []float64
	for id, e := range ours {
		if l, ok := liveEnergy[id]; ok && e > 0 {
			diffs = append(diffs, math.Abs(l-e)/e)
		}
	}
	require.NotEmpty(t, diffs, "requests enriched in both runs")
	slices.Sort(diffs)
	median := diffs[len(diffs)/2]
	// Single requests differ: the scrapes fall at other moments of a real
	// clock, and today's attribution depends on which spans are released
	// together (a later round gets only the energy earlier rounds left), so
	// the batches the live pipeline happened to form change each request's
	// share. Reported, not asserted; what is scored must agree.
	t.Logf("%d requests enriched in both; their energies differ by %.1f%% (median), %.1f%% (p90)", len(diffs), 100*median, 100*diffs[len(diffs)*9/10])
	assert.InDelta(t, liveReport.Energy.Request.Median, rep.Energy.Request.Median, 0.1, "median energy error")
	assert.InDelta(t, liveReport.Coverage.Share, rep.Coverage.Share, 0.1, "coverage")
	assert.InDelta(t, liveReport.Labels.Request.Agreement, rep.Labels.Request.Agreement, 0.15, "request label agreement")
}

// enrichedEnergies maps trace ID to the gpuviz.energy of its enriched
// request span (the last one seen).
func enrichedEnergies(traces []ptrace.Traces) map[pcommon.TraceID]float64 {
	out := map[pcommon.TraceID]float64{}
	for _, td := range traces {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					if _, ok := sp.Attributes().Get("gpuviz.request.family"); !ok {
						continue
					}
					if e, ok := sp.Attributes().Get("gpuviz.energy"); ok {
						out[sp.TraceID()] = e.Double()
					}
				}
			}
		}
	}
	return out
}

// truthWindow is the time the truth's bins cover.
func truthWindow(truth *infersim.Truth) (from, to int64) {
	from, to = truth.Bins[0].Start, truth.Bins[0].Start
	for _, b := range truth.Bins {
		from, to = min(from, b.Start), max(to, b.Start+truth.Header.BinWidthNS)
	}
	return from, to
}
