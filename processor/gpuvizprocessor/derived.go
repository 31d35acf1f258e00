package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// Derived metric names. Everything the processor adds is under gpuviz.;
// the processor README documents each.
const (
	metricBottleneckTime  = "gpuviz.gpu.bottleneck.time"
	metricBottleneckState = "gpuviz.gpu.bottleneck.state"
	metricAnomaly         = "gpuviz.gpu.anomaly"
	metricLoadPattern     = "gpuviz.gpu.load_pattern"
	metricRequestEnergy   = "gpuviz.request.energy"
	metricRequestPerToken = "gpuviz.request.energy_per_output_token"
	metricRequestBusy     = "gpuviz.request.gpu_busy_time"
	scopeName             = "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"
	otherModel            = "other"
)

// Histogram bucket bounds. Energy: a short chat completion on one H100
// costs a few J, a long generation on 8 GPUs thousands. Per token: tens of
// mJ to a few J. Busy time: tens of ms to minutes.
var (
	energyBounds   = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}
	perTokenBounds = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}
	busyBounds     = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120}
)

const (
	// recentPerGPU bounds the requests remembered per GPU: for requests in
	// flight when classifying its intervals, and for exemplars.
	recentPerGPU = 256
	// exemplarsPerSeries bounds the exemplars kept on each derived series.
	exemplarsPerSeries = 4
)

type exemplar struct {
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
	ts      time.Time
	value   float64
}

type recentRequest struct {
	window  attribution.Window
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
}

// gpuDerived is what the derived metrics keep per GPU.
type gpuDerived struct {
	classifiedTo time.Time
	seconds      map[bottleneck.Label]float64
	exemplars    map[bottleneck.Label][]exemplar
	current      bottleneck.Label
	recent       []recentRequest // ring
	recentNext   int
	tracker      *analysis.Tracker
	memUsed      float64
	memLimit     float64
	// PCIe counter and link state, to derive rates and capacity.
	ioPrev         [2]ioPoint
	linkGen, width float64
	// Cumulative throttle times per reason, and per group where the last
	// share was measured from.
	throttleTotals [numThrottleGroups][throttleSlots]ioPoint
	throttlePrev   [numThrottleGroups]ioPoint
}

// minThrottleInterval is the shortest interval a throttled share is
// measured over: the reasons of one NVML call carry timestamps a few µs
// apart, and those are one reading, not intervals of their own.
const minThrottleInterval = 10 * time.Millisecond

type ioPoint struct {
	ts    time.Time
	total float64
	ok    bool
}

// histKey keeps requests apart by the host of their GPUs (a gateway joins
// many hosts, and the Prometheus exporter tells series apart by their
// attributes alone), model and bottleneck.
type histKey struct{ host, model, label string }

type histogram struct {
	bounds    []float64
	counts    []uint64
	count     uint64
	sum       float64
	exemplars []exemplar
}

// derived holds the state of the derived metrics.
type derived struct {
	c     *core
	start time.Time

	mu       sync.Mutex
	gpus     map[timeline.Key]*gpuDerived
	hists    [3]map[histKey]*histogram // energy, per token, busy
	models   map[string]bool
	lastEmit time.Time
}

func newDerived(c *core) *derived {
	d := &derived{c: c, start: c.now(), gpus: map[timeline.Key]*gpuDerived{}, models: map[string]bool{}}
	for i := range d.hists {
		d.hists[i] = map[histKey]*histogram{}
	}
	return d
}

// gpu returns k's state, creating it; the caller holds d.mu. It is bounded
// by the timeline: state of GPUs the timeline forgot is dropped at emission.
func (d *derived) gpu(k timeline.Key) *gpuDerived {
	g := d.gpus[k]
	if g == nil {
		g = &gpuDerived{seconds: map[bottleneck.Label]float64{}, exemplars: map[bottleneck.Label][]exemplar{}}
		if d.c.cfg.Analysis.Enabled {
			g.tracker = analysis.NewTracker(d.c.cfg.analysis())
		}
		d.gpus[k] = g
	}
	return g
}

