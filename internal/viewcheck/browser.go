package viewcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// Width and Height are the viewport of the screenshots.
const (
	Width  = 1600
	Height = 1000
)

// Browser is one headless Chromium with one page.
type Browser struct {
	ctx    context.Context
	cancel func()
	mu     sync.Mutex
	errs   []string // console errors and uncaught exceptions
}

// NewBrowser starts Chromium from execPath (Debian's: /usr/bin/chromium)
// with a Width×Height viewport. Close stops it.
func NewBrowser(ctx context.Context, execPath string) (*Browser, error) {
	if _, err := os.Stat(execPath); err != nil {
		return nil, fmt.Errorf("no Chromium at %s (make chromium installs Debian's): %w", execPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.WindowSize(Width, Height),
		chromedp.NoSandbox, // as root in a container
		chromedp.DisableGPU,
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("font-render-hinting", "none"),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	b := &Browser{ctx: bctx, cancel: func() { bcancel(); acancel() }}
	// Start the browser and subscribe to the console before any page loads.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(Width, Height)); err != nil {
		b.cancel()
		return nil, fmt.Errorf("starting Chromium: %w", err)
	}
	msgs := chromedp.Console(bctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errs = append(b.errs, fmt.Sprintf("%s (%s:%d)", m.String(), m.URL, m.Line))
				b.mu.Unlock()
			}
		}
	}()
	return b, nil
}

// Close stops the browser.
func (b *Browser) Close() { b.cancel() }

// ConsoleErrors returns the console errors and uncaught exceptions so far.
func (b *Browser) ConsoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// Open navigates to url and waits for the page's load event.
func (b *Browser) Open(url string) error {
	return chromedp.Do(b.ctx, chromedp.Navigate(url))
}

// Chart is one uPlot chart of one GPU as the page drew it.
type Chart struct {
	Chart   string `json:"chart"`   // util, memory, power, temperature, clock, io
	Points  int    `json:"points"`  // non-null points drawn (data-points)
	Signals string `json:"signals"` // the signals it draws, comma-separated
	Canvas  bool   `json:"canvas"`  // uPlot's canvas exists
}

// GPU is one GPU's row of charts.
type GPU struct {
	ID     string  `json:"id"`
	Charts []Chart `json:"charts"`
}

// Facts is what the page shows, read from its DOM hooks.
type Facts struct {
	SimBanner      bool           `json:"simBanner"` // #sim-banner is visible
	GPUs           []GPU          `json:"gpus"`      // .gpu-row[data-gpu]
	Lanes          int            `json:"lanes"`     // .lane[data-gpus]
	LaneGPUs       []string       `json:"laneGPUs"`  // the GPUs the lanes cover (one engine's GPUs share one)
	Bars           int            `json:"bars"`      // .request-bar[data-trace-id]
	BarsWithPhases int            `json:"barsWithPhases"`
	Phases         map[string]int `json:"phases"` // .phase[data-phase] by name
	// DimmedPhases counts the prefill and decode phases drawn with an
	// opacity under 1: a dimmed label colour reads as another label's
	// (compute-bound orange at .72 is thermal-throttled brown).
	DimmedPhases int    `json:"dimmedPhases"`
	HeatCells    int    `json:"heatCells"` // heatmap cells drawn
	Status       string `json:"status"`
	Summary      string `json:"summary"` // the summary strip's text
}

const factsJS = `(() => {
  const gpus = [...document.querySelectorAll('#chart-rows .gpu-row[data-gpu]')].map((r) => ({
    id: r.dataset.gpu,
    charts: [...r.querySelectorAll('.chart[data-chart]')].map((c) => ({
      chart: c.dataset.chart, points: Number(c.dataset.points || 0), signals: c.dataset.signals || '',
      canvas: !!c.querySelector('canvas') })),
  }));
  const bars = [...document.querySelectorAll('.request-bar[data-trace-id]')];
  const phases = {};
  let withPhases = 0, dimmed = 0;
  for (const b of bars) {
    const ps = b.querySelectorAll('.phase[data-phase]');
    if (ps.length) withPhases++;
    for (const p of ps) {
      phases[p.dataset.phase] = (phases[p.dataset.phase] || 0) + 1;
      if (p.dataset.phase !== 'queue' && Number(getComputedStyle(p).opacity) * Number(getComputedStyle(b).opacity) < 1) dimmed++;
    }
  }
  const banner = document.getElementById('sim-banner');
  return { simBanner: !!banner && !banner.hidden && banner.offsetHeight > 0, gpus,
    lanes: document.querySelectorAll('.lane[data-gpus]').length,
    laneGPUs: [...document.querySelectorAll('.lane[data-gpus]')].flatMap((l) => l.dataset.gpus.split(' ')), bars: bars.length, barsWithPhases: withPhases, phases, dimmedPhases: dimmed,
    heatCells: Number(document.getElementById('heatmap').dataset.cells || 0),
    status: document.getElementById('status').textContent, summary: document.getElementById('summary').innerText };
})()`

