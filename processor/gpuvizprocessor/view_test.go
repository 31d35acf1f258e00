package gpuvizprocessor

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuviz/gpuviz/extension/gpuvizviewextension"
	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/view"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"
)

var updateViewFixture = flag.Bool("view.update", false, "rewrite extension/gpuvizviewextension/testdata/view.json from a simulated run")

// viewHost is a collector host holding the given extensions.
type viewHost map[component.ID]component.Component

func (h viewHost) GetExtensions() map[component.ID]component.Component { return h }

// viewSim is a simulated node, the receiver's scrape and sampling clock and
// a processor, on one virtual clock; the processor started on host.
type viewSim struct {
	t      *testing.T
	clock  atomic.Int64
	recv   *gpuvizreceiver.Driven
	mp     processor.Metrics
	tp     processor.Traces
	core   *core
	node   *nvmlsim.Server
	env    inferspans.Env
	rcfg   *gpuvizreceiver.Config
	last   int64 // spans sent for requests finished before
	next   struct{ scrape, tick, step int64 }
	traces *consumertest.TracesSink
}

const (
	viewSimModel = "h200"
	viewSimGPUs  = 8
	viewSimHost  = "sim-node-1"
)

// viewSimEpoch is when simulated runs start: the start of an episode.
var viewSimEpoch = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func newViewSim(t *testing.T, scenario string, seed uint64, host component.Host, pcfg *Config) *viewSim {
	t.Helper()
	ctx := context.Background()
	s := &viewSim{t: t, traces: new(consumertest.TracesSink)}
	now := s.now
	rcfg := gpuvizreceiver.NewFactory().CreateDefaultConfig().(*gpuvizreceiver.Config)
	rcfg.Simulated = gpuvizreceiver.SimulatedConfig{Model: viewSimModel, GPUs: viewSimGPUs, Seed: seed, Scenario: scenario}
	rcfg.Backend = gpuvizreceiver.BackendSimulated
	rcfg.XidEvents.Enabled = false
	s.rcfg = rcfg
	probe, err := nvmlsim.NewNode(viewSimModel, scenario, viewSimGPUs, seed)
	require.NoError(t, err)
	episode := int64(probe.Scenario().Episode)
	start := (viewSimEpoch.UnixNano() + episode - 1) / episode * episode
	s.clock.Store(start)
	lib, err := nvmlsim.New(viewSimModel, viewSimGPUs, seed, now, nvmlsim.WithScenario(scenario))
	require.NoError(t, err)
	s.node = lib
	s.recv = gpuvizreceiver.NewDriven(rcfg, receivertest.NewNopSettings(component.MustNewType("gpuviz")), lib, gpuvizreceiver.BackendSimulated, now)
	require.NoError(t, s.recv.Start(ctx))

	fac := &factory{cores: map[*Config]*core{}}
	set := processortest.NewNopSettings(metadata.Type)
	mp, err := fac.createMetrics(ctx, set, pcfg, new(consumertest.MetricsSink))
	require.NoError(t, err)
	tp, err := fac.createTraces(ctx, set, pcfg, s.traces)
	require.NoError(t, err)
	s.mp, s.tp = mp, tp
	s.core = fac.cores[pcfg]
	s.core.now = now
	s.core.ticker = func() (<-chan time.Time, func()) { return nil, func() {} }
	require.NoError(t, mp.Start(ctx, host))
	require.NoError(t, tp.Start(ctx, host))

	ids := make([]string, viewSimGPUs)
	for i := range ids {
		ids[i] = nvmlsim.SimulatedUUID(viewSimModel, seed, i)
	}
	s.env = inferspans.Env{Host: viewSimHost, GPUIDs: ids}
	s.last = start
	s.next.scrape = start + int64(rcfg.InitialDelay)
	s.next.tick = start + int64(rcfg.Samples.Interval)
	s.next.step = start + int64(200*time.Millisecond)
	t.Cleanup(func() {
		require.NoError(t, tp.Shutdown(ctx))
		require.NoError(t, mp.Shutdown(ctx))
		require.NoError(t, s.recv.Shutdown(ctx))
	})
	return s
}

