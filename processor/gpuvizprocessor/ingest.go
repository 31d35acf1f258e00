package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/internal/view"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// point is one GPU data point as the handlers see it.
type point struct {
	key   timeline.Key
	attrs pcommon.Map
	ts    time.Time
	v     float64
}

// handler learns one metric's points.
type handler func(in *ingest, b *ingestBatch, p point)

// gauge feeds a signal straight from a metric.
func gauge(sig timeline.Signal) handler {
	return func(in *ingest, b *ingestBatch, p point) { b.add(p.key, sig, p.ts, p.v) }
}

// gpm feeds a GPM reading of one of the series gpmLag reads, stamped at
// when it describes the GPU.
func gpm(sig timeline.Signal, series int) handler {
	return func(in *ingest, b *ingestBatch, p point) {
		ts := p.ts
		if in.alignGPM {
			g := b.state(p.key)
			g.gpm.read(series, ts, p.v)
			ts = g.gpm.stamp(ts)
		}
		b.add(p.key, sig, ts, p.v)
	}
}

// handlers is the one table from a GPU metric's name to what it means for
// the timeline: this half has the gpuviz receiver's names (keyed by hw.id),
// dcgm.go's dcgmHandlers dcgm-exporter's (keyed by the UUID label). The
// receiver's sub-second samples feed the same signals as its scrape-time
// readings: both are averages over the period before their timestamp.
var handlers = map[string]handler{
	"hw.gpu.utilization": func(in *ingest, b *ingestBatch, p point) {
		if task := stringAttr(p.attrs, "hw.gpu.task"); task == "general" || task == "" {
			b.add(p.key, timeline.Utilization, p.ts, p.v)
		}
	},
	"nvidia.gpu.samples.utilization":                   gauge(timeline.Utilization),
	"nvidia.gpu.memory_controller.utilization":         gauge(timeline.MemoryController),
	"nvidia.gpu.samples.memory_controller.utilization": gauge(timeline.MemoryController),
	"nvidia.gpu.sm.activity":                           gpm(timeline.SMActivity, gpmSM),
	"nvidia.gpu.tensor.activity":                       gpm(timeline.TensorActivity, gpmTensor),
	"nvidia.gpu.dram.activity":                         gpm(timeline.DRAMActivity, gpmDRAM),
	// The driver's power samples, where a GPU sends them, are finer than
	// the tick's power readings (every 20 ms, against one 20 ms reading
	// every tick on an H200): while they come, the GPU's power comes from
	// them alone, and the tick's readings count again once none has come
	// for in.supersede (history.max_span).
	"hw.power": func(in *ingest, b *ingestBatch, p point) {
		if at := b.state(p.key).powerSamplesAt; at == 0 || p.ts.UnixNano()-at >= int64(in.supersede) {
			b.add(p.key, timeline.Power, p.ts, p.v)
		}
	},
	"nvidia.gpu.samples.power": func(in *ingest, b *ingestBatch, p point) {
		g := b.state(p.key)
		g.powerSamplesAt = max(g.powerSamplesAt, p.ts.UnixNano())
		b.add(p.key, timeline.Power, p.ts, p.v)
		if in.alignGPM {
			g.gpm.sampled(p.ts, p.v)
			if b.lagDue == nil {
				b.lagDue = map[timeline.Key]bool{}
			}
			b.lagDue[p.key] = true
		}
	},
	"hw.gpu.memory.usage": gauge(timeline.MemoryUsed),
	"hw.gpu.memory.limit": gauge(timeline.MemoryLimit),
	"hw.energy": func(in *ingest, b *ingestBatch, p point) {
		b.energyFrom(sourceReceiver, p.key, p.ts, p.v)
	},
	"hw.gpu.io": func(in *ingest, b *ingestBatch, p point) {
		dir := stringAttr(p.attrs, "network.io.direction")
		if rate, ok := in.state(p.key).ioRate(dir, p.ts, p.v); ok {
			b.add(p.key, directional(dir, timeline.PCIeRx, timeline.PCIeTx), p.ts, rate)
		}
	},
	"nvidia.gpu.pcie.throughput": func(in *ingest, b *ingestBatch, p point) {
		sig, ts := directional(stringAttr(p.attrs, "network.io.direction"), timeline.PCIeRx, timeline.PCIeTx), p.ts
		if in.alignGPM {
			ts = b.state(p.key).gpm.stamp(ts)
		}
		b.add(p.key, sig, ts, p.v)
	},
	"nvidia.gpu.nvlink.throughput": func(in *ingest, b *ingestBatch, p point) {
		b.add(p.key, directional(stringAttr(p.attrs, "network.io.direction"), timeline.NVLinkRx, timeline.NVLinkTx), p.ts, p.v)
	},
	"nvidia.gpu.nvlink.capacity":      gauge(timeline.NVLinkCapacity),
	"nvidia.gpu.pcie.link.generation": pcieLink(func(g *gpuIngest, v float64) { g.linkGen = v }),
	"nvidia.gpu.pcie.link.width":      pcieLink(func(g *gpuIngest, v float64) { g.width = v }),
	"nvidia.gpu.throttle.active": func(in *ingest, b *ingestBatch, p point) {
		b.throttleFlag(p.key, p.ts, stringAttr(p.attrs, "nvidia.gpu.throttle.reason"), p.v != 0)
	},
	"nvidia.gpu.throttle.time": func(in *ingest, b *ingestBatch, p point) {
		if group, slot, ok := throttleReasonGroup(stringAttr(p.attrs, "nvidia.gpu.throttle.reason")); ok {
			b.throttleTimes = append(b.throttleTimes, throttleTime{key: p.key, ts: p.ts, reason: group, slot: slot, total: p.v})
		}
	},
	// A GPU the receiver reports failed (lost, or gone while it resets)
	// sends no data: spans do not wait for it (hold.ready), unless it
	// still does (a failed row remap is failed too: answering).
	"hw.status": func(in *ingest, b *ingestBatch, p point) {
		if p.v != 1 {
			return
		}
		g := b.state(p.key)
		if stringAttr(p.attrs, "hw.state") != "failed" {
			g.failed = false
		} else if !g.failed {
			g.failed, g.failedSince = true, p.ts.UnixNano()
		}
	},
	"nvidia.gpu.info": func(in *ingest, b *ingestBatch, p point) {
		index := -1
		if idx, ok := p.attrs.Get("nvidia.gpu.index"); ok && idx.Type() == pcommon.ValueTypeInt {
			index = int(idx.Int())
			in.store.SetIndex(p.key, index)
		}
		if v := in.viewOf(p.key); v != nil {
			v.info(p.key, index, stringAttr(p.attrs, "hw.model"))
		}
	},
	// Read for the live view only (view.go).
	"hw.temperature":              viewTemperature,
	"nvidia.gpu.clock.frequency":  viewClock,
	"nvidia.gpu.samples.sm_clock": viewGauge(view.SMClock, 1e-6),
	"nvidia.gpu.power.limit": func(in *ingest, b *ingestBatch, p point) {
		in.store.SetPowerLimit(p.key, p.v)
		viewPowerLimit(in, b, p)
	},
	// A process's memory where NVML can tell it, its utilisation where
	// NVML samples it: either says it ran there.
	"nvidia.gpu.process.memory.usage": processSighting,
	"nvidia.gpu.process.utilization":  processSighting,
	"nvidia.gpu.k8s.allocation": func(in *ingest, b *ingestBatch, p point) {
		in.store.SetPod(p.key, podOf(p.attrs), p.ts)
	},
	"nvidia.gpu.slurm.job": func(in *ingest, b *ingestBatch, p point) {
		in.store.SetSlurmJob(p.key, stringAttr(p.attrs, inference.SlurmJobIDAttribute), p.ts)
	},
}

