package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// Span attributes the processor adds. Everything it adds is under gpuviz.
const (
	attrFamily         = "gpuviz.request.family"
	attrGPUIDs         = "gpuviz.gpu.ids"
	attrMatch          = "gpuviz.gpu.match"
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
	phaseAttrPrefix    = "gpuviz.phase."
)

// enriched is one recognised span on its way to enrichment.
type enriched struct {
	hs     *heldSpan
	keys   []timeline.Key
	method string
	// Per request and per phase: label time and attributed energy.
	labels      bottleneck.Times
	phaseLabels []bottleneck.Times
	energy      float64
	phaseEnergy []float64
	energyKnown bool
}

// enrich attaches GPU statistics to every recognised span of the released
// batches. Requests released together are attributed energy together, so
// that on each GPU their shares of every interval sum to its energy.
func (c *core) enrich(ctx context.Context, ready []*heldBatch) {
	var items []*enriched
	byGPU := map[timeline.Key][]*enriched{}
	for _, b := range ready {
		for i := range b.spans {
			hs := &b.spans[i]
			keys, method := c.gpus(hs)
			if len(keys) == 0 {
				c.countUnenriched(ctx, "no_gpu", 1)
				continue
			}
			e := &enriched{hs: hs, keys: keys, method: method,
				phaseLabels: make([]bottleneck.Times, len(hs.req.Phases)), phaseEnergy: make([]float64, len(hs.req.Phases))}
			items = append(items, e)
			for _, k := range keys {
				byGPU[k] = append(byGPU[k], e)
			}
		}
	}
	var ivs []timeline.Interval
	for k, es := range byGPU {
		ivs = c.attribute(k, es, ivs[:0])
	}
	for _, e := range items {
		c.annotate(ctx, e)
	}
}

// attribute classifies GPU k's sample intervals for the spans released
// together that ran on it, and splits the intervals' energy between the
// requests among them. Aggregate spans (batch steps, Triton's compute span)
// are classified but neither take a share nor count as in flight: their
// request is accounted for by another span.
func (c *core) attribute(k timeline.Key, es []*enriched, ivs []timeline.Interval) []timeline.Interval {
	from, to := es[0].hs.req.Start, es[0].hs.req.End
	windows := make([]attribution.Request, len(es))
	var reqs []attribution.Request
	var owners []*enriched
	for i, e := range es {
		r := e.hs.req
		if r.Start.Before(from) {
			from = r.Start
		}
		if r.End.After(to) {
			to = r.End
		}
		windows[i].Window = attribution.Span(r.Start, r.End)
		for _, ph := range r.Phases {
			windows[i].Phases = append(windows[i].Phases, attribution.Span(ph.Start, ph.End))
		}
		if !r.Aggregate {
			reqs = append(reqs, windows[i])
			owners = append(owners, e)
		}
	}
	ivs = c.store.Intervals(k, from, to, ivs)
	// The intervals as attribution sees them: unknown energy counts as none,
	// and time whose energy requests released earlier were given is spent.
	c.ledgerMu.Lock()
	defer c.ledgerMu.Unlock()
	ledger := c.ledger(k)
	energy := make([]attribution.Interval, len(ivs))
	known := false
	for j, iv := range ivs {
		energy[j] = attribution.Interval{Window: attribution.Span(iv.Start, iv.End)}
		if iv.EnergyKnown {
			energy[j].Joules, known = iv.EnergyJ*ledger.Unclaimed(energy[j].Window), true
		}
	}
	// Requests in flight per interval, each request over its own range of
	// intervals only.
	inFlight := make([]int, len(ivs)+1)
	for i := range reqs {
		lo, hi := attribution.Range(energy, reqs[i].Window)
		inFlight[lo]++
		inFlight[hi]--
	}
	labels := make([]bottleneck.Label, len(ivs))
	running := 0
	for j, iv := range ivs {
		running += inFlight[j]
		labels[j] = bottleneck.Classify(classifierInputs(iv, running), c.thresholds)
	}
	for i, e := range es {
		lo, hi := attribution.Range(energy, windows[i].Window)
		for j := lo; j < hi; j++ {
			w := energy[j].Window
			e.labels.Add(labels[j], attribution.Overlap(w, windows[i].Window))
			for p, ph := range windows[i].Phases {
				e.phaseLabels[p].Add(labels[j], attribution.Overlap(w, ph))
			}
		}
	}
	for i, sh := range attribution.Split(energy, reqs) {
		ledger.Claim(reqs[i].Window)
		e := owners[i]
		e.energyKnown = e.energyKnown || known
		e.energy += sh.Joules
		for p, j := range sh.Phases {
			e.phaseEnergy[p] += j
		}
	}
	return ivs
}

