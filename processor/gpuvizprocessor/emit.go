package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// gpuBooks is one GPU's books as the emitter reads them.
type gpuBooks struct {
	key     timeline.Key
	backend string
	totals  attribution.Totals
	current bottleneck.Label // the latest final bin's; "" before any
}

// requestRecord is what the emitter keeps of one released request.
type requestRecord struct {
	keys        []timeline.Key
	model       string
	label       bottleneck.Label
	share       float64 // the label's part of the span's labelled GPU time
	energy      float64
	energyKnown bool
	perToken    float64 // 0: unknown
	busy        float64
	traceID     pcommon.TraceID
	spanID      pcommon.SpanID
	end         time.Time
	seconds     float64
	// What the accounting counters charge: the span's tenant ("" none) and
	// its share of its GPUs' time (its energy is above).
	tenant     string
	gpuSeconds float64
	backend    string // its GPUs' (gpuviz.backend), for series of a host without books this flush
	// What the live view shows besides (view.go).
	family                    string
	start                     time.Time
	inputTokens, outputTokens int64
	phases                    [inference.MaxPhases]recordPhase
	numPhases                 int
}

// recordPhase is one phase of a requestRecord.
type recordPhase struct {
	name       string
	start, end time.Time
	label      bottleneck.Label
	share      float64
	energy     float64
}

// emitter builds the derived metrics: the GPUs' books through the
// generated MetricsBuilder, the request histograms and exemplars by hand.
type emitter struct {
	interval time.Duration
	analysis *gpuAnalysis
	store    *timeline.Store

	mu        sync.Mutex
	mb        *metadata.MetricsBuilder
	lastEmit  time.Time
	lastTS    pcommon.Timestamp // the last flush's (start before the first): new series start there
	hists     *histograms
	acct      *accounting
	exemplars map[timeline.Key]*labelExemplars // since the last flush
	// start is the builder's start time; gpuSeries each GPU's in the last
	// flush (gpuSeriesStarts).
	start     pcommon.Timestamp
	gpuSeries map[timeline.Key]gpuSeries
	// models and tenants bound the per-request series' values per host.
	models, tenants *boundedValues
	idleExpiry      time.Duration
	// Requests counted under "other" since the last flush, by dimension.
	foldedModels, foldedTenants int64
	// backends is each host's GPUs' backends as its requests saw them (all
	// of them, while its series live): a host's request series outlive its
	// GPUs' books, and stay marked.
	backends map[string]string
}

func newEmitter(set processor.Settings, cfg *Config, store *timeline.Store, an *gpuAnalysis, now time.Time) *emitter {
	start := pcommon.NewTimestampFromTime(now)
	return &emitter{
		interval: cfg.Metrics.Interval, analysis: an, store: store,
		mb:     metadata.NewMetricsBuilder(metadata.DefaultMetricsBuilderConfig(), set, metadata.WithStartTime(start)),
		lastTS: start, start: start, gpuSeries: map[timeline.Key]gpuSeries{},
		hists:     newHistograms(cfg.Metrics.IdleExpiry),
		acct:      newAccounting(set, cfg.Metrics.IdleExpiry),
		exemplars: map[timeline.Key]*labelExemplars{},
		models:    newBoundedValues(cfg.Metrics.MaxModels), tenants: newBoundedValues(cfg.Metrics.Accounting.MaxTenants),
		idleExpiry: cfg.Metrics.IdleExpiry,
		backends:   map[string]string{},
	}
}

// record counts a request released at now in the histograms and the
// accounting counters (its GPUs are on one host: matching is per host) and
// keeps it as an exemplar of its label's time on each of its GPUs. Its
// series count as used at now, the collector's clock that expires them,
// not at the request's end, which a host's clock stamped and a hold
// delayed.
func (e *emitter) record(r requestRecord, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	host := r.keys[0].Host
	e.backends[host] = unionBackends(e.backends[host], r.backend)
	model, folded := e.models.fold(host, r.model, now)
	if folded {
		e.foldedModels++
	}
	tenant, folded := e.tenants.fold(host, r.tenant, now)
	if folded {
		e.foldedTenants++
	}
	var joules float64
	if r.energyKnown {
		joules = r.energy
	}
	e.acct.add(host, model, tenant, joules, r.gpuSeconds, now, e.lastTS)
	hk := histKey{host: host, model: model, label: r.label}
	ex := exemplar{traceID: r.traceID, spanID: r.spanID, ts: r.end}
	if r.energyKnown {
		e.hists.observe(histEnergy, hk, r.energy, ex, now, e.lastTS)
		if r.perToken > 0 {
			e.hists.observe(histPerToken, hk, r.perToken, ex, now, e.lastTS)
		}
	}
	e.hists.observe(histBusy, hk, r.busy, ex, now, e.lastTS)
	l := bottleneck.Index(r.label)
	if l < 0 {
		return
	}
	for _, k := range r.keys {
		byLabel := e.exemplars[k]
		if byLabel == nil {
			byLabel = new(labelExemplars)
			e.exemplars[k] = byLabel
		}
		byLabel[l] = pushExemplar(byLabel[l], exemplar{traceID: r.traceID, spanID: r.spanID, ts: r.end, value: r.seconds})
	}
}