// processSighting records that a process (its pid, pod and Slurm job) ran
// on the point's GPU at its time.
func processSighting(in *ingest, _ *ingestBatch, p point) {
	if pid, ok := p.attrs.Get("process.pid"); ok && pid.Type() == pcommon.ValueTypeInt {
		in.store.SetProcess(p.key, pid.Int(), p.ts)
	}
	in.store.SetPod(p.key, podOf(p.attrs), p.ts)
	in.store.SetSlurmJob(p.key, stringAttr(p.attrs, inference.SlurmJobIDAttribute), p.ts)
}

// podOf reads the pod a point names: k8s.pod.uid, k8s.namespace.name and
// k8s.pod.name, each where present.
func podOf(attrs pcommon.Map) timeline.Pod {
	return timeline.Pod{
		UID: stringAttr(attrs, "k8s.pod.uid"), Namespace: stringAttr(attrs, "k8s.namespace.name"),
		Name: stringAttr(attrs, "k8s.pod.name"),
	}
}

// pcieLink handles the current link's generation or width (set) and
// feeds the link's capacity once both are known.
func pcieLink(set func(*gpuIngest, float64)) handler {
	return func(in *ingest, b *ingestBatch, p point) {
		if stringAttr(p.attrs, "nvidia.gpu.pcie.link.kind") != "current" {
			return
		}
		g := in.state(p.key)
		set(g, p.v)
		if capacity, ok := g.linkCapacity(); ok {
			b.add(p.key, timeline.PCIeCapacity, p.ts, capacity)
		}
	}
}