// classifierInputs turns one sample interval into the classifier's inputs.
func classifierInputs(iv timeline.Interval, inFlight int) bottleneck.Inputs {
	v, has := iv.Values, iv.Has
	in := bottleneck.Inputs{
		Utilization: v[timeline.Utilization], HasUtilization: has[timeline.Utilization],
		MemoryController: v[timeline.MemoryController], HasMemoryController: has[timeline.MemoryController],
		SMActivity: v[timeline.SMActivity], HasSMActivity: has[timeline.SMActivity],
		TensorActivity: v[timeline.TensorActivity], HasTensorActivity: has[timeline.TensorActivity],
		DRAMActivity: v[timeline.DRAMActivity], HasDRAMActivity: has[timeline.DRAMActivity],
		PowerThrottled: v[timeline.PowerThrottled], HasPowerThrottled: has[timeline.PowerThrottled],
		ThermalThrottled: v[timeline.ThermalThrottled], HasThermalThrottled: has[timeline.ThermalThrottled],
		RequestsInFlight: inFlight,
	}
	if has[timeline.MemoryUsed] && has[timeline.MemoryLimit] && v[timeline.MemoryLimit] > 0 {
		in.MemoryUsedFraction, in.HasMemoryUsed = v[timeline.MemoryUsed]/v[timeline.MemoryLimit], true
	}
	if has[timeline.PCIeCapacity] && v[timeline.PCIeCapacity] > 0 && (has[timeline.PCIeRx] || has[timeline.PCIeTx]) {
		in.PCIeFraction, in.HasPCIe = max(v[timeline.PCIeRx], v[timeline.PCIeTx])/v[timeline.PCIeCapacity], true
	}
	return in
}

// gpuStats are a window's statistics over all of a request's GPUs.
type gpuStats struct {
	coverage          float64
	utilMean, utilMax float64
	hasUtil           bool
	sm, tensor, dram  float64
	memCtl            float64
	hasSM, hasTensor  bool
	hasDRAM, hasMem   bool
	memoryPeak        float64
	powerMean         float64
	hasPower          bool
	busySeconds       float64
	// energySource is "counter" when every GPU's energy came from its
	// energy counter, else "power" (integrated power readings).
	energySource string
}