// due reports whether a flush is due at now.
func (e *emitter) due(now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return now.Sub(e.lastEmit) >= e.interval
}

// emit appends the derived metrics to md and returns the exemplars sent.
func (e *emitter) emit(md pmetric.Metrics, now time.Time, gpus []gpuBooks) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hists.expire(now)
	e.models.expire(now, e.idleExpiry)
	e.tenants.expire(now, e.idleExpiry)
	e.acct.book(gpus, now, e.lastTS)
	e.acct.expire(now)
	histHosts := e.hists.hosts()
	for host := range e.backends {
		if _, ok := e.acct.hosts[host]; !ok && !slices.Contains(histHosts, host) {
			delete(e.backends, host)
		}
	}
	if len(gpus) == 0 && len(e.hists.hosts()) == 0 && len(e.acct.hosts) == 0 {
		return 0 // nothing known yet: the next batch tries again
	}
	e.lastEmit = now
	e.gpuSeriesStarts(gpus)
	ts := pcommon.NewTimestampFromTime(now)
	e.lastTS = ts
	slices.SortFunc(gpus, func(a, b gpuBooks) int {
		return cmp.Or(strings.Compare(a.key.Host, b.key.Host), strings.Compare(a.backend, b.backend), strings.Compare(a.key.GPU, b.key.GPU))
	})
	trackers := map[timeline.Key]*analysis.Tracker{}
	e.analysis.read(e.store, func(k timeline.Key, t *analysis.Tracker) { trackers[k] = t })
	for i := 0; i < len(gpus); {
		j := i
		for j < len(gpus) && gpus[j].key.Host == gpus[i].key.Host && gpus[j].backend == gpus[i].backend {
			e.recordGPU(ts, gpus[j], trackers[gpus[j].key])
			j++
		}
		rb := e.mb.NewResourceBuilder()
		if gpus[i].key.Host != "" {
			rb.SetHostName(gpus[i].key.Host)
		}
		if gpus[i].backend != "" {
			rb.SetGpuvizBackend(gpus[i].backend)
		}
		e.mb.EmitForResource(metadata.WithResource(rb.Emit()))
		i = j
	}
	out := e.mb.Emit()
	e.restart(out)
	n := e.attachExemplars(out)
	// Histograms and accounting counters go on their host's resource,
	// marked with every backend its GPUs and requests came from (a resource
	// of their own if a host's GPUs came from two: simulated energy in a
	// host's sums is not marked nvml alone).
	hostBackends := map[string]string{}
	for _, g := range gpus {
		hostBackends[g.key.Host] = unionBackends(hostBackends[g.key.Host], g.backend)
	}
	for host, b := range e.backends {
		hostBackends[host] = unionBackends(hostBackends[host], b)
	}
	byHost := map[string]pmetric.MetricSlice{}
	rms := out.ResourceMetrics()
	for i := range rms.Len() {
		attrs := rms.At(i).Resource().Attributes()
		host := stringAttr(attrs, "host.name")
		if _, ok := byHost[host]; !ok && rms.At(i).ScopeMetrics().Len() > 0 && stringAttr(attrs, attrBackend) == hostBackends[host] {
			byHost[host] = rms.At(i).ScopeMetrics().At(0).Metrics()
		}
	}
	hostMetrics := func(host string) pmetric.MetricSlice {
		ms, ok := byHost[host]
		if !ok {
			rm := rms.AppendEmpty()
			if host != "" {
				rm.Resource().Attributes().PutStr("host.name", host)
			}
			if b := hostBackends[host]; b != "" {
				rm.Resource().Attributes().PutStr(attrBackend, b)
			}
			sm := rm.ScopeMetrics().AppendEmpty()
			sm.Scope().SetName(metadata.ScopeName)
			ms = sm.Metrics()
			byHost[host] = ms
		}
		return ms
	}
	for _, host := range e.hists.hosts() {
		n += e.hists.appendTo(hostMetrics(host), host, ts)
	}
	for _, host := range e.acct.hostNames() {
		e.acct.appendTo(hostMetrics(host), host, ts)
	}
	clear(e.exemplars)
	rms.MoveAndAppendTo(md.ResourceMetrics())
	return n
}

// dropExemplars forgets the exemplars of spans that no backend will have
// (the next consumer refused them for good); their requests stay counted:
// their GPUs drew the energy.
func (e *emitter) dropExemplars(spans map[pcommon.SpanID]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hists.dropExemplars(spans)
	for _, byLabel := range e.exemplars {
		for l := range byLabel {
			byLabel[l] = withoutSpans(byLabel[l], spans)
		}
	}
}

// gpuSeries is one GPU's cumulative series as the last flush sent them.
type gpuSeries struct {
	start    pcommon.Timestamp
	measured float64 // the books' measured energy, which only grows
}