func (s *viewSim) now() time.Time { return time.Unix(0, s.clock.Load()) }

// run advances the virtual clock by d: scrapes, ticks, and every 200 ms
// the spans of the requests that finished and a release tick.
func (s *viewSim) run(d time.Duration) {
	t := s.t
	ctx := context.Background()
	end := s.clock.Load() + int64(d)
	for t0 := min(s.next.scrape, s.next.tick, s.next.step); t0 <= end; t0 = min(s.next.scrape, s.next.tick, s.next.step) {
		s.clock.Store(t0)
		if t0 >= s.next.scrape {
			md, err := s.recv.Scrape(ctx)
			require.NoError(t, err)
			require.NoError(t, s.mp.ConsumeMetrics(ctx, md))
			s.next.scrape += int64(s.rcfg.CollectionInterval)
		}
		if t0 >= s.next.tick {
			if md, ok := s.recv.Tick(); ok {
				require.NoError(t, s.mp.ConsumeMetrics(ctx, md))
			}
			s.next.tick += int64(s.rcfg.Samples.Interval)
		}
		if t0 < s.next.step {
			continue
		}
		s.next.step += int64(200 * time.Millisecond)
		to := t0 - int64(50*time.Millisecond)
		if to > s.last {
			td := ptrace.NewTraces()
			sim := s.node.Node()
			for _, r := range sim.Finished(s.last, to) {
				inferspans.Append(td, r, sim.Scenario().Engines[r.Engine], s.env)
			}
			s.last = to
			if td.SpanCount() > 0 {
				require.NoError(t, s.tp.ConsumeTraces(ctx, td))
			}
		}
		s.core.tick(s.now())
	}
	s.clock.Store(end)
}

// testView is a gpuviz_view extension's registry on the simulation's
// clock, as the collector would hold it.
type testView struct {
	component.StartFunc
	component.ShutdownFunc
	*view.Registry
}

func newTestView(now func() time.Time) *testView {
	lim := view.Limits{Retention: 15 * time.Minute, MaxGPUs: 64, MaxRequests: 20000}
	return &testView{Registry: view.NewRegistry(lim, "http://127.0.0.1:16686/trace/{trace_id}", now)}
}

