package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/xpdata"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
)

// Span attributes the processor adds. Everything it adds is under gpuviz.
const (
	attrFamily         = "gpuviz.request.family"
	attrGPUIDs         = "gpuviz.gpu.ids"
	attrMatch          = "gpuviz.gpu.match"
	attrBackend        = "gpuviz.backend"
	attrCoverage       = "gpuviz.coverage"
	attrUtilMean       = "gpuviz.gpu.utilization.mean"
	attrUtilMax        = "gpuviz.gpu.utilization.max"
	attrSMMean         = "gpuviz.gpu.sm_activity.mean"
	attrTensorMean     = "gpuviz.gpu.tensor_activity.mean"
	attrDRAMMean       = "gpuviz.gpu.dram_activity.mean"
	attrMemCtlMean     = "gpuviz.gpu.memory_controller.mean"
	attrMemoryPeak     = "gpuviz.gpu.memory.peak"
	attrPowerMean      = "gpuviz.gpu.power.mean"
	attrBusyTime       = "gpuviz.gpu.busy_time"
	attrEnergy         = "gpuviz.energy"
	attrEnergySource   = "gpuviz.energy.source"
	attrEnergyPerToken = "gpuviz.energy_per_output_token"
	attrBottleneck     = "gpuviz.bottleneck"
	attrShare          = "gpuviz.bottleneck.share"
	phaseAttrPrefix    = inference.OwnAttributePrefix + "phase."
)

// attrWriter adds the processor's attributes to a span's. pcommon.Map's
// Put methods scan every key already there for a duplicate; the keys
// written here are distinct (phase names are, the recogniser's invariant),
// so on a span that carries nothing under gpuviz. yet (every span not
// enriched upstream: the recogniser looked, inference.Request.Enriched)
// they are appended through an xpdata.MapBuilder without the scans, which
// cost about 1 µs a request span (docs/benchmarks.md). An enriched span
// takes the checked Puts, so its values are replaced, never duplicated.
type attrWriter struct {
	m  pcommon.Map
	mb *xpdata.MapBuilder // nil: through m's Puts
}

// writeAttrs prepares m for extra more attributes; done finishes.
func writeAttrs(m pcommon.Map, mb *xpdata.MapBuilder, extra int, enriched bool) attrWriter {
	if enriched {
		m.EnsureCapacity(m.Len() + extra)
		return attrWriter{m: m}
	}
	mb.EnsureCapacity(m.Len() + extra)
	for k, v := range m.All() {
		v.MoveTo(mb.AppendEmpty(k))
	}
	return attrWriter{m: m, mb: mb}
}

func (w attrWriter) str(k, v string) {
	if w.mb == nil {
		w.m.PutStr(k, v)
		return
	}
	w.mb.AppendEmpty(k).SetStr(v)
}

func (w attrWriter) double(k string, v float64) {
	if w.mb == nil {
		w.m.PutDouble(k, v)
		return
	}
	w.mb.AppendEmpty(k).SetDouble(v)
}

func (w attrWriter) int(k string, v int64) {
	if w.mb == nil {
		w.m.PutInt(k, v)
		return
	}
	w.mb.AppendEmpty(k).SetInt(v)
}

func (w attrWriter) slice(k string) pcommon.Slice {
	if w.mb == nil {
		return w.m.PutEmptySlice(k)
	}
	return w.mb.AppendEmpty(k).SetEmptySlice()
}

func (w attrWriter) done() {
	if w.mb != nil {
		w.mb.UnsafeIntoMap(w.m)
	}
}

// phaseAttrs are the attribute names of one phase.
type phaseAttrs struct{ bottleneck, share, energy string }

// knownPhaseAttrs holds the names of the recognisers' phases, built once.
var knownPhaseAttrs = func() map[string]phaseAttrs {
	m := map[string]phaseAttrs{}
	for _, name := range []string{inference.PhaseQueue, inference.PhasePrefill, inference.PhaseDecode, inference.PhaseInference} {
		m[name] = newPhaseAttrs(name)
	}
	return m
}()

func newPhaseAttrs(phase string) phaseAttrs {
	return phaseAttrs{phaseAttrPrefix + phase + ".bottleneck", phaseAttrPrefix + phase + ".bottleneck.share", phaseAttrPrefix + phase + ".energy"}
}

func phaseAttrNames(phase string) phaseAttrs {
	if a, ok := knownPhaseAttrs[phase]; ok {
		return a
	}
	return newPhaseAttrs(phase)
}

// put writes the statistics; brief is for phase spans, which carry the
// essentials (the request span has the rest).
func (s gpuStats) put(attrs attrWriter, brief bool) {
	if !brief {
		attrs.double(attrCoverage, rounded(s.coverage))
	}
	if s.hasUtil {
		attrs.double(attrUtilMean, rounded(s.utilMean))
		if !brief {
			attrs.double(attrUtilMax, rounded(s.utilMax))
			attrs.double(attrBusyTime, rounded(s.busySeconds))
		}
	}
	if s.hasSM {
		attrs.double(attrSMMean, rounded(s.sm))
	}
	if s.hasTensor {
		attrs.double(attrTensorMean, rounded(s.tensor))
	}
	if s.hasDRAM {
		attrs.double(attrDRAMMean, rounded(s.dram))
	}
	if s.hasMem {
		attrs.double(attrMemCtlMean, rounded(s.memCtl))
	}
	if s.memoryPeak > 0 && !brief {
		attrs.int(attrMemoryPeak, int64(s.memoryPeak))
	}
	if s.hasPower {
		attrs.double(attrPowerMean, rounded(s.powerMean))
	}
}