// observe feeds the streaming analysis.
func (d *derived) observe(k timeline.Key, sig timeline.Signal, ts time.Time, v float64) {
	if !d.c.cfg.Analysis.Enabled {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gpu(k)
	switch sig {
	case timeline.MemoryUsed:
		g.memUsed = v
		if g.memLimit > 0 {
			g.tracker.Observe(analysis.MemoryUsed, ts, g.memUsed/g.memLimit)
		}
	case timeline.MemoryLimit:
		g.memLimit = v
	default:
		if a, ok := analysisSignal(sig); ok {
			g.tracker.Observe(a, ts, v)
		}
	}
}

// counterRate turns successive values of a cumulative byte counter into a
// rate; false for the first value and for a counter reset.
func (d *derived) counterRate(k timeline.Key, dir string, ts time.Time, total float64) (float64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := 0
	if dir == "transmit" {
		i = 1
	}
	g := d.gpu(k)
	prev := g.ioPrev[i]
	g.ioPrev[i] = ioPoint{ts: ts, total: total, ok: true}
	if !prev.ok || !ts.After(prev.ts) || total < prev.total {
		return 0, false
	}
	return (total - prev.total) / ts.Sub(prev.ts).Seconds(), true
}

// setThrottleTotal takes one cumulative throttle time.
func (d *derived) setThrottleTotal(p throttleTime) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := &d.gpu(p.key).throttleTotals[p.reason][p.slot]
	if !t.ok || p.ts.After(t.ts) { // a late batch's older point changes nothing
		*t = ioPoint{ts: p.ts, total: p.total, ok: true}
	}
}

// throttleShare returns the share of the interval from the group's
// previous measurement to ts that the clocks were held for the group's
// reasons, and makes ts the group's latest measurement.
func (d *derived) throttleShare(k timeline.Key, group throttleGroup, ts time.Time) (float64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gpu(k)
	var total float64
	for _, t := range g.throttleTotals[group] {
		total += t.total
	}
	prev := &g.throttlePrev[group]
	if prev.ok && !ts.After(prev.ts) { // a late batch: that time is measured already
		return 0, false
	}
	last := *prev
	*prev = ioPoint{ts: ts, total: total, ok: true}
	if !last.ok || total < last.total { // first, or the driver reloaded
		return 0, false
	}
	return min((total-last.total)/ts.Sub(last.ts).Seconds(), 1), true
}

// throttleMeasured reports whether GPU k reports throttle times, whose
// shares replace the 0/1 throttle flags.
func (d *derived) throttleMeasured(k timeline.Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gpus[k]
	return g != nil && (g.throttlePrev[throttlePower].ok || g.throttlePrev[throttleThermal].ok)
}

// linkCapacity combines the current PCIe generation and width into bytes
// per second per direction, once both are known.
func (d *derived) linkCapacity(k timeline.Key, name string, v float64) (float64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gpu(k)
	if name == "nvidia.gpu.pcie.link.generation" {
		g.linkGen = v
	} else {
		g.width = v
	}
	gen := int(g.linkGen)
	if gen < 1 || gen >= len(pcieLaneBytesPerSecond) || g.width <= 0 {
		return 0, false
	}
	return pcieLaneBytesPerSecond[gen] * g.width, true
}

// recordRequest remembers an enriched request for the per-GPU bottleneck
// exemplars and records it in the request histograms.
func (d *derived) recordRequest(ctx context.Context, e *enriched, label bottleneck.Label, busy, perToken float64) {
	if !d.c.cfg.Metrics.Enabled {
		return
	}
	span := e.hs.span
	req := e.hs.req
	rr := recentRequest{window: attribution.Span(req.Start, req.End), traceID: span.TraceID(), spanID: span.SpanID()}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range e.keys {
		g := d.gpu(k)
		if len(g.recent) < recentPerGPU {
			g.recent = append(g.recent, rr)
		} else {
			g.recent[g.recentNext] = rr
			g.recentNext = (g.recentNext + 1) % recentPerGPU
		}
	}
	model := req.Model
	if model == "" {
		model = "unknown"
	}
	if !d.models[model] {
		if len(d.models) >= d.c.cfg.Metrics.MaxModels {
			model = otherModel
		} else {
			d.models[model] = true
		}
	}
	hk := histKey{host: e.keys[0].Host, model: model, label: string(label)}
	ex := exemplar{traceID: rr.traceID, spanID: rr.spanID, ts: req.End}
	if e.energyKnown {
		d.observeHist(0, hk, energyBounds, e.energy, ex)
		if req.OutputTokens > 0 {
			d.observeHist(1, hk, perTokenBounds, perToken, ex)
		}
	}
	d.observeHist(2, hk, busyBounds, busy, ex)
}