// Facts reads the page.
func (b *Browser) Facts() (Facts, error) {
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]byte](factsJS))
	if err != nil {
		return Facts{}, err
	}
	var f Facts
	return f, json.Unmarshal(raw, &f)
}

// WaitFor reads the page every half second until ready accepts it or the
// timeout passes; it returns the last facts read.
func (b *Browser) WaitFor(timeout time.Duration, ready func(Facts) error) (Facts, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, err := b.Facts()
		if err == nil {
			if err = ready(f); err == nil {
				return f, nil
			}
		}
		if time.Now().After(deadline) {
			return f, fmt.Errorf("after %v: %w", timeout, err)
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-b.ctx.Done(): // interrupted, or Chromium gone
			return f, fmt.Errorf("%w (last: %v)", b.ctx.Err(), err)
		}
	}
}

// pickJS scrolls a request bar at least 12 px wide, inside its lane, into the
// middle of the viewport and returns its trace id and the point to click.
const pickJS = `(() => {
  const lanes = [...document.querySelectorAll('.lane .lane-body')];
  const ok = [];
  for (const body of lanes) {
    const lr = body.getBoundingClientRect();
    for (const b of body.querySelectorAll('.request-bar[data-trace-id]')) {
      const r = b.getBoundingClientRect();
      const l = Math.max(r.left, lr.left), rr = Math.min(r.right, lr.right);
      if (rr - l >= 12) ok.push(b);
    }
  }
  if (!ok.length) return null;
  const b = ok[Math.floor(ok.length * 0.6)];
  b.scrollIntoView({ block: 'center' });
  const lr = b.closest('.lane-body').getBoundingClientRect(), r = b.getBoundingClientRect();
  const l = Math.max(r.left, lr.left), rr = Math.min(r.right, lr.right);
  return { trace: b.dataset.traceId, x: (l + rr) / 2, y: r.top + r.height / 2 };
})()`

// ClickRequest clicks a request bar with the mouse and waits for the
// details panel; it returns the trace id of the bar clicked and the one the
// details show.
func (b *Browser) ClickRequest() (clicked, shown string, err error) {
	for try := 0; try < 5; try++ {
		var p *struct {
			Trace string  `json:"trace"`
			X     float64 `json:"x"`
			Y     float64 `json:"y"`
		}
		if p, err = chromedp.Run(b.ctx, chromedp.Evaluate[*struct {
			Trace string  `json:"trace"`
			X     float64 `json:"x"`
			Y     float64 `json:"y"`
		}](pickJS)); err != nil {
			return "", "", err
		}
		if p == nil {
			return "", "", errors.New("no request bar wide enough to click")
		}
		if err = chromedp.Do(b.ctx, chromedp.MouseClickXY(p.X, p.Y)); err != nil {
			return "", "", err
		}
		time.Sleep(300 * time.Millisecond)
		shown, err = chromedp.Run(b.ctx, chromedp.Evaluate[string](
			`(document.querySelector('#details:not([hidden]) [data-trace-id]') || {dataset: {}}).dataset.traceId || ''`))
		if err != nil {
			return "", "", err
		}
		clicked = p.Trace
		if shown == clicked {
			return clicked, shown, nil
		}
		// The lanes moved under the pointer (they shift once a second): again.
	}
	return clicked, shown, nil
}