// pcieLaneBytesPerSecond is one PCIe lane's usable bandwidth per direction,
// by generation (after line encoding): what a link's capacity is made of.
var pcieLaneBytesPerSecond = [...]float64{0, 250e6, 500e6, 985e6, 1969e6, 3938e6, 7563e6}

// ingest is the metrics side's reader: it learns the timeline from the GPU
// metrics passing through (which it never changes), with the little state
// counters need to become rates, and which backend each GPU's data came
// from.
type ingest struct {
	store    *timeline.Store
	analysis *gpuAnalysis
	tel      telemetry
	// supersede is how long a signal the gpuviz receiver sent keeps DCGM's
	// points of it out: history.max_span, the longest a sample describes.
	supersede time.Duration
	// alignGPM is history.align_gpm: stamp GPM readings back by the lag
	// their GPU's power edges show (gpmLag).
	alignGPM bool
	// now is the processor's clock; a point stamped later than now +
	// maxFuture is refused, as a span ending then is: one host's clock
	// ahead must not move every GPU's books (they share one window).
	now       func() time.Time
	maxFuture time.Duration

	maxGPUs int // history.max_gpus: gpus holds no more

	mu    sync.Mutex
	gpus  map[timeline.Key]*gpuIngest
	spare gpuIngest // the state of GPUs past maxGPUs (state)
	view  *viewSink // nil: no live view
}

// source is where a GPU's points came from.
type source uint8

const (
	sourceReceiver source = iota // the gpuviz receiver (hw.*, nvidia.gpu.*)
	sourceDCGM                   // dcgm-exporter through the prometheus receiver (DCGM_FI_*)
)

// energySlot stands for the energy counter in per-signal arrays.
const energySlot = timeline.NumSignals

// gpuIngest is what turning one GPU's counters into rates needs.
type gpuIngest struct {
	backend string // the receiver's gpuviz.backend
	failed  bool   // the receiver's latest hw.status says failed
	// failedSince is when the receiver's hw.status first said failed,
	// after it last said otherwise (Unix ns).
	failedSince int64
	// powerSamplesAt is the newest of the driver's power samples the GPU
	// sent (Unix ns; 0: never): they replace its tick's hw.power for
	// in.supersede after it.
	powerSamplesAt int64
	// receiverAt is, per signal (and energySlot), the newest timestamp the
	// gpuviz receiver sent for it: DCGM's points of that signal are
	// superseded for history.max_span after it (see addFrom).
	receiverAt     [timeline.NumSignals + 1]int64 // Unix ns; 0: never
	dcgm           dcgmIngest
	ioPrev         [2]counterPoint
	linkGen, width float64
	// Cumulative throttle times per reason, and per group where the last
	// share was measured from.
	throttleTotals [numThrottleGroups][throttleSlots]counterPoint
	throttlePrev   [numThrottleGroups]counterPoint
	gpm            gpmLag
}

// silent reports whether the receiver reports the GPU failed and has sent
// none of its points stamped after it first did: a lost GPU. A GPU failed
// for its memory (a failed row remap) still sends its data, and is waited
// for.
func (g *gpuIngest) silent() bool {
	if !g.failed {
		return false
	}
	for _, at := range g.receiverAt {
		if at > g.failedSince {
			return false
		}
	}
	return true
}

type counterPoint struct {
	ts    time.Time
	total float64
	ok    bool
}

func newIngest(store *timeline.Store, an *gpuAnalysis, tel telemetry, cfg *Config, now func() time.Time) *ingest {
	return &ingest{
		store: store, analysis: an, tel: tel, supersede: cfg.History.MaxSpan, alignGPM: cfg.History.AlignGPM,
		now: now, maxFuture: cfg.recognizer().MaxFuture, maxGPUs: cfg.History.MaxGPUs,
		gpus: map[timeline.Key]*gpuIngest{},
	}
}