func (v *testView) get(t *testing.T, target string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	v.Handler(fstest.MapFS{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Code, rec.Body.Bytes()
}

// TestViewFixture writes extension/gpuvizviewextension/testdata/view.json
// (with -view.update): the view of 8 simulated GPUs over 300 s, with
// requests, as the page receives it.
func TestViewFixture(t *testing.T) {
	if !*updateViewFixture {
		t.Skip("-view.update not set")
	}
	var sim *viewSim
	v := newTestView(func() time.Time { return sim.now() })
	sim = newViewSim(t, "steady", 1, viewHost{component.MustNewID(view.ComponentType): v}, createDefaultConfig())
	sim.run(330 * time.Second)
	code, b := v.get(t, "/api/v1/view?range=300&columns=600")
	require.Equal(t, http.StatusOK, code, string(b))
	require.True(t, json.Valid(b))
	path := filepath.Join("..", "..", "extension", "gpuvizviewextension", "testdata", "view.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// viewAnswer is the part of /api/v1/view the processor's tests read.
type viewAnswer struct {
	Simulated bool    `json:"simulated"`
	From      int64   `json:"from"`
	To        int64   `json:"to"`
	FinalMS   int64   `json:"final_ms"`
	Time      []int64 `json:"time"`
	GPUs      []struct {
		ID          string   `json:"id"`
		Index       *int     `json:"index"`
		Name        string   `json:"name"`
		Simulated   bool     `json:"simulated"`
		MemoryTotal *float64 `json:"memory_total_bytes"`
		PowerLimit  *float64 `json:"power_limit_w"`
	} `json:"gpus"`
	Series      map[string]map[string]struct{ Min, Max, Mean []*float64 } `json:"series"`
	Labels      map[string][]*string                                      `json:"labels"`
	RequestsSeq uint64                                                    `json:"requests_seq"`
	Requests    []struct {
		Seq        uint64   `json:"seq"`
		TraceID    string   `json:"trace_id"`
		GPUs       []string `json:"gpus"`
		Family     string   `json:"family"`
		Start, End int64
		Bottleneck *string  `json:"bottleneck"`
		Share      *float64 `json:"bottleneck_share"`
		Energy     *float64 `json:"energy_j"`
		Simulated  bool     `json:"simulated"`
		Phases     []struct {
			Name       string `json:"name"`
			Start, End int64
			Bottleneck *string  `json:"bottleneck"`
			Energy     *float64 `json:"energy_j"`
		} `json:"phases"`
	} `json:"requests"`
	Summary struct {
		Share    map[string]float64 `json:"bottleneck_share"`
		Requests int                `json:"requests"`
	} `json:"summary"`
}

func (v *testView) view(t *testing.T, target string) viewAnswer {
	t.Helper()
	code, b := v.get(t, target)
	require.Equal(t, http.StatusOK, code, string(b))
	var a viewAnswer
	require.NoError(t, json.Unmarshal(b, &a))
	return a
}

func newViewedSim(t *testing.T, cfg *Config, lim view.Limits) (*viewSim, *testView) {
	return newViewedScenario(t, "steady", cfg, lim)
}

func newViewedScenario(t *testing.T, scenario string, cfg *Config, lim view.Limits) (*viewSim, *testView) {
	var sim *viewSim
	v := newTestView(func() time.Time { return sim.now() })
	v.Registry = view.NewRegistry(lim, "", func() time.Time { return sim.now() })
	sim = newViewSim(t, scenario, 1, viewHost{component.MustNewID(view.ComponentType): v}, cfg)
	return sim, v
}

func defaultViewLimits() view.Limits {
	return view.Limits{Retention: 15 * time.Minute, MaxGPUs: 64, MaxRequests: 20000}
}

func TestViewOfASimulatedNode(t *testing.T) {
	sim, v := newViewedSim(t, createDefaultConfig(), defaultViewLimits())
	require.NotNil(t, sim.core.spans.view, "the processor found the gpuviz_view extension")
	sim.run(150 * time.Second)
	a := v.view(t, "/api/v1/view?range=120&columns=120")
	assert.True(t, a.Simulated)
	require.Len(t, a.GPUs, viewSimGPUs)
	signals := []string{"utilization", "sm_activity", "tensor_activity", "dram_activity", "memory_used_bytes", "power_w",
		"temperature_c", "sm_clock_mhz", "power_throttled", "thermal_throttled",
		"pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s"}
	for i, g := range a.GPUs {
		require.NotNil(t, g.Index, g.ID)
		assert.Equal(t, i, *g.Index)
		assert.Contains(t, g.Name, "H200")
		assert.True(t, g.Simulated)
		require.NotNil(t, g.MemoryTotal)
		assert.Greater(t, *g.MemoryTotal, 100e9)
		require.NotNil(t, g.PowerLimit)
		assert.Equal(t, 700.0, *g.PowerLimit)
		for _, sig := range signals {
			s, ok := a.Series[g.ID][sig]
			require.True(t, ok, "%s has %s", g.ID, sig)
			require.Len(t, s.Mean, len(a.Time))
			points := 0
			for c := range s.Mean {
				if s.Mean[c] != nil {
					points++
					assert.LessOrEqual(t, *s.Min[c], *s.Mean[c]+1e-3*abs(*s.Mean[c]), sig)
					assert.GreaterOrEqual(t, *s.Max[c], *s.Mean[c]-1e-3*abs(*s.Mean[c]), sig)
				}
			}
			// Scrape-time readings come every collection_interval (10 s),
			// the sampled ones every second.
			assert.GreaterOrEqual(t, points, 10, "%s %s", g.ID, sig)
		}
		// The SM clock in MHz, the SM's alone (not the memory's 2,619 MHz):
		// within the H200's idle and top clocks.
		for c, m := range a.Series[g.ID]["sm_clock_mhz"].Max {
			if m != nil {
				assert.GreaterOrEqual(t, *a.Series[g.ID]["sm_clock_mhz"].Min[c], 345.0, g.ID)
				assert.LessOrEqual(t, *m, 1980.0, g.ID)
			}
		}
		labelled := 0
		for c, l := range a.Labels[g.ID] {
			if l != nil && a.Time[c] < a.FinalMS {
				labelled++
			}
		}
		assert.Greater(t, labelled, 80, "%s: labels over the final columns", g.ID)
	}
	assert.Greater(t, a.Summary.Share["memory_bound"]+a.Summary.Share["compute_bound"], 0.5)

	// Requests: every one an enriched span, with its phases.
	require.NotEmpty(t, a.Requests)
	assert.Equal(t, a.RequestsSeq, a.Requests[len(a.Requests)-1].Seq)
	enriched := enrichedShares(sim.traces.AllTraces())
	for _, r := range a.Requests {
		require.Contains(t, enriched, r.TraceID)
		assert.Equal(t, "vllm", r.Family)
		assert.True(t, r.Simulated)
		assert.Len(t, r.GPUs, viewSimGPUs, "steady is one engine over the node's 8 GPUs")
		require.NotEmpty(t, r.Phases)
		names := []string{}
		for _, p := range r.Phases {
			names = append(names, p.Name)
			assert.LessOrEqual(t, r.Start, p.Start)
			assert.GreaterOrEqual(t, r.End, p.End)
		}
		assert.Contains(t, names, "decode")
		require.NotNil(t, r.Energy)
		assert.Greater(t, *r.Energy, 0.0)
		require.NotNil(t, r.Bottleneck)
		require.NotNil(t, r.Share, "a labelled request has a share")
		assert.InDelta(t, enriched[r.TraceID], *r.Share, 0.0005, "the span's gpuviz.bottleneck.share")
	}
}

// TestViewShowsStarvationOnceFinal: a GPU idling between host steps
// while requests are present freezes idle (their spans may come later) and
// is host_bound once final, in the books and the bottleneck-time counter;
// the view follows, and its final_ms waits for finality.
func TestViewShowsStarvationOnceFinal(t *testing.T) {
	cfg := createDefaultConfig()
	sim, v := newViewedScenario(t, "host_starved", cfg, defaultViewLimits())
	sim.run(150 * time.Second)
	// Its spans wait their running time (its GPUs wait for their host), and
	// a bin turns final only once every span over it has left: the last
	// minute and more is not final yet.
	a := v.view(t, "/api/v1/view?range=180&columns=180")
	assert.LessOrEqual(t, a.FinalMS, sim.now().Add(-cfg.Attribution.FinalizeAfter).UnixMilli()+1000,
		"final_ms no later than finality")
	for _, g := range a.GPUs {
		final, starved := 0, 0
		for c, l := range a.Labels[g.ID] {
			if l == nil || a.Time[c] >= a.FinalMS-1000 {
				continue
			}
			final++
			if *l == string(bottleneck.HostBound) {
				starved++
			}
		}
		require.Greater(t, final, 60, g.ID)
		assert.Greater(t, float64(starved)/float64(final), 0.8, "%s: final columns host_bound (%d of %d)", g.ID, starved, final)
	}
}

func abs(x float64) float64 { return max(x, -x) }

// enrichedShares maps the trace of every enriched request span to its
// bottleneck share.
func enrichedShares(traces []ptrace.Traces) map[string]float64 {
	out := map[string]float64{}
	for _, td := range traces {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					if _, ok := sp.Attributes().Get("gpuviz.energy"); ok && sp.Kind() == ptrace.SpanKindServer {
						share, _ := sp.Attributes().Get(attrShare)
						out[sp.TraceID().String()] = share.Double()
					}
				}
			}
		}
	}
	return out
}

// TestViewIncrementsMatchAFullFetch: what the page builds from a full
// fetch and the increments (since, requests_after) is what a full fetch
// later says.
func TestViewIncrementsMatchAFullFetch(t *testing.T) {
	sim, v := newViewedSim(t, createDefaultConfig(), defaultViewLimits())
	sim.run(100 * time.Second)
	const q = "/api/v1/view?range=60&columns=60"
	page := v.view(t, q)
	for range 5 {
		sim.run(time.Second)
		since := min(page.Time[len(page.Time)-1], page.FinalMS)
		inc := v.view(t, fmt.Sprintf("%s&since=%d&requests_after=%d", q, since, page.RequestsSeq))
		require.GreaterOrEqual(t, inc.Time[0], since)
		mergeView(&page, &inc)
	}
	full := v.view(t, q)
	// The page holds more columns on the left (it drops them itself).
	off := len(page.Time) - len(full.Time)
	require.GreaterOrEqual(t, off, 0)
	require.Equal(t, full.Time, page.Time[off:])
	for gpu, sigs := range full.Series {
		for sig, s := range sigs {
			ps := page.Series[gpu][sig]
			assert.Equal(t, s.Mean, ps.Mean[off:], "%s %s mean", gpu, sig)
			assert.Equal(t, s.Max, ps.Max[off:], "%s %s max", gpu, sig)
		}
		for c := range full.Time {
			if full.Time[c] < full.FinalMS {
				assert.Equal(t, full.Labels[gpu][c], page.Labels[gpu][c+off], "%s label at %d", gpu, full.Time[c])
			}
		}
	}
	assert.Equal(t, full.RequestsSeq, page.RequestsSeq)
	want := map[uint64]bool{}
	for _, r := range full.Requests {
		want[r.Seq] = true
	}
	got := map[uint64]bool{}
	for _, r := range page.Requests {
		if r.End >= full.From && r.Start <= full.To {
			got[r.Seq] = true
		}
	}
	assert.Equal(t, want, got)
}

// mergeView does what the page does with an increment: replace the
// columns with the same start, append the rest, add the requests.
func mergeView(page, inc *viewAnswer) {
	at := len(page.Time)
	for i, ts := range page.Time {
		if ts == inc.Time[0] {
			at = i
			break
		}
	}
	page.Time = append(page.Time[:at], inc.Time...)
	for gpu, sigs := range inc.Series {
		for sig, s := range sigs {
			ps := page.Series[gpu][sig]
			ps.Min = append(ps.Min[:at], s.Min...)
			ps.Max = append(ps.Max[:at], s.Max...)
			ps.Mean = append(ps.Mean[:at], s.Mean...)
			page.Series[gpu][sig] = ps
		}
		page.Labels[gpu] = append(page.Labels[gpu][:at], inc.Labels[gpu]...)
	}
	page.Requests = append(page.Requests, inc.Requests...)
	page.RequestsSeq, page.FinalMS, page.From, page.To = inc.RequestsSeq, inc.FinalMS, inc.From, inc.To
}

func TestViewBounds(t *testing.T) {
	lim := defaultViewLimits()
	lim.MaxGPUs, lim.Retention = 5, 2*time.Minute
	sim, v := newViewedSim(t, createDefaultConfig(), lim)
	sim.run(30 * time.Second)
	a := v.view(t, "/api/v1/view?range=60")
	assert.Len(t, a.GPUs, 5, "max_gpus")
	assert.EqualValues(t, 3, v.Dropped().GPUs, "the three GPUs past max_gpus, each counted once")
	for target, param := range map[string]string{
		"/api/v1/view?range=121":       "range:",
		"/api/v1/view?columns=4001":    "columns:",
		"/api/v1/view?since=x":         "since:",
		"/api/v1/view?requests_after=": "",
		"/api/v1/view?source=other":    "source:",
	} {
		code, b := v.get(t, target)
		if param == "" {
			assert.Equal(t, http.StatusOK, code, target) // empty means absent
			continue
		}
		assert.Equal(t, http.StatusBadRequest, code, target)
		assert.Contains(t, string(b), `"error":"`+param, target)
	}
	rec := httptest.NewRecorder()
	v.Handler(fstest.MapFS{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/view", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	// Requests on refused GPUs keep the GPUs the view holds.
	for _, r := range a.Requests {
		assert.Len(t, r.GPUs, 5)
	}
}

func TestNoViewCostsNothing(t *testing.T) {
	sim := newViewSim(t, "steady", 1, viewHost{}, createDefaultConfig())
	assert.Nil(t, sim.core.spans.view)
	assert.Nil(t, sim.core.ingest.view)
	assert.Nil(t, sim.core.spans.pipeline.onFreeze)
	assert.Nil(t, sim.core.spans.pipeline.onFinal)
	sim.run(20 * time.Second)
	assert.NotZero(t, sim.core.spans.store.Len())
}

// TestViewSourceFollowsTheProcessor: the real extension, found by type;
// the source goes when the processor shuts down.
func TestViewSourceFollowsTheProcessor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	fac := gpuvizviewextension.NewFactory()
	ecfg := fac.CreateDefaultConfig().(*gpuvizviewextension.Config)
	ecfg.NetAddr.Endpoint = addr
	ctx := context.Background()
	ext, err := fac.Create(ctx, extensiontest.NewNopSettings(fac.Type()), ecfg)
	require.NoError(t, err)
	require.NoError(t, ext.Start(ctx, componenttest.NewNopHost()))
	defer func() { require.NoError(t, ext.Shutdown(ctx)) }()

	pf := &factory{cores: map[*Config]*core{}}
	set := processortest.NewNopSettings(metadata.Type)
	set.ID = component.MustNewIDWithName("gpuviz", "edge")
	mp, err := pf.createMetrics(ctx, set, createDefaultConfig(), new(consumertest.MetricsSink))
	require.NoError(t, err)
	host := viewHost{component.MustNewID(view.ComponentType): ext}
	require.NoError(t, mp.Start(ctx, host))
	sources := func() string {
		resp, err := http.Get("http://" + addr + "/api/v1/sources")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	assert.Contains(t, sources(), `"id":"gpuviz/edge"`)
	require.NoError(t, mp.Shutdown(ctx))
	assert.Contains(t, sources(), `"sources":[]`)
}

// The view names a column by the label holding it longest, ties to the
// earlier in its order: the classifier's order, or a column and the spans
// over it could name different labels.
func TestViewKnowsTheClassifiersLabelsInItsOrder(t *testing.T) {
	var want []string
	for _, l := range bottleneck.Labels {
		want = append(want, string(l))
	}
	assert.Equal(t, want, view.LabelNames())
}

// The sink asks the sources again, at the minute's forgetting, for a GPU
// they refused while full and for one they evicted, and holds no GPU the
// timeline forgot.
func TestViewSinkAsksAgainForRefusedAndEvictedGPUs(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	reg := view.NewRegistry(view.Limits{Retention: 10 * time.Second, MaxGPUs: 2, MaxRequests: 10}, "", func() time.Time { return t0 })
	src, release := reg.RegisterSource("gpuviz")
	defer release()
	v := &viewSink{sources: []*view.Source{src}, release: []func(){release}, width: int64(100 * time.Millisecond), gpus: map[timeline.Key][]*view.GPU{}}
	key := func(id string) timeline.Key { return timeline.Key{Host: "h", GPU: id} }
	shown := func(id string) bool { return v.gpus[key(id)] != nil && v.gpus[key(id)][0] != nil }
	v.sample(key("GPU-a"), timeline.Utilization, t0, 0.5)
	v.sample(key("GPU-b"), timeline.Utilization, t0, 0.5)
	v.sample(key("GPU-c"), timeline.Utilization, t0, 0.5)
	require.False(t, shown("GPU-c"), "refused: the view holds two")
	// GPU-a goes silent; GPU-b and GPU-c report every second for a minute.
	for s := 1; s <= 60; s++ {
		at := t0.Add(time.Duration(s) * time.Second)
		v.sample(key("GPU-b"), timeline.Utilization, at, 0.5)
		v.sample(key("GPU-c"), timeline.Utilization, at, 0.5)
	}
	assert.False(t, shown("GPU-c"), "asked again only at the minute's forgetting")
	v.forget(func(k timeline.Key) bool { return k != key("GPU-a") }) // the timeline forgot GPU-a
	v.sample(key("GPU-c"), timeline.Utilization, t0.Add(61*time.Second), 0.5)
	assert.True(t, shown("GPU-c"), "shown in the silent GPU-a's place")
	assert.Len(t, v.gpus, 2, "GPU-a is gone from the sink too")

	// GPU-b goes silent and is evicted for GPU-d; when it reports again
	// after the next forgetting it is asked for anew, not fed to its
	// evicted copy.
	for s := 62; s <= 80; s++ {
		v.sample(key("GPU-c"), timeline.Utilization, t0.Add(time.Duration(s)*time.Second), 0.5)
	}
	v.sample(key("GPU-d"), timeline.Utilization, t0.Add(80*time.Second), 0.5)
	require.True(t, shown("GPU-d"))
	evicted := v.gpus[key("GPU-b")][0]
	require.True(t, evicted.Evicted())
	v.forget(func(timeline.Key) bool { return true })
	v.sample(key("GPU-b"), timeline.Utilization, t0.Add(81*time.Second), 0.5)
	assert.NotSame(t, evicted, v.gpus[key("GPU-b")][0], "not the evicted copy")
}

// A simulated GPU that dcgm-exporter describes too ("dcgm,simulated")
// stays simulated in the view when dcgm-exporter's first point arrives.
func TestViewKeepsASimulatedGPUMarkedWhenDCGMDescribesItToo(t *testing.T) {
	sim, v := newViewedSim(t, createDefaultConfig(), defaultViewLimits())
	sim.run(70 * time.Second)
	host, err := os.Hostname() // the receiver's host.name
	require.NoError(t, err)
	gpu := map[string]string{"UUID": sim.env.GPUIDs[0], "Hostname": host}
	require.NoError(t, sim.mp.ConsumeMetrics(context.Background(), dcgmScrape(sim.now(),
		dcgmSeries{name: "DCGM_FI_DEV_GPU_UTIL", v: 3, labels: gpu})))
	a := v.view(t, "/api/v1/view?range=60&columns=60")
	assert.True(t, a.Simulated)
	require.Len(t, a.GPUs, viewSimGPUs)
	for _, g := range a.GPUs {
		assert.True(t, g.Simulated, g.ID)
	}
}

// What the sink hands the view is what the view shows: PCIe receive and
// transmit each under its own name, final_ms at the end of the last final
// bin, a request's energy only where known, each phase's own share, and
// no request on a GPU the view refused.
func TestViewSinkHandsTheViewWhatItShows(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	now := t0.Add(10 * time.Second)
	tv := &testView{Registry: view.NewRegistry(view.Limits{Retention: time.Minute, MaxGPUs: 1, MaxRequests: 10}, "", func() time.Time { return now })}
	src, release := tv.RegisterSource("gpuviz")
	defer release()
	const width = 100 * time.Millisecond
	v := &viewSink{sources: []*view.Source{src}, release: []func(){release}, width: int64(width), gpus: map[timeline.Key][]*view.GPU{}}
	k, refused := timeline.Key{Host: "h", GPU: "GPU-a"}, timeline.Key{Host: "h", GPU: "GPU-b"}
	for s := range 10 {
		at := t0.Add(time.Duration(s) * time.Second)
		v.sample(k, timeline.PCIeRx, at, 1e9)
		v.sample(k, timeline.PCIeTx, at, 2e8)
		v.sample(refused, timeline.PCIeRx, at, 1e9) // the view holds one GPU
	}
	final := t0.Add(5*time.Second - width).UnixNano() // the bin ending at 5 s
	v.label(k, final, bottleneck.ComputeBound)
	v.final(k, final, bottleneck.ComputeBound)

	r := &requestRecord{
		keys: []timeline.Key{k}, model: "llama", family: "vllm", label: bottleneck.ComputeBound, share: 0.6,
		energy: 12, energyKnown: false, traceID: pcommon.TraceID{1}, spanID: pcommon.SpanID{1},
		start: t0.Add(2 * time.Second), end: t0.Add(4 * time.Second), numPhases: 2,
	}
	r.phases[0] = recordPhase{name: "prefill", start: r.start, end: r.start.Add(time.Second), label: bottleneck.ComputeBound, share: 0.9, energy: 5}
	r.phases[1] = recordPhase{name: "decode", start: r.start.Add(time.Second), end: r.end, label: bottleneck.MemoryBound, share: 0.7, energy: 7}
	v.request(r)
	onRefused := *r
	onRefused.keys, onRefused.traceID = []timeline.Key{refused}, pcommon.TraceID{2}
	v.request(&onRefused)

	_, b := tv.get(t, "/api/v1/view?range=60&columns=60")
	var a viewAnswer
	require.NoError(t, json.Unmarshal(b, &a), string(b))
	require.Len(t, a.GPUs, 1, "%s", b)
	mean := func(sig string) float64 {
		s := a.Series[a.GPUs[0].ID][sig]
		for _, m := range s.Mean {
			if m != nil {
				return *m
			}
		}
		t.Fatalf("no %s", sig)
		return 0
	}
	assert.Equal(t, 1e9, mean("pcie_rx_bytes_per_s"))
	assert.Equal(t, 2e8, mean("pcie_tx_bytes_per_s"))
	assert.Equal(t, (final+int64(width))/int64(time.Millisecond), a.FinalMS, "final to the end of the bin")

	require.Len(t, a.Requests, 1, "the request on the refused GPU is not shown: %s", b)
	q := a.Requests[0]
	assert.Nil(t, q.Energy, "energy not known: none shown")
	require.Len(t, q.Phases, 2)
	var phases []struct {
		Share float64 `json:"bottleneck_share"`
	}
	var raw struct {
		Requests []struct {
			Phases json.RawMessage `json:"phases"`
		} `json:"requests"`
	}
	require.NoError(t, json.Unmarshal(b, &raw))
	require.NoError(t, json.Unmarshal(raw.Requests[0].Phases, &phases))
	assert.Equal(t, 0.9, phases[0].Share)
	assert.Equal(t, 0.7, phases[1].Share)
}

// The view's own readings refuse what is past the clock as the timeline
// does, the driver's sub-second SM clock samples too: one stamped a day
// ahead would move the GPU's newest second and drop its real samples.
func TestViewSampledClockFromTheFutureIsRefused(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, nil)
	*now = base.Add(21 * time.Second)
	reg := view.NewRegistry(view.Limits{Retention: time.Minute, MaxGPUs: 10, MaxRequests: 10}, "", func() time.Time { return *now })
	src, release := reg.RegisterSource("gpuviz")
	defer release()
	c.spans.setView(&viewSink{sources: []*view.Source{src}, release: []func(){release}, width: int64(100 * time.Millisecond), gpus: map[timeline.Key][]*view.GPU{}})
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	c.ingest.consume(context.Background(), oneGauge("node-1", "GPU-a", "nvidia.gpu.samples.sm_clock", base.Add(24*time.Hour), 1.98e9))
	*now = base.Add(22 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base.Add(21*time.Second), time.Second, repeat(busy, 1)))
	assert.Zero(t, reg.Dropped().SamplesTooOld, "the view kept the GPU's samples")
}
