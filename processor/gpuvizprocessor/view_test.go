package gpuvizprocessor

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/view"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
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