// gpmLags gives each GPU's learned GPM lag (gpmLag), for the GPUs that
// send power samples.
func (in *ingest) gpmLags(yield func(timeline.Key, time.Duration)) {
	if !in.alignGPM {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for k, g := range in.gpus {
		if g.powerSamplesAt != 0 || g.gpm.prefills.ok {
			yield(k, g.gpm.lag)
		}
	}
}

// prefill is a span's prefill on its GPUs, for their GPM lag.
type prefill struct {
	keys       []timeline.Key // a gpuSet's, shared by its spans
	start, end int64          // Unix ns
	tokens     float64
}

// prefilled tells the GPUs' GPM lags when spans say prompts were
// prefilled (prefillLag).
func (in *ingest) prefilled(ps []prefill) {
	if !in.alignGPM || len(ps) == 0 {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	var keys []timeline.Key
	var states []*gpuIngest
	var buf []float32
	for _, p := range ps {
		if len(p.keys) != len(keys) || &p.keys[0] != &keys[0] {
			keys, states = p.keys, states[:0]
			for _, k := range keys {
				states = append(states, in.state(k))
			}
		}
		sp := spreadPrefill(p.start, p.end, p.tokens, buf)
		buf = sp.tokens
		for _, g := range states {
			if !g.gpm.fromEdges { // its lag no longer reads them
				g.gpm.prefills.prefilled(sp)
			}
		}
	}
}

// state returns k's state; the caller holds in.mu.
func (in *ingest) state(k timeline.Key) *gpuIngest {
	g := in.gpus[k]
	if g == nil {
		if len(in.gpus) >= in.maxGPUs {
			// Past history.max_gpus (the timeline refuses its points
			// too, gpu_limit): a scratch state, cleared for each GPU
			// (nothing carries over between them), until forget makes
			// room.
			in.spare = gpuIngest{}
			return &in.spare
		}
		g = &gpuIngest{}
		in.gpus[k] = g
	}
	return g
}

// viewOf is the live view's sink for k's readings: nil without a view, or
// for a GPU ingest does not track (past history.max_gpus), so that the
// sink holds no GPU the timeline cannot.
func (in *ingest) viewOf(k timeline.Key) *viewSink {
	if in.view == nil || in.gpus[k] == nil {
		return nil
	}
	return in.view
}

// answering returns keys without the GPUs the receiver last reported
// failed and sent nothing of since: keys itself when none is.
func (in *ingest) answering(keys []timeline.Key) []timeline.Key {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []timeline.Key
	for i, k := range keys {
		if g := in.gpus[k]; g != nil && g.silent() {
			if out == nil {
				out = append(make([]timeline.Key, 0, len(keys)), keys[:i]...)
			}
			continue
		}
		if out != nil {
			out = append(out, k)
		}
	}
	if out == nil {
		return keys
	}
	return out
}

// dcgmLag says how far DCGM's data has arrived for keys, for the GPUs that
// DCGM feeds signals of beside another source: the earliest of their
// newest DCGM points, and the longest spacing of their last two. A GPU
// whose DCGM points stopped (none within two history.max_span of its
// newest point of any source) is not waited for. False when no GPU of keys
// qualifies. Spans are released once the energy after their end has
// arrived (timeline.Store.Settled); where the gpuviz receiver with
// complement: dcgm gives that energy every tick and DCGM the SM, tensor
// and DRAM activity every 30 s, this holds them for the activity too.
func (in *ingest) dcgmLag(keys []timeline.Key) (time.Time, time.Duration, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var (
		earliest int64
		spacing  time.Duration
		ok       bool
	)
	for _, k := range keys {
		g := in.gpus[k]
		if g == nil || g.dcgm.last == 0 || g.backend == "" {
			continue // no DCGM points, or DCGM alone (its energy settles the GPU)
		}
		newest, has := in.store.Newest(k)
		if !has || newest.UnixNano()-g.dcgm.last > 2*int64(in.supersede) {
			continue
		}
		if !ok || g.dcgm.last < earliest {
			earliest = g.dcgm.last
		}
		if g.dcgm.prev != 0 {
			spacing = max(spacing, time.Duration(g.dcgm.last-g.dcgm.prev))
		}
		ok = true
	}
	return time.Unix(0, earliest).UTC(), spacing, ok
}

// backend returns the backends ("nvml", "simulated", "dcgm", ...) GPU k's
// data came from, sorted and comma-separated ("dcgm,nvml" for a GPU both
// dcgm-exporter and the receiver describe); "" when its metrics did not say.
func (in *ingest) backend(k timeline.Key) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.backendLocked(k)
}

func (in *ingest) backendLocked(k timeline.Key) string {
	g := in.gpus[k]
	switch {
	case g == nil:
		return ""
	case !g.dcgm.seen:
		return g.backend
	case g.backend == "":
		return dcgmBackend
	case g.backend < dcgmBackend:
		return g.backend + "," + dcgmBackend
	}
	return dcgmBackend + "," + g.backend
}

// unionBackends merges comma-separated lists of backends ("dcgm,nvml"),
// sorted, each once.
func unionBackends(a, b string) string {
	if a == b || b == "" {
		return a
	}
	if a == "" {
		return b
	}
	names := strings.Split(a, ",")
	for n := range strings.SplitSeq(b, ",") {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// forget drops the state of GPUs the timeline forgot.
func (in *ingest) forget() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for k := range in.gpus {
		if _, ok := in.store.Newest(k); !ok {
			delete(in.gpus, k)
		}
	}
}

// ingestBatch is one batch of metrics on its way into the timeline.
type ingestBatch struct {
	in *ingest
	// latest is the latest timestamp a point may have (ingest.now).
	latest   time.Time
	learned  int64
	refused  map[string]int64
	throttle map[throttleKey]*throttleFlags
	// throttleTimes are the batch's cumulative throttle times, turned into
	// measured throttled shares once the whole batch is read.
	throttleTimes []throttleTime
	observed      []analysisPoint
	// pods are the (GPU, pod or Slurm job, time) sightings of this batch's
	// DCGM points already recorded: dcgm-exporter repeats them on every
	// series.
	pods map[podSighting]bool
	// gpuSeries are the GPU's own points (no pod labels) of the batch's
	// per-process DCGM fields (perPodShare).
	gpuSeries map[dcgmSeriesAt]bool
	// lastKey and lastState cache the previous point's GPU state: points
	// come in runs of one GPU.
	lastKey   timeline.Key
	lastState *gpuIngest
	// lagDue are the GPUs that sent power samples: their GPM lag learns
	// once the batch is read, so that a tick's readings share one lag.
	lagDue map[timeline.Key]bool
}

// dcgmSeriesAt is one DCGM field of one GPU at one time.
type dcgmSeriesAt struct {
	key  timeline.Key
	name string
	ts   time.Time
}

// perPodShare reports whether p, of a per-process field, is a pod's share
// of a reading whose GPU's own point (no pod labels) the batch already
// has; it notes the GPU's own points.
func (b *ingestBatch) perPodShare(name string, p point, pod timeline.Pod) bool {
	at := dcgmSeriesAt{key: p.key, name: name, ts: p.ts}
	if !pod.IsZero() {
		return b.gpuSeries[at]
	}
	if b.gpuSeries == nil {
		b.gpuSeries = map[dcgmSeriesAt]bool{}
	}
	b.gpuSeries[at] = true
	return false
}

type podSighting struct {
	key timeline.Key
	pod timeline.Pod
	job string // dcgm-exporter's hpc_job (--hpc-job-mapping-dir): a Slurm job
	ts  time.Time
}

// sightOnce records a DCGM point's pod or job sighting unless the batch
// already has.
func (b *ingestBatch) sightOnce(ps podSighting) {
	if b.pods[ps] {
		return
	}
	if b.pods == nil {
		b.pods = map[podSighting]bool{}
	}
	b.pods[ps] = true
	if ps.job != "" {
		b.in.store.SetSlurmJob(ps.key, ps.job, ps.ts)
	} else {
		b.in.store.SetPod(ps.key, ps.pod, ps.ts)
	}
}

// state is in.state(k) through the batch's one-entry cache; the caller
// holds in.mu.
func (b *ingestBatch) state(k timeline.Key) *gpuIngest {
	if b.lastState == nil || b.lastKey != k {
		b.lastKey, b.lastState = k, b.in.state(k)
	}
	return b.lastState
}

// consume learns a batch of metrics.
func (in *ingest) consume(ctx context.Context, md pmetric.Metrics) {
	in.mu.Lock()
	defer in.mu.Unlock()
	b := ingestBatch{in: in, latest: in.now().Add(in.maxFuture)}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		res := rms.At(i).Resource().Attributes()
		host := stringAttr(res, "host.name")
		backend := stringAttr(res, "gpuviz.backend")
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				b.metric(ms.At(k), host, backend)
			}
		}
	}
	b.throttleShares()
	for tk, st := range b.throttle {
		// Measured shares beat the flags of the moment.
		if tk.src == sourceDCGM && in.state(tk.key).dcgm.measured() || tk.src == sourceReceiver && in.throttleMeasured(tk.key) {
			continue
		}
		b.addFrom(tk.src, tk.key, timeline.PowerThrottled, tk.ts, boolFloat(st.power))
		b.addFrom(tk.src, tk.key, timeline.ThermalThrottled, tk.ts, boolFloat(st.thermal))
	}
	for k := range b.lagDue {
		in.state(k).gpm.learn()
	}
	in.analysis.observe(b.observed)
	in.tel.points(ctx, b.learned, b.refused)
}