// HoverChart moves the mouse over GPU row's chart at the share x of its
// width, so every chart shows the synced cursor and its values.
func (b *Browser) HoverChart(row int, chart string, x float64) error {
	js := fmt.Sprintf(`(() => {
  const c = document.querySelectorAll('#chart-rows .gpu-row')[%d]?.querySelector('.chart[data-chart=%q] .u-over');
  if (!c) return null;
  const r = c.getBoundingClientRect();
  return [r.left + r.width * %f, r.top + r.height / 2];
})()`, row, chart, x)
	xy, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]float64](js))
	if err != nil {
		return err
	}
	if len(xy) != 2 {
		return errors.New("no chart to hover")
	}
	return chromedp.Do(b.ctx, chromedp.MouseEvent(chromedp.MouseMoved, xy[0], xy[1]))
}

// Scroll scrolls the page to the top of the element matched by selector
// (or to the top of the page for "").
func (b *Browser) Scroll(selector string) error {
	js := `window.scrollTo(0, 0)`
	if selector != "" {
		js = fmt.Sprintf(`document.querySelector(%q).scrollIntoView({block: 'start'})`, selector)
	}
	return chromedp.Do(b.ctx, chromedp.Evaluate[chromedp.Void](js))
}

// Screenshot writes the viewport as a PNG.
func (b *Browser) Screenshot(path string) error {
	png, err := b.Capture()
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// Capture returns the viewport as a PNG.
func (b *Browser) Capture() ([]byte, error) {
	return chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
}

// Required are the charts every GPU must draw points in; the others
// (temperature, clock, PCIe/NVLink) must have points when the GPU reports
// their signals.
var Required = []string{"util", "memory", "power"}

// Ready accepts the page once it shows wantGPUs GPUs whose charts all have
// points, the heatmap has cells, every GPU is in a request lane and the
// lanes have request bars with prefill and decode phases.
func Ready(wantGPUs int) func(Facts) error {
	return func(f Facts) error {
		if len(f.GPUs) != wantGPUs {
			return fmt.Errorf("%d GPU rows, want %d", len(f.GPUs), wantGPUs)
		}
		for _, g := range f.GPUs {
			if len(g.Charts) != 6 {
				return fmt.Errorf("GPU %s: %d charts, want 6", g.ID, len(g.Charts))
			}
			for _, c := range g.Charts {
				need := false
				for _, r := range Required {
					need = need || r == c.Chart
				}
				if (need || c.Signals != "") && (c.Points == 0 || !c.Canvas) {
					return fmt.Errorf("GPU %s: chart %s has no points (signals %q)", g.ID, c.Chart, c.Signals)
				}
			}
		}
		if f.HeatCells == 0 {
			return errors.New("the heatmap has no cells")
		}
		covered := map[string]bool{}
		for _, id := range f.LaneGPUs {
			covered[id] = true
		}
		for _, g := range f.GPUs {
			if !covered[g.ID] {
				return fmt.Errorf("no request lane for GPU %s (lanes cover %v)", g.ID, f.LaneGPUs)
			}
		}
		if f.BarsWithPhases == 0 || f.Phases["prefill"] == 0 || f.Phases["decode"] == 0 {
			return fmt.Errorf("request bars: %d, with phases %d (%v)", f.Bars, f.BarsWithPhases, f.Phases)
		}
		return nil
	}
}

// DetailsBottleneck returns the text of the details panel's bottleneck row
// ("" when the panel is hidden): the label and its share, "memory-bound 80%".
func (b *Browser) DetailsBottleneck() (string, error) {
	return chromedp.Run(b.ctx, chromedp.Evaluate[string](
		`([...document.querySelectorAll('#details:not([hidden]) tr')].find((r) => (r.querySelector('th') || {}).textContent === 'bottleneck') || {}).textContent || ''`))
}

// DetailsLink returns the href of the trace link in the details panel ("" when
// the panel shows the id without a link).
func (b *Browser) DetailsLink() (string, error) {
	return chromedp.Run(b.ctx, chromedp.Evaluate[string](
		`(document.querySelector('#details:not([hidden]) [data-trace-id] a') || {}).href || ''`))
}

// Eval evaluates js in the page and returns its value as JSON.
func (b *Browser) Eval(js string) ([]byte, error) {
	return chromedp.Run(b.ctx, chromedp.Evaluate[[]byte](js))
}
