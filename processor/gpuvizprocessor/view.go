package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/internal/view"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// viewSink hands the live view (every gpuviz_view extension the collector
// runs, each a view.Source named by this processor's ID) what it shows:
// the samples ingest has already turned into timeline signals, the few
// readings the timeline does not keep (temperature, SM clock, power
// limit), each bin's label as the books freeze it, and every released
// request with its phases. With no view configured the core has no sink,
// and each hook is one nil check.
type viewSink struct {
	sources []*view.Source
	release []func()
	width   int64 // ns: the books' bin width

	mu   sync.RWMutex
	gpus map[timeline.Key][]*view.GPU // per source; nil where refused
	req  view.Request                 // scratch, under mu
}

// viewSignals maps the timeline's signals to the view's; -1: not shown.
var viewSignals = func() (m [timeline.NumSignals]int8) {
	for i := range m {
		m[i] = -1
	}
	for sig, v := range map[timeline.Signal]view.Signal{
		timeline.Utilization: view.Utilization, timeline.SMActivity: view.SMActivity,
		timeline.TensorActivity: view.TensorActivity, timeline.DRAMActivity: view.DRAMActivity,
		timeline.MemoryUsed: view.MemoryUsed, timeline.Power: view.Power,
		timeline.PowerThrottled: view.PowerThrottled, timeline.ThermalThrottled: view.ThermalThrottled,
		timeline.PCIeRx: view.PCIeRx, timeline.PCIeTx: view.PCIeTx,
		timeline.NVLinkRx: view.NVLinkRx, timeline.NVLinkTx: view.NVLinkTx,
	} {
		m[sig] = int8(v)
	}
	return m
}()

// attachView registers the processor as a source with every gpuviz_view
// extension of the host; nil when there is none.
func attachView(host component.Host, id component.ID, width time.Duration, logger *zap.Logger) *viewSink {
	if host == nil {
		return nil
	}
	exts := host.GetExtensions()
	ids := make([]component.ID, 0, len(exts))
	for eid := range exts {
		if eid.Type().String() == view.ComponentType {
			ids = append(ids, eid)
		}
	}
	slices.SortFunc(ids, func(a, b component.ID) int { return cmp.Compare(a.String(), b.String()) })
	var v *viewSink
	for _, eid := range ids {
		r, ok := exts[eid].(view.Registrar)
		if !ok {
			continue
		}
		if v == nil {
			v = &viewSink{width: int64(width), gpus: map[timeline.Key][]*view.GPU{}}
		}
		src, release := r.RegisterSource(id.String())
		v.sources = append(v.sources, src)
		v.release = append(v.release, release)
		logger.Info("registered with the live view", zap.String("view", eid.String()), zap.String("source", id.String()))
	}
	return v
}

// forget drops the GPUs the timeline no longer knows (known false), and
// those a source refused or has since evicted: the next sample of a GPU
// still reporting asks the sources again, so a GPU refused while the view
// was full, or evicted while silent, is shown once there is room, and the
// sink holds no more GPUs than the timeline.
func (v *viewSink) forget(known func(timeline.Key) bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, gs := range v.gpus {
		if !known(k) || slices.ContainsFunc(gs, func(g *view.GPU) bool { return g == nil || g.Evicted() }) {
			delete(v.gpus, k)
		}
	}
}

// detach removes the sources.
func (v *viewSink) detach() {
	for _, r := range v.release {
		r()
	}
}