func (b *ingestBatch) refuse(reason string) {
	if b.refused == nil {
		b.refused = map[string]int64{}
	}
	b.refused[reason]++
}

// add feeds a point of the gpuviz receiver's.
func (b *ingestBatch) add(k timeline.Key, sig timeline.Signal, ts time.Time, v float64) {
	b.addFrom(sourceReceiver, k, sig, ts, v)
}

// timely reports whether p is stamped at or before latest; it counts a
// point that is not as refused (future). Every point is checked before its
// handler reads it (metric, dcgmPoints): a point far ahead would otherwise
// leave state behind (the newest power sample, throttle or violation
// totals, a GPM reading, a pod sighting) that keeps its GPU's later points
// out, as older, until the clock caught up. What the handlers stamp is
// never later than their point.
func (b *ingestBatch) timely(p point) bool {
	if p.ts.After(b.latest) {
		b.refuse("future")
		return false
	}
	return true
}

// admit applies the sources' precedence, per GPU and signal (a point
// stamped after latest is refused before: timely): the gpuviz receiver's points
// are always taken, and once taken (took) mark the signal as the
// receiver's; DCGM's are taken unless the receiver sent that signal within
// in.supersede before them. So where both describe a GPU, the receiver's
// sub-second signals (driver samples, tick energy and power, GPM) win and
// DCGM fills what the receiver lacks: GPM's activity with complement: dcgm,
// and whatever the receiver's config switched off.
func (b *ingestBatch) admit(src source, k timeline.Key, slot timeline.Signal, ts time.Time) bool {
	if src == sourceReceiver {
		return true
	}
	if at := b.state(k).receiverAt[slot]; at != 0 && ts.UnixNano()-at < int64(b.in.supersede) {
		b.refuse("superseded")
		return false
	}
	return true
}

