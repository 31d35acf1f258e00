//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/viewcheck"
)

const traceTemplate = "http://127.0.0.1:16686/trace/{trace_id}"

// TestView opens the gpuviz_view page of the built collector, running the
// simulation with the load generator feeding it, in headless Chromium
// (Debian's package; `make chromium` installs it) and checks what the page
// drew through its DOM hooks: the simulated banner, every GPU's six charts
// with points, the fleet heatmap, request bars with their phases in a lane
// per GPU, the details of a clicked request with its trace id and link, and
// no console errors. It saves view.png and view-requests.png into
// $GPUVIZ_E2E_OUT.
func TestView(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// GPUVIZ_VIEW_URL: check a view that is already running (the page's
	// stand-in API, web/fixture/server.mjs, while developing) instead.
	base := os.Getenv("GPUVIZ_VIEW_URL")
	exited := func() error { return nil }
	if base == "" {
		s, err := viewcheck.StartStack(ctx, viewcheck.StackConfig{
			WorkDir:          work,
			Collector:        env("GPUVIZ_COLLECTOR", filepath.Join(root, "_build/otelcol-gpuviz")),
			Loadgen:          env("GPUVIZ_LOADGEN", filepath.Join(root, "_build/loadgen")),
			TraceURLTemplate: traceTemplate,
		})
		if err != nil {
			dumpViewLogs(t, work)
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Stop()
			if t.Failed() {
				dumpViewLogs(t, work)
			}
		})
		base, exited = s.URL, s.Exited
	}

	b, err := viewcheck.NewBrowser(ctx, env("GPUVIZ_CHROMIUM", "/usr/bin/chromium"))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Open(base+"#range=60"))

	// Requests reach the view once the processor releases them (max_wait
	// 10 s after their spans arrive): data within a minute and a half.
	f, err := b.WaitFor(90*time.Second, viewcheck.Ready(8))
	require.NoError(t, err, "the page shows data: %+v", f)
	require.NoError(t, exited(), "the collector and the load generator still run")

	// A source registers at the processor's Start, before its first GPU
	// data: it says simulated and counts its GPUs once the data came.
	src, err := viewcheck.GetSources(ctx, base)
	require.NoError(t, err)
	require.NotEmpty(t, src.Sources)
	assert.True(t, src.Sources[0].Simulated, "the source is marked simulated")
	assert.Equal(t, 8, src.Sources[0].GPUs)
	assert.Equal(t, traceTemplate, src.TraceURLTemplate)
	assert.True(t, f.SimBanner, "the SIMULATED DATA banner is shown")
	require.Len(t, f.GPUs, 8)
	for _, g := range f.GPUs {
		charts := map[string]viewcheck.Chart{}
		for _, c := range g.Charts {
			charts[c.Chart] = c
		}
		for _, name := range []string{"util", "memory", "power", "temperature", "clock", "io"} {
			c, ok := charts[name]
			if assert.True(t, ok, "GPU %s has a %s chart", g.ID, name) && c.Signals != "" {
				assert.Positive(t, c.Points, "GPU %s: %s chart (%s) has points", g.ID, name, c.Signals)
			}
		}
		assert.NotEmpty(t, charts["util"].Signals, "GPU %s reports utilisation", g.ID)
	}
	assert.Positive(t, f.HeatCells, "the heatmap drew cells")
	// A lane per GPU, except that the GPUs of one engine (here the steady
	// scenario's engine owns all 8) share theirs: every GPU is in one.
	assert.ElementsMatch(t, gpuIDs(f), f.LaneGPUs, "every GPU is in exactly one request lane")
	assert.Positive(t, f.BarsWithPhases, "request bars with phases")
	assert.Positive(t, f.Phases["prefill"], "prefill phases")
	assert.Positive(t, f.Phases["decode"], "decode phases")
	assert.Zero(t, f.DimmedPhases, "prefill and decode are drawn in their bottleneck's own colour, never dimmed into another label's")
	assert.Contains(t, f.Summary, "GPU TIME BY BOTTLENECK", "the summary strip")
	t.Logf("page: %d GPUs, %d heatmap cells, %d request lanes, %d request bars (%v), status %q", len(f.GPUs), f.HeatCells, f.Lanes, f.Bars, f.Phases, f.Status)

	out := os.Getenv("GPUVIZ_E2E_OUT")
	if out == "" {
		out = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(out, 0o755))
	require.NoError(t, b.HoverChart(0, "util", 0.85))
	require.NoError(t, b.Screenshot(filepath.Join(out, "view.png")))

	clicked, shown, err := b.ClickRequest()
	require.NoError(t, err)
	require.NotEmpty(t, clicked)
	assert.Equal(t, clicked, shown, "the details show the clicked request's trace id")
	assert.Regexp(t, `^[0-9a-f]{32}$`, shown)
	link, err := b.DetailsLink()
	require.NoError(t, err)
	assert.Equal(t, strings.ReplaceAll(traceTemplate, "{trace_id}", shown), link, "the trace id links through trace_url_template")
	label, err := b.DetailsBottleneck()
	require.NoError(t, err)
	assert.Regexp(t, `^bottleneck[a-z -]+ [0-9.]+%$`, label, "the request's bottleneck with its share")
	require.NoError(t, b.Screenshot(filepath.Join(out, "view-requests.png")))

	// A few more updates, then the console must be clean.
	time.Sleep(3 * time.Second)
	f2, err := b.Facts()
	require.NoError(t, err)
	assert.Contains(t, f2.Status, "live", "still updating")
	assert.Empty(t, b.ConsoleErrors(), "console errors and exceptions")
	t.Logf("screenshots: %s, %s", filepath.Join(out, "view.png"), filepath.Join(out, "view-requests.png"))
}

func gpuIDs(f viewcheck.Facts) []string {
	var ids []string
	for _, g := range f.GPUs {
		ids = append(ids, g.ID)
	}
	return ids
}

func dumpViewLogs(t *testing.T, dir string) {
	for _, name := range []string{"collector", "loadgen"} {
		if b, err := os.ReadFile(filepath.Join(dir, name+".log")); err == nil {
			t.Logf("--- %s log (last 3000 bytes) ---\n%s", name, tail(b, 3000))
		}
	}
}