func (d *derived) observeHist(i int, k histKey, bounds []float64, v float64, ex exemplar) {
	h := d.hists[i][k]
	if h == nil {
		h = &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
		d.hists[i][k] = h
	}
	b, _ := slices.BinarySearch(bounds, v)
	h.counts[b]++
	h.count++
	h.sum += v
	ex.value = v
	h.exemplars = pushExemplar(h.exemplars, ex)
}

func pushExemplar(list []exemplar, ex exemplar) []exemplar {
	if len(list) < exemplarsPerSeries {
		return append(list, ex)
	}
	copy(list, list[1:])
	list[len(list)-1] = ex
	return list
}

// classify brings each GPU's bottleneck time up to date. It stops
// max_wait short of the newest sample, so that the spans of requests that
// ran then have arrived and count as in flight (the difference between
// idle and host_bound).
func (d *derived) classify() {
	var ivs []timeline.Interval
	for k, g := range d.gpus {
		newest, ok := d.c.store.Newest(k)
		if !ok {
			delete(d.gpus, k) // the timeline forgot this GPU
			continue
		}
		to := newest.Add(-d.c.cfg.MaxWait)
		from := g.classifiedTo
		if from.IsZero() {
			from = to.Add(-d.c.cfg.Metrics.Interval)
		}
		if !to.After(from) {
			continue
		}
		ivs = d.c.store.Intervals(k, from, to, ivs[:0])
		for _, iv := range ivs {
			w := attribution.Span(iv.Start, iv.End)
			var inFlight []recentRequest
			for _, r := range g.recent {
				if attribution.Overlap(w, r.window) > 0 {
					inFlight = append(inFlight, r)
				}
			}
			label := bottleneck.Classify(classifierInputs(iv, len(inFlight)), d.c.thresholds)
			g.seconds[label] += iv.End.Sub(iv.Start).Seconds()
			g.current = label
			for _, r := range inFlight {
				g.exemplars[label] = pushExemplar(g.exemplars[label], exemplar{traceID: r.traceID, spanID: r.spanID, ts: iv.End, value: iv.End.Sub(iv.Start).Seconds()})
			}
		}
		g.classifiedTo = to
	}
}

// appendTo adds the derived metrics to a batch passing through, at most
// once per metrics.interval.
func (d *derived) appendTo(ctx context.Context, md pmetric.Metrics, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.lastEmit) < d.c.cfg.Metrics.Interval {
		return
	}
	d.lastEmit = now
	d.classify()
	start := pcommon.NewTimestampFromTime(d.start)
	ts := pcommon.NewTimestampFromTime(now)
	var exemplars int64

	byHost := map[string][]timeline.Key{}
	for k := range d.gpus {
		byHost[k.Host] = append(byHost[k.Host], k)
	}
	for _, hists := range d.hists {
		for k := range hists {
			if _, ok := byHost[k.host]; !ok {
				byHost[k.host] = nil
			}
		}
	}
	hosts := slices.Sorted(maps.Keys(byHost))
	for _, host := range hosts {
		keys := byHost[host]
		slices.SortFunc(keys, func(a, b timeline.Key) int { return strings.Compare(a.GPU, b.GPU) })
		rm := md.ResourceMetrics().AppendEmpty()
		if host != "" {
			rm.Resource().Attributes().PutStr("host.name", host)
		}
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(scopeName)
		ms := sm.Metrics()

		timeM := ms.AppendEmpty()
		timeM.SetName(metricBottleneckTime)
		timeM.SetDescription("Time each GPU spent in each bottleneck state (classified per sample interval), with exemplars of the requests in flight.")
		timeM.SetUnit("s")
		sum := timeM.SetEmptySum()
		sum.SetIsMonotonic(true)
		sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)

		stateM := ms.AppendEmpty()
		stateM.SetName(metricBottleneckState)
		stateM.SetDescription("The bottleneck of each GPU's latest classified interval: 1 for the current label, 0 for the others.")
		stateM.SetUnit("1")
		state := stateM.SetEmptyGauge()

		for _, k := range keys {
			g := d.gpus[k]
			for _, label := range bottleneck.Labels {
				dp := sum.DataPoints().AppendEmpty()
				dp.SetStartTimestamp(start)
				dp.SetTimestamp(ts)
				dp.Attributes().PutStr("hw.id", k.GPU)
				dp.Attributes().PutStr(attrBottleneck, string(label))
				dp.SetDoubleValue(g.seconds[label])
				exemplars += putExemplars(dp.Exemplars(), g.exemplars[label])

				st := state.DataPoints().AppendEmpty()
				st.SetTimestamp(ts)
				st.Attributes().PutStr("hw.id", k.GPU)
				st.Attributes().PutStr(attrBottleneck, string(label))
				st.SetIntValue(boolInt(g.current == label))
			}
		}
		if d.c.cfg.Analysis.Enabled {
			d.appendAnalysis(ms, keys, ts)
		}
		exemplars += appendHistograms(ms, host, metricRequestEnergy, "GPU energy attributed to each inference request.", "J", d.hists[0], start, ts)
		exemplars += appendHistograms(ms, host, metricRequestPerToken, "GPU energy per output token of each inference request.", "J/{token}", d.hists[1], start, ts)
		exemplars += appendHistograms(ms, host, metricRequestBusy, "GPU-busy seconds of each inference request (utilisation × time, summed over its GPUs).", "s", d.hists[2], start, ts)
	}
	if exemplars > 0 {
		d.c.tel.ProcessorGpuvizExemplarsAttached.Add(ctx, exemplars)
	}
}