// took records that the timeline took src's point of slot at ts: a point
// refused (a bad value) neither supersedes DCGM's nor counts as DCGM's.
func (b *ingestBatch) took(src source, k timeline.Key, slot timeline.Signal, ts time.Time) {
	g, t := b.state(k), ts.UnixNano()
	if src == sourceReceiver {
		g.receiverAt[slot] = max(g.receiverAt[slot], t)
		return
	}
	g.dcgm.learned(t)
}

// energyFrom feeds a point of the cumulative energy counter, in joules.
func (b *ingestBatch) energyFrom(src source, k timeline.Key, ts time.Time, joules float64) {
	if !b.admit(src, k, energySlot, ts) {
		return
	}
	if b.in.store.AddEnergy(k, ts, joules) {
		b.took(src, k, energySlot, ts)
		b.learned++
	} else {
		b.unlearned(k, joules)
	}
}

// unlearned counts a point of GPU k with value v the timeline refused: a
// value it cannot hold, a GPU past history.max_gpus, or a point stamped
// before what it keeps of the GPU (history.retention behind its newest
// point, or before any time it can hold).
func (b *ingestBatch) unlearned(k timeline.Key, v float64) {
	_, known := b.in.store.Newest(k)
	switch {
	case !timeline.Representable(v):
		b.refuse("bad_value")
	case !known && b.in.store.Len() >= b.in.maxGPUs:
		b.refuse("gpu_limit")
	default:
		b.refuse("too_old")
	}
}

// addFrom feeds a point of src's, subject to the sources' precedence.
func (b *ingestBatch) addFrom(src source, k timeline.Key, sig timeline.Signal, ts time.Time, v float64) {
	if !b.admit(src, k, sig, ts) {
		return
	}
	if b.in.store.Add(k, sig, ts, v) {
		b.took(src, k, sig, ts)
		b.learned++
		if view := b.in.viewOf(k); view != nil {
			view.sample(k, sig, ts, v)
		}
		if b.in.analysis.wants(sig) {
			b.observed = append(b.observed, analysisPoint{key: k, sig: sig, ts: ts, v: v})
		}
		return
	}
	b.unlearned(k, v)
}

func (b *ingestBatch) metric(m pmetric.Metric, host, backend string) {
	h, src := handlers[m.Name()], sourceReceiver
	if h == nil {
		if h, src = dcgmHandlers[m.Name()], sourceDCGM; h == nil {
			return // not a GPU metric the timeline uses
		}
	}
	var dps pmetric.NumberDataPointSlice
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		dps = m.Gauge().DataPoints()
	case pmetric.MetricTypeSum:
		dps = m.Sum().DataPoints()
	default:
		b.refuse("bad_type")
		return
	}
	if src == sourceDCGM {
		b.dcgmPoints(m.Name(), h, dps, host)
		return
	}
	var last timeline.Key
	for i := range dps.Len() {
		dp := dps.At(i)
		if dp.Flags().NoRecordedValue() {
			continue // a staleness marker: the series went away
		}
		attrs := dp.Attributes()
		id := stringAttr(attrs, "hw.id")
		if id == "" {
			b.refuse("no_hw_id")
			continue
		}
		hst := host
		if hst == "" {
			hst = stringAttr(attrs, "host.name")
		}
		k := timeline.Key{Host: hst, GPU: id}
		p := point{key: k, attrs: attrs, ts: dp.Timestamp().AsTime(), v: numberValue(dp)}
		if !b.timely(p) {
			continue
		}
		if backend != "" && k != last {
			b.state(k).backend = backend
			if v := b.in.viewOf(k); v != nil {
				v.backend(k, backend)
			}
			last = k
		}
		h(b.in, b, p)
	}
}