// gpuSeriesStarts sets each GPU's series start: the builder's for a GPU
// flushed since, the last flush's for one new since it or whose books
// started over (forgotten when quiet and seen again: their totals went
// back), so that a cumulative series that restarts says so. GPUs without
// books are let go.
func (e *emitter) gpuSeriesStarts(gpus []gpuBooks) {
	seen := make(map[timeline.Key]bool, len(gpus))
	for _, g := range gpus {
		seen[g.key] = true
		s, ok := e.gpuSeries[g.key]
		if !ok || g.totals.Measured < s.measured {
			s.start = e.lastTS
		}
		s.measured = g.totals.Measured
		e.gpuSeries[g.key] = s
	}
	for k := range e.gpuSeries {
		if !seen[k] {
			delete(e.gpuSeries, k)
		}
	}
}

// restart stamps the GPU series of out that did not start with the
// builder (gpuSeriesStarts) with their own start.
func (e *emitter) restart(out pmetric.Metrics) {
	later := false
	for _, s := range e.gpuSeries {
		later = later || s.start != e.start
	}
	if !later {
		return
	}
	rms := out.ResourceMetrics()
	for i := range rms.Len() {
		host, _ := rms.At(i).Resource().Attributes().Get("host.name")
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if ms.At(j).Type() != pmetric.MetricTypeSum {
				continue
			}
			dps := ms.At(j).Sum().DataPoints()
			for d := range dps.Len() {
				dp := dps.At(d)
				id, _ := dp.Attributes().Get("hw.id")
				if s, ok := e.gpuSeries[timeline.Key{Host: host.Str(), GPU: id.Str()}]; ok && s.start != e.start {
					dp.SetStartTimestamp(s.start)
				}
			}
		}
	}
}

// recordGPU records one GPU's points.
func (e *emitter) recordGPU(ts pcommon.Timestamp, g gpuBooks, tracker *analysis.Tracker) {
	id := g.key.GPU
	for _, label := range bottleneck.Labels {
		attr := metadata.MapAttributeBottleneck[string(label)]
		e.mb.RecordGpuvizGpuBottleneckTimeDataPoint(ts, g.totals.Seconds.Of(label), id, attr)
		e.mb.RecordGpuvizGpuBottleneckStateDataPoint(ts, boolInt(g.current == label), id, attr)
	}
	e.mb.RecordGpuvizGpuEnergyDataPoint(ts, g.totals.Attributed, id, metadata.AttributeEnergyUseRequests)
	e.mb.RecordGpuvizGpuEnergyDataPoint(ts, g.totals.Idle, id, metadata.AttributeEnergyUseIdle)
	e.mb.RecordGpuvizGpuEnergyDataPoint(ts, g.totals.Unsampled, id, metadata.AttributeEnergyUseUnsampled)
	e.mb.RecordGpuvizGpuEnergyCorrectionDataPoint(ts, g.totals.Correction, id)
	if tracker == nil {
		return
	}
	for sig := range analysis.NumSignals {
		if attr, ok := metadata.MapAttributeSignal[sig.String()]; ok {
			e.mb.RecordGpuvizGpuAnomalyDataPoint(ts, boolInt(tracker.Anomalous(sig)), id, attr)
		}
	}
	current := tracker.Pattern()
	for _, p := range analysis.Patterns {
		e.mb.RecordGpuvizGpuLoadPatternDataPoint(ts, boolInt(current == p), id, metadata.MapAttributeLoadPattern[string(p)])
	}
}

// attachExemplars puts the requests kept since the last flush on their
// GPU's bottleneck-time points.
func (e *emitter) attachExemplars(md pmetric.Metrics) int64 {
	var n int64
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		host := stringAttr(rms.At(i).Resource().Attributes(), "host.name")
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				if m.Name() != "gpuviz.gpu.bottleneck.time" {
					continue
				}
				dps := m.Sum().DataPoints()
				for d := range dps.Len() {
					dp := dps.At(d)
					key := timeline.Key{Host: host, GPU: stringAttr(dp.Attributes(), "hw.id")}
					label := bottleneck.Label(stringAttr(dp.Attributes(), attrBottleneck))
					if l, byLabel := bottleneck.Index(label), e.exemplars[key]; l >= 0 && byLabel != nil {
						n += putExemplars(dp.Exemplars(), byLabel[l], dp.StartTimestamp(), dp.Timestamp())
					}
				}
			}
		}
	}
	return n
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// flushed is what one flush of the derived metrics did, for the
// processor's own metrics.
type flushed struct {
	exemplars                   int64 // attached
	foldedModels, foldedTenants int64 // requests counted under "other"
}

// flush appends the derived metrics to md when due, with every GPU's books
// as books returns them then.
func (e *emitter) flush(md pmetric.Metrics, now time.Time, books func() []gpuBooks) flushed {
	if !e.due(now) {
		return flushed{}
	}
	f := flushed{exemplars: e.emit(md, now, books())}
	f.foldedModels, f.foldedTenants = e.takeFolded()
	return f
}

// takeFolded returns the requests counted under "other" since it was last
// called, by model and by tenant.
func (e *emitter) takeFolded() (models, tenants int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	models, tenants = e.foldedModels, e.foldedTenants
	e.foldedModels, e.foldedTenants = 0, 0
	return models, tenants
}