// windowStats aggregates GPU windows: means over GPUs for ratios, the sum
// of mean power (the request's GPUs draw together), the peak memory.
func (c *core) windowStats(keys []timeline.Key, from, to time.Time) gpuStats {
	var s gpuStats
	var nUtil, nSM, nTensor, nDRAM, nMem int
	s.energySource = timeline.EnergyCounter.String()
	for _, k := range keys {
		w := c.store.Window(k, from, to)
		if w.EnergySource != timeline.EnergyCounter {
			s.energySource = timeline.EnergyPower.String()
		}
		s.coverage += w.Coverage / float64(len(keys))
		if st := w.Stats[timeline.Utilization]; st.Seconds > 0 {
			s.utilMean += st.Mean
			s.utilMax = max(s.utilMax, st.Max)
			s.busySeconds += st.Mean * st.Seconds
			nUtil++
		}
		if st := w.Stats[timeline.SMActivity]; st.Seconds > 0 {
			s.sm += st.Mean
			nSM++
		}
		if st := w.Stats[timeline.TensorActivity]; st.Seconds > 0 {
			s.tensor += st.Mean
			nTensor++
		}
		if st := w.Stats[timeline.DRAMActivity]; st.Seconds > 0 {
			s.dram += st.Mean
			nDRAM++
		}
		if st := w.Stats[timeline.MemoryController]; st.Seconds > 0 {
			s.memCtl += st.Mean
			nMem++
		}
		if st := w.Stats[timeline.MemoryUsed]; st.Seconds > 0 {
			s.memoryPeak = max(s.memoryPeak, st.Max)
		}
		if st := w.Stats[timeline.Power]; st.Seconds > 0 {
			s.powerMean += st.Mean
			s.hasPower = true
		}
	}
	s.hasUtil, s.hasSM, s.hasTensor, s.hasDRAM, s.hasMem = nUtil > 0, nSM > 0, nTensor > 0, nDRAM > 0, nMem > 0
	mean := func(sum float64, n int) float64 {
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	s.utilMean, s.sm, s.tensor, s.dram = mean(s.utilMean, nUtil), mean(s.sm, nSM), mean(s.tensor, nTensor), mean(s.dram, nDRAM)
	s.memCtl = mean(s.memCtl, nMem)
	return s
}

// put writes the statistics; brief is for phase spans, which carry the
// essentials (the request span has the rest).
func (s gpuStats) put(attrs pcommon.Map, brief bool) {
	if !brief {
		attrs.PutDouble(attrCoverage, s.coverage)
	}
	if s.hasUtil {
		attrs.PutDouble(attrUtilMean, s.utilMean)
		if !brief {
			attrs.PutDouble(attrUtilMax, s.utilMax)
			attrs.PutDouble(attrBusyTime, s.busySeconds)
		}
	}
	if s.hasSM {
		attrs.PutDouble(attrSMMean, s.sm)
	}
	if s.hasTensor {
		attrs.PutDouble(attrTensorMean, s.tensor)
	}
	if s.hasDRAM {
		attrs.PutDouble(attrDRAMMean, s.dram)
	}
	// The memory controller's busy share comes with the driver's ~6/s
	// samples: finer than GPM's once-a-scrape activities, it tells a short
	// prefill from the decode after it.
	if s.hasMem {
		attrs.PutDouble(attrMemCtlMean, s.memCtl)
	}
	if s.memoryPeak > 0 && !brief {
		attrs.PutInt(attrMemoryPeak, int64(s.memoryPeak))
	}
	if s.hasPower {
		attrs.PutDouble(attrPowerMean, s.powerMean)
	}
}

// annotate writes a request's statistics on its span, adds its phase
// spans, and records it for the derived metrics.
func (c *core) annotate(ctx context.Context, e *enriched) {
	req := e.hs.req
	span := e.hs.span
	stats := c.windowStats(e.keys, req.Start, req.End)
	if stats.coverage == 0 {
		c.countUnenriched(ctx, "no_samples", 1)
		return
	}
	if req.Aggregate {
		c.drawnEnergy(e)
	}
	attrs := span.Attributes()
	attrs.EnsureCapacity(attrs.Len() + 16 + 2*len(req.Phases))
	attrs.PutStr(attrFamily, req.Family)
	ids := attrs.PutEmptySlice(attrGPUIDs)
	for _, k := range e.keys {
		ids.AppendEmpty().SetStr(k.GPU)
	}
	attrs.PutStr(attrMatch, e.method)
	stats.put(attrs, false)
	label := e.labels.Dominant()
	attrs.PutStr(attrBottleneck, string(label))
	var perToken float64
	if e.energyKnown {
		attrs.PutDouble(attrEnergy, e.energy)
		attrs.PutStr(attrEnergySource, stats.energySource)
		if req.OutputTokens > 0 {
			perToken = e.energy / float64(req.OutputTokens)
			attrs.PutDouble(attrEnergyPerToken, perToken)
		}
	}
	for p, ph := range req.Phases {
		phLabel := e.phaseLabels[p].Dominant()
		attrs.PutStr(phaseAttrPrefix+ph.Name+".bottleneck", string(phLabel))
		if e.energyKnown {
			attrs.PutDouble(phaseAttrPrefix+ph.Name+".energy", e.phaseEnergy[p])
		}
		if c.cfg.PhaseSpans {
			c.addPhaseSpan(e, p, phLabel)
		}
	}
	c.tel.ProcessorGpuvizSpansEnriched.Add(ctx, 1)
	if !req.Aggregate {
		c.derived.recordRequest(ctx, e, label, stats.busySeconds, perToken)
	}
}

// drawnEnergy gives an aggregate span (a batch step, Triton's compute
// span) the energy its GPUs drew during it and its phases, unshared: the
// work of everything it aggregates.
func (c *core) drawnEnergy(e *enriched) {
	req := e.hs.req
	for _, k := range e.keys {
		if w := c.store.Window(k, req.Start, req.End); w.EnergySource != timeline.EnergyNone {
			e.energy += w.EnergyJ
			e.energyKnown = true
		}
		for p, ph := range req.Phases {
			e.phaseEnergy[p] += c.store.Window(k, ph.Start, ph.End).EnergyJ
		}
	}
}

// addPhaseSpan adds a child span gpu.<phase> under the request span, on the
// same trace, carrying the phase's GPU statistics.
func (c *core) addPhaseSpan(e *enriched, p int, label bottleneck.Label) {
	ph := e.hs.req.Phases[p]
	parent := e.hs.span
	child := e.hs.siblings.AppendEmpty()
	child.SetName("gpu." + ph.Name)
	child.SetKind(ptrace.SpanKindInternal)
	child.SetTraceID(parent.TraceID())
	child.SetParentSpanID(parent.SpanID())
	child.SetSpanID(newSpanID())
	child.SetStartTimestamp(pcommon.NewTimestampFromTime(ph.Start))
	child.SetEndTimestamp(pcommon.NewTimestampFromTime(ph.End))
	attrs := child.Attributes()
	attrs.EnsureCapacity(8)
	c.windowStats(e.keys, ph.Start, ph.End).put(attrs, true)
	attrs.PutStr(attrBottleneck, string(label))
	if e.energyKnown {
		attrs.PutDouble(attrEnergy, e.phaseEnergy[p])
	}
	c.tel.ProcessorGpuvizPhaseSpansAdded.Add(context.Background(), 1)
}

// newSpanID returns a random, non-zero span ID.
func newSpanID() pcommon.SpanID {
	var id pcommon.SpanID
	for id.IsEmpty() {
		binary.LittleEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}