// dcgmPoints feeds one DCGM metric's points, keyed by their UUID (uuid
// with dcgm-exporter's --use-old-namespace) and Hostname labels (hostname
// since dcgm-exporter #655; host, the resource's host.name, where neither
// is present). Each point also records its GPU's index (the gpu label) and
// the pod its labels name; a MIG instance's point only its pod, unless its
// field is of the whole GPU (dcgmWholeGPUFields). A pod's share of a
// per-process field (dcgmPerPodShareFields) is only a sighting where the
// GPU's own point of it came.
func (b *ingestBatch) dcgmPoints(name string, h handler, dps pmetric.NumberDataPointSlice, host string) {
	for i := range dps.Len() {
		dp := dps.At(i)
		if dp.Flags().NoRecordedValue() {
			continue
		}
		attrs := dp.Attributes()
		id := firstAttr(attrs, "UUID", "uuid") // uuid: dcgm-exporter --use-old-namespace
		if id == "" {
			b.refuse("no_hw_id")
			continue
		}
		hst := firstAttr(attrs, "Hostname", "hostname") // hostname: dcgm-exporter after 4.5.3-4.8.2
		if hst == "" {
			hst = host
		}
		p := point{key: timeline.Key{Host: hst, GPU: id}, attrs: attrs, ts: dp.Timestamp().AsTime(), v: numberValue(dp)}
		if !(math.Abs(p.v) <= dcgmMaxValue) { // NaN too
			b.refuse("bad_value")
			continue
		}
		if !b.timely(p) {
			continue
		}
		g := b.state(p.key)
		if !g.dcgm.seen {
			g.dcgm.seen = true
			if v := b.in.viewOf(p.key); v != nil {
				v.backend(p.key, b.in.backendLocked(p.key))
			}
		}
		pod := dcgmPod(p)
		if !pod.IsZero() {
			b.sightOnce(podSighting{key: p.key, pod: pod, ts: p.ts})
		}
		if job := stringAttr(attrs, "hpc_job"); job != "" {
			b.sightOnce(podSighting{key: p.key, job: job, ts: p.ts})
		}
		if !dcgmWholeGPUFields[name] && stringAttr(attrs, "GPU_I_ID") != "" {
			continue // a MIG instance's own reading: the timeline is per GPU
		}
		if dcgmPerPodShareFields[name] && b.perPodShare(name, p, pod) {
			continue
		}
		if idx, ok := dcgmIndex(p); ok {
			if cur, known := b.in.store.Index(p.key); !known || cur != idx {
				b.in.store.SetIndex(p.key, idx)
				if v := b.in.viewOf(p.key); v != nil {
					v.info(p.key, idx, stringAttr(attrs, "modelName"))
				}
			}
		}
		h(b.in, b, p)
	}
}

func directional(dir string, rx, tx timeline.Signal) timeline.Signal {
	if dir == "transmit" {
		return tx
	}
	return rx
}

// ioRate turns successive values of a cumulative byte counter into a rate;
// false for the first value and for a counter reset.
func (g *gpuIngest) ioRate(dir string, ts time.Time, total float64) (float64, bool) {
	i := 0
	if dir == "transmit" {
		i = 1
	}
	prev := g.ioPrev[i]
	g.ioPrev[i] = counterPoint{ts: ts, total: total, ok: true}
	if !prev.ok || !ts.After(prev.ts) || total < prev.total {
		return 0, false
	}
	return (total - prev.total) / ts.Sub(prev.ts).Seconds(), true
}

// linkCapacity combines the current PCIe generation and width into bytes
// per second per direction, once both are known.
func (g *gpuIngest) linkCapacity() (float64, bool) {
	gen := int(g.linkGen)
	if gen < 1 || gen >= len(pcieLaneBytesPerSecond) || g.width <= 0 {
		return 0, false
	}
	return pcieLaneBytesPerSecond[gen] * g.width, true
}

type throttleKey struct {
	key timeline.Key
	ts  time.Time
	src source
}

type throttleFlags struct{ power, thermal bool }

// throttleFlag ORs one throttle reason's 0/1 flag into its group's.
func (b *ingestBatch) throttleFlag(k timeline.Key, ts time.Time, reason string, active bool) {
	st := b.throttleAt(throttleKey{k, ts, sourceReceiver})
	switch reason {
	case "sw_power_cap", "hw_power_brake", "hw_slowdown":
		st.power = st.power || active
	case "sw_thermal_slowdown", "hw_thermal_slowdown":
		st.thermal = st.thermal || active
	}
}

// dcgmThrottleFlag ORs a DCGM clock event mask's power and thermal flags
// into the GPU's at ts.
func (b *ingestBatch) dcgmThrottleFlag(k timeline.Key, ts time.Time, power, thermal bool) {
	st := b.throttleAt(throttleKey{k, ts, sourceDCGM})
	st.power = st.power || power
	st.thermal = st.thermal || thermal
}