func (d *derived) appendAnalysis(ms pmetric.MetricSlice, keys []timeline.Key, ts pcommon.Timestamp) {
	anomM := ms.AppendEmpty()
	anomM.SetName(metricAnomaly)
	anomM.SetDescription("1 when the GPU's latest utilisation, memory or PCIe reading lies beyond analysis.z_threshold standard deviations of its rolling window.")
	anomM.SetUnit("1")
	anom := anomM.SetEmptyGauge()
	patM := ms.AppendEmpty()
	patM.SetName(metricLoadPattern)
	patM.SetDescription("The GPU's load pattern over the analysis window, from the mean and coefficient of variation of utilisation: 1 for the current pattern.")
	patM.SetUnit("1")
	pat := patM.SetEmptyGauge()
	for _, k := range keys {
		g := d.gpus[k]
		if g.tracker == nil {
			continue
		}
		for sig := range analysis.NumSignals {
			dp := anom.DataPoints().AppendEmpty()
			dp.SetTimestamp(ts)
			dp.Attributes().PutStr("hw.id", k.GPU)
			dp.Attributes().PutStr("gpuviz.signal", sig.String())
			dp.SetIntValue(boolInt(g.tracker.Anomalous(sig)))
		}
		current := g.tracker.Pattern()
		for _, p := range analysis.Patterns {
			dp := pat.DataPoints().AppendEmpty()
			dp.SetTimestamp(ts)
			dp.Attributes().PutStr("hw.id", k.GPU)
			dp.Attributes().PutStr("gpuviz.load_pattern", string(p))
			dp.SetIntValue(boolInt(current == p))
		}
	}
}

// appendHistograms adds a request histogram's series of one host.
func appendHistograms(ms pmetric.MetricSlice, host, name, desc, unit string, hists map[histKey]*histogram, start, ts pcommon.Timestamp) int64 {
	var keys []histKey
	for k := range hists {
		if k.host == host {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return 0
	}
	m := ms.AppendEmpty()
	m.SetName(name)
	m.SetDescription(desc)
	m.SetUnit(unit)
	h := m.SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	slices.SortFunc(keys, func(a, b histKey) int {
		if c := strings.Compare(a.model, b.model); c != 0 {
			return c
		}
		return strings.Compare(a.label, b.label)
	})
	var n int64
	for _, k := range keys {
		hist := hists[k]
		dp := h.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(start)
		dp.SetTimestamp(ts)
		dp.Attributes().PutStr("gen_ai.request.model", k.model)
		dp.Attributes().PutStr(attrBottleneck, k.label)
		dp.ExplicitBounds().FromRaw(hist.bounds)
		dp.BucketCounts().FromRaw(hist.counts)
		dp.SetCount(hist.count)
		dp.SetSum(hist.sum)
		n += putExemplars(dp.Exemplars(), hist.exemplars)
	}
	return n
}

func putExemplars(dst pmetric.ExemplarSlice, list []exemplar) int64 {
	for _, ex := range list {
		e := dst.AppendEmpty()
		e.SetTimestamp(pcommon.NewTimestampFromTime(ex.ts))
		e.SetTraceID(ex.traceID)
		e.SetSpanID(ex.spanID)
		e.SetDoubleValue(ex.value)
	}
	return int64(len(list))
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