// gpu returns k's GPU in each source, created on first use.
func (v *viewSink) gpu(k timeline.Key) []*view.GPU {
	v.mu.RLock()
	gs, ok := v.gpus[k]
	v.mu.RUnlock()
	if ok {
		return gs
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if gs, ok := v.gpus[k]; ok {
		return gs
	}
	gs = make([]*view.GPU, len(v.sources))
	for i, s := range v.sources {
		gs[i] = s.GPU(k.Host, k.GPU)
	}
	v.gpus[k] = gs
	return gs
}

// backend marks k's data simulated or not, as its resource said: backend
// is one name or several, comma-separated ("dcgm,simulated").
func (v *viewSink) backend(k timeline.Key, backend string) {
	sim := slices.Contains(strings.Split(backend, ","), "simulated")
	for _, g := range v.gpu(k) {
		if g != nil {
			g.SetSimulated(sim)
		}
	}
}

// sample forwards a point the timeline took.
func (v *viewSink) sample(k timeline.Key, sig timeline.Signal, ts time.Time, val float64) {
	if sig == timeline.MemoryLimit {
		for _, g := range v.gpu(k) {
			if g != nil {
				g.SetMemoryTotal(val)
			}
		}
		return
	}
	if vs := viewSignals[sig]; vs >= 0 {
		v.add(k, view.Signal(vs), ts, val)
	}
}

func (v *viewSink) add(k timeline.Key, sig view.Signal, ts time.Time, val float64) {
	t := ts.UnixNano()
	for _, g := range v.gpu(k) {
		if g != nil {
			g.Add(sig, t, val)
		}
	}
}

// label forwards a bin's frozen label.
func (v *viewSink) label(k timeline.Key, binStart int64, l bottleneck.Label) {
	for _, g := range v.gpu(k) {
		if g != nil {
			g.Label(binStart, v.width, string(l))
		}
	}
}

// final forwards a bin's final label. A bin is frozen without knowing
// which requests were present (their spans may come later), so an idle
// GPU freezes idle; once final, the books call it host_bound if a request
// was present: the one change finality makes to a label, which the view
// then makes too. The view's final_ms follows the final bins.
func (v *viewSink) final(k timeline.Key, binStart int64, l bottleneck.Label) {
	for _, g := range v.gpu(k) {
		if g == nil {
			continue
		}
		if l == bottleneck.HostBound {
			g.Relabel(binStart, v.width, string(bottleneck.Idle), string(l))
		}
		g.Finalized(binStart + v.width)
	}
}

// request forwards a released request.
func (v *viewSink) request(r *requestRecord) {
	gpus := make([][]*view.GPU, len(r.keys))
	for i, k := range r.keys {
		gpus[i] = v.gpu(k)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	q := &v.req
	*q = view.Request{
		TraceID: r.traceID, SpanID: r.spanID, Model: r.model, Family: r.family,
		Start: r.start.UnixNano(), End: r.end.UnixNano(), Bottleneck: string(r.label), Share: r.share,
		Energy: r.energy, EnergyKnown: r.energyKnown, PerToken: r.perToken,
		InputTokens: r.inputTokens, OutputTokens: r.outputTokens, NumPhases: r.numPhases,
		GPUs: q.GPUs[:0],
	}
	for i := range r.numPhases {
		p := &r.phases[i]
		q.Phases[i] = view.Phase{Name: p.name, Start: p.start.UnixNano(), End: p.end.UnixNano(), Bottleneck: string(p.label), Share: p.share, Energy: p.energy}
	}
	for s, src := range v.sources {
		q.GPUs = q.GPUs[:0]
		for _, gs := range gpus {
			if gs[s] != nil {
				q.GPUs = append(q.GPUs, gs[s])
			}
		}
		if len(q.GPUs) > 0 {
			src.AddRequest(q)
		}
	}
}

// viewOnly handlers feed readings the timeline does not keep to the view
// (refused past the clock before, as the timeline's are: a reading from
// the future would blank the GPU in the view).
func viewGauge(sig view.Signal, scale float64) handler {
	return func(in *ingest, b *ingestBatch, p point) {
		if v := in.viewOf(p.key); v != nil {
			v.add(p.key, sig, p.ts, p.v*scale)
		}
	}
}

func viewTemperature(in *ingest, b *ingestBatch, p point) {
	if t := stringAttr(p.attrs, "hw.type"); t == "gpu" || t == "" {
		if v := in.viewOf(p.key); v != nil {
			v.add(p.key, view.Temperature, p.ts, p.v)
		}
	}
}

func viewClock(in *ingest, b *ingestBatch, p point) {
	if v := in.viewOf(p.key); v != nil && stringAttr(p.attrs, "nvidia.gpu.clock.domain") == "sm" {
		v.add(p.key, view.SMClock, p.ts, p.v/1e6)
	}
}

func viewPowerLimit(in *ingest, b *ingestBatch, p point) {
	v := in.viewOf(p.key)
	if v == nil {
		return
	}
	for _, g := range v.gpu(p.key) {
		if g != nil {
			g.SetPowerLimit(p.v)
		}
	}
}

// viewInfo records a GPU's index and product name.
func (v *viewSink) info(k timeline.Key, index int, name string) {
	for _, g := range v.gpu(k) {
		if g != nil {
			g.SetInfo(index, name)
		}
	}
}