func (b *ingestBatch) throttleAt(tk throttleKey) *throttleFlags {
	if b.throttle == nil {
		b.throttle = map[throttleKey]*throttleFlags{}
	}
	st := b.throttle[tk]
	if st == nil {
		st = &throttleFlags{}
		b.throttle[tk] = st
	}
	return st
}

// throttleGroup is what a throttle reason says of a throttled interval.
type throttleGroup int

const (
	throttlePower throttleGroup = iota
	throttleThermal
	numThrottleGroups
)

// throttleSlots is the most reasons of one group NVML times.
const throttleSlots = 2

// minThrottleInterval is the shortest interval a throttled share is
// measured over: the reasons of one NVML call carry timestamps a few µs
// apart, and those are one reading, not intervals of their own.
const minThrottleInterval = 10 * time.Millisecond

// throttleTime is one point of nvidia.gpu.throttle.time.
type throttleTime struct {
	key    timeline.Key
	ts     time.Time
	reason throttleGroup
	slot   int // the reason's index within its group
	total  float64
}

// throttleReasonGroup places a reason NVML times: sw_power_cap and
// hw_power_brake are power, the thermal slowdowns thermal; sync_boost is
// neither.
func throttleReasonGroup(reason string) (throttleGroup, int, bool) {
	switch reason {
	case "sw_power_cap":
		return throttlePower, 0, true
	case "hw_power_brake":
		return throttlePower, 1, true
	case "sw_thermal_slowdown":
		return throttleThermal, 0, true
	case "hw_thermal_slowdown":
		return throttleThermal, 1, true
	}
	return 0, 0, false
}

// throttleShares turns the batch's cumulative throttle times, in time
// order per GPU, into the share of each interval the clocks were held.
func (b *ingestBatch) throttleShares() {
	slices.SortFunc(b.throttleTimes, func(x, y throttleTime) int {
		return cmp.Or(cmp.Compare(x.key.Host, y.key.Host), cmp.Compare(x.key.GPU, y.key.GPU), x.ts.Compare(y.ts))
	})
	// The reasons of one reading carry timestamps µs apart: a run of points
	// of one GPU within minThrottleInterval is one reading, measured once.
	for i := 0; i < len(b.throttleTimes); {
		first := b.throttleTimes[i]
		g := b.in.state(first.key)
		var groups [numThrottleGroups]bool
		j := i
		for ; j < len(b.throttleTimes); j++ {
			p := b.throttleTimes[j]
			if p.key != first.key || p.ts.Sub(first.ts) >= minThrottleInterval {
				break
			}
			t := &g.throttleTotals[p.reason][p.slot]
			if !t.ok || p.ts.After(t.ts) { // a late batch's older point changes nothing
				*t = counterPoint{ts: p.ts, total: p.total, ok: true}
			}
			groups[p.reason] = true
		}
		at := b.throttleTimes[j-1].ts
		for group, seen := range groups {
			if !seen {
				continue
			}
			if share, ok := g.throttleShare(throttleGroup(group), at); ok {
				sig := timeline.PowerThrottled
				if throttleGroup(group) == throttleThermal {
					sig = timeline.ThermalThrottled
				}
				b.add(first.key, sig, at, share)
			}
		}
		i = j
	}
}

// throttleShare returns the share of the interval from the group's
// previous measurement to ts that the clocks were held for the group's
// reasons, and makes ts the group's latest measurement.
func (g *gpuIngest) throttleShare(group throttleGroup, ts time.Time) (float64, bool) {
	var total float64
	for _, t := range g.throttleTotals[group] {
		total += t.total
	}
	prev := &g.throttlePrev[group]
	if prev.ok && !ts.After(prev.ts) { // a late batch: that time is measured already
		return 0, false
	}
	last := *prev
	*prev = counterPoint{ts: ts, total: total, ok: true}
	if !last.ok || total < last.total { // first, or the driver reloaded
		return 0, false
	}
	return min((total-last.total)/ts.Sub(last.ts).Seconds(), 1), true
}

// throttleMeasured reports whether GPU k reports throttle times, whose
// shares replace the 0/1 throttle flags; the caller holds in.mu.
func (in *ingest) throttleMeasured(k timeline.Key) bool {
	g := in.gpus[k]
	return g != nil && (g.throttlePrev[throttlePower].ok || g.throttlePrev[throttleThermal].ok)
}

func stringAttr(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

// numberValue is dp's value; NaN (refused as bad_value) where it has none.
func numberValue(dp pmetric.NumberDataPoint) float64 {
	switch dp.ValueType() {
	case pmetric.NumberDataPointValueTypeInt:
		return float64(dp.IntValue())
	case pmetric.NumberDataPointValueTypeDouble:
		return dp.DoubleValue()
	}
	return math.NaN()
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