// annotate writes a span's result on it and, given its phases' statistics
// (ps, nil with phase spans off), adds its phase spans; it returns what the
// emitter records of a request (ok false for spans that are not one).
func annotate(hs *heldSpan, r *spanResult, ps *phaseStats, backend string, mb *xpdata.MapBuilder) (requestRecord, bool) {
	req := hs.req
	span := hs.span
	attrs := writeAttrs(span.Attributes(), mb, 19+3*len(req.Phases), req.Enriched)
	attrs.str(attrFamily, req.Family)
	ids := attrs.slice(attrGPUIDs)
	keys := hs.keys()
	ids.EnsureCapacity(len(keys))
	for _, k := range keys {
		ids.AppendEmpty().SetStr(k.GPU)
	}
	attrs.str(attrMatch, hs.method)
	if backend != "" {
		attrs.str(attrBackend, backend)
	}
	r.stats.put(attrs, false)
	label := r.label.Label()
	attrs.str(attrBottleneck, string(label))
	share(attrs, attrShare, r.labelShare)
	var perToken float64
	if r.energyKnown {
		attrs.double(attrEnergy, rounded(r.energy))
		attrs.str(attrEnergySource, r.stats.energySource.String())
		if req.OutputTokens > 0 && !req.Aggregate {
			perToken = r.energy / float64(req.OutputTokens)
			attrs.double(attrEnergyPerToken, rounded(perToken))
		}
	}
	var phases [inference.MaxPhases]recordPhase
	for p, ph := range req.Phases {
		phLabel := r.phaseLabels[p].Label()
		phases[p] = recordPhase{name: ph.Name, start: ph.Start, end: ph.End, label: phLabel, share: r.phaseShares[p], energy: r.phaseEnergy[p]}
		names := phaseAttrNames(ph.Name)
		attrs.str(names.bottleneck, string(phLabel))
		share(attrs, names.share, r.phaseShares[p])
		if r.energyKnown {
			attrs.double(names.energy, rounded(r.phaseEnergy[p]))
		}
	}
	attrs.done()
	if ps != nil {
		for p := range req.Phases {
			addPhaseSpan(hs, p, &ps[p], r, phases[p].label, backend, mb)
		}
	}
	if !hs.takesShare() {
		return requestRecord{}, false
	}
	return requestRecord{
		keys: keys, model: req.Model, label: label, share: r.labelShare, energy: r.energy, energyKnown: r.energyKnown,
		perToken: perToken, busy: r.stats.busySeconds, traceID: span.TraceID(), spanID: span.SpanID(),
		end: req.End, seconds: r.labelSeconds, tenant: hs.tenant, gpuSeconds: r.gpuSeconds, backend: backend,
		family: req.Family, start: req.Start, inputTokens: req.InputTokens, outputTokens: req.OutputTokens,
		phases: phases, numPhases: len(req.Phases),
	}, true
}

// addPhaseSpan adds a child span gpu.<phase> under the request span, on the
// same trace, carrying the phase's GPU statistics.
func addPhaseSpan(hs *heldSpan, p int, stats *gpuStats, r *spanResult, label bottleneck.Label, backend string, mb *xpdata.MapBuilder) {
	ph := hs.req.Phases[p]
	parent := hs.span
	child := hs.siblings.AppendEmpty()
	child.SetName(phaseSpanName(ph.Name))
	child.SetKind(ptrace.SpanKindInternal)
	child.SetTraceID(parent.TraceID())
	child.SetParentSpanID(parent.SpanID())
	child.SetSpanID(newSpanID())
	child.SetStartTimestamp(pcommon.NewTimestampFromTime(ph.Start))
	child.SetEndTimestamp(pcommon.NewTimestampFromTime(ph.End))
	attrs := writeAttrs(child.Attributes(), mb, 10, false)
	stats.put(attrs, true)
	attrs.str(attrBottleneck, string(label))
	share(attrs, attrShare, r.phaseShares[p])
	if r.energyKnown {
		attrs.double(attrEnergy, rounded(r.phaseEnergy[p]))
	}
	if backend != "" {
		attrs.str(attrBackend, backend)
	}
	attrs.done()
}

// share writes a label's share of the labelled GPU time; none where it is
// 0 (the label is unknown, see knownShare).
func share(attrs attrWriter, k string, v float64) {
	if v > 0 {
		attrs.double(k, rounded(v))
	}
}

// rounded drops what float sums leave past the ninth decimal (0.1 s bins
// add up to 2.9999999999999996): no reading means anything there, and
// spans read the same however the sums ran.
func rounded(v float64) float64 {
	if math.Abs(v) >= 1e9 {
		return v
	}
	return math.Round(v*1e9) / 1e9
}

var knownPhaseSpanNames = map[string]string{
	inference.PhaseQueue: "gpu." + inference.PhaseQueue, inference.PhasePrefill: "gpu." + inference.PhasePrefill,
	inference.PhaseDecode: "gpu." + inference.PhaseDecode, inference.PhaseInference: "gpu." + inference.PhaseInference,
}

func phaseSpanName(phase string) string {
	if n, ok := knownPhaseSpanNames[phase]; ok {
		return n
	}
	return "gpu." + phase
}

// newSpanID returns a random, non-zero span ID.
func newSpanID() pcommon.SpanID {
	var id pcommon.SpanID
	for id.IsEmpty() {
		binary.LittleEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}
