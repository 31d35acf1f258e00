package gpucheck

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Span attributes the gpuviz processor writes (processor/gpuvizprocessor,
// enrich.go) and the span name of the format the workload speaks (vLLM's,
// internal/inference/vllm.go). Repeated here rather than imported: the
// check must notice when the processor renames them.
const (
	SpanNameVLLM     = "llm_request"
	AttrFamily       = "gpuviz.request.family"
	AttrMatch        = "gpuviz.gpu.match"
	AttrCoverage     = "gpuviz.coverage"
	AttrEnergy       = "gpuviz.energy"
	AttrEnergySource = "gpuviz.energy.source"
	// The per-phase label is gpuviz.phase.<phase>.bottleneck.
	attrPhasePrefix = "gpuviz.phase."
	FamilyVLLM      = "vllm"
	LabelCompute    = "compute_bound"
	LabelMemory     = "memory_bound"
	LabelPower      = "power_throttled"
)

// Phases of a request span, as the processor names them.
const (
	SpanPhasePrefill = "prefill"
	SpanPhaseDecode  = "decode"
)

// PhaseLabelAttr is the attribute that carries a phase's bottleneck label.
func PhaseLabelAttr(phase string) string { return attrPhasePrefix + phase + ".bottleneck" }

// Thresholds of the join check, each with why it has that value.
const (
	// MaxEnergyError: the processor attributes the energy counter's
	// increments (mJ, read every flush, 1 s) over the request's running
	// window, split inside a second by the driver's power samples (20 ms on
	// an H200); the reference integrates the same driver's samples as the
	// workload drained them itself (within 1% of the counter a second on an
	// H200), else instant power polled every 10 ms (which an H200 refreshes
	// every 100 ms). Over a request of a second or more the two agree to a
	// percent or two when both are right; 5% fails a counter read at the
	// wrong scale, a window shifted by a tick or more, or energy split
	// between the wrong requests (a batch of four sharing wrongly is off by
	// 25% or more).
	MaxEnergyError = 0.05
	// MinTickRate is GPM points per second of prefill the capture must
	// hold. The sampling clock at 250 ms gives 4 per second; scrapes alone
	// (1 s) give at most 1. 2 per second passes a clock that skipped some
	// ticks under load and fails one that is not running.
	MinTickRate = 2.0
	// MinTensorGap is by how much mean tensor activity in the prefill
	// windows must exceed that in the decode windows. A bf16 8192² GEMM
	// keeps the tensor pipes busy most of the time (0.6-0.9 on Hopper) and
	// a copy loop uses them not at all (~0); 0.25 holds with a wide margin
	// while ticks separate the phases, and fails when each tick mixes them
	// (scrape-resolution data over 2 s prefills would average them together)
	// or the timestamps are off by a phase.
	MinTensorGap = 0.25
	// MinDRAMGap is by how much mean DRAM activity in the decode windows
	// must exceed that in the prefill windows: a copy of tensors far larger
	// than L2 streams at 0.8-0.9 of peak HBM bandwidth, a large GEMM reuses
	// tiles from shared memory and L2 and reads 0.1-0.4; same reasoning for
	// 0.25 as MinTensorGap.
	MinDRAMGap = 0.25
	// MinPowerCapShare is the share of a prefill the GPU itself must report
	// throttled at its power cap (nvidia.gpu.throttle.active, sw_power_cap,
	// over the ticks wholly inside the prefill) for power_throttled to be
	// the right prefill label instead of compute_bound: the processor says
	// power_throttled for an interval throttled at least half of the time,
	// and back-to-back bf16 GEMMs reach the cap of some GPUs (an H200 at
	// 700 W drew 691 W at 1485 MHz, throttled throughout).
	MinPowerCapShare = 0.5
)

// Info is a row that reports without asserting (labels of the generate
// requests, whose phases are shorter than a tick or launch-bound).
const Info Status = "info"

// The GPM metrics the tick rows read.
const (
	metricTensor   = "nvidia.gpu.tensor.activity"
	metricDRAM     = "nvidia.gpu.dram.activity"
	metricThrottle = "nvidia.gpu.throttle.active"
	attrReason     = "nvidia.gpu.throttle.reason"
	reasonPowerCap = "sw_power_cap"
)

// RequestReport is what the join showed for one request.
type RequestReport struct {
	ID, Kind string
	Rows     []Row
}

// JoinReport is the outcome of the join check.
type JoinReport struct {
	GPU      string
	Notes    []string
	Skipped  []Skip
	Requests []RequestReport
	// Ticks are the rows about tick-resolution GPM data in the synthetic
	// requests' phases.
	Ticks []Row
}

func (r JoinReport) rows() []Row {
	var all []Row
	for _, q := range r.Requests {
		all = append(all, q.Rows...)
	}
	return append(all, r.Ticks...)
}

// Failed counts the failed expectations.
func (r JoinReport) Failed() int {
	n := 0
	for _, row := range r.rows() {
		if row.Status == Fail {
			n++
		}
	}
	return n
}

// Incomplete tells whether part of the check could not run: a part of the
// workload skipped, or an expectation without what it needs (no reference
// energy, no GPM).
func (r JoinReport) Incomplete() bool {
	return len(r.Skipped) > 0 || slices.ContainsFunc(r.rows(), func(row Row) bool { return row.Status == NA })
}

// AnalyzeJoin checks what the processor wrote on each request's span
// against what the workload measured, and whether the GPM ticks in the
// capture (points of gpuUUID, all when empty) separate the synthetic
// requests' phases.
func AnalyzeJoin(spans []Span, points []Point, run RequestRun) JoinReport {
	rep := JoinReport{GPU: run.GPUUUID, Skipped: run.Skipped}
	points, rep.Notes = selectGPU(points, run.GPUUUID)
	if p := run.Power; p != nil {
		note := fmt.Sprintf("reference power: %s, %d samples, median period %.1f ms, longest gap %.1f ms",
			p.Source, p.Samples, p.MedianS*1e3, p.MaxS*1e3)
		if p.CounterRatio != nil {
			note += fmt.Sprintf("; their integral over the run is %+.2f%% off the energy counter's", (*p.CounterRatio-1)*100)
		}
		rep.Notes = append(rep.Notes, note)
	}
	byID := map[string]Span{}
	for _, s := range spans {
		byID[s.TraceID+"/"+s.SpanID] = s
	}
	powerCap := slices.DeleteFunc(slices.Clone(points), func(p Point) bool {
		return p.Metric != metricThrottle || p.Attrs[attrReason] != reasonPowerCap
	})
	synthetic := 0
	batches := batchEnergies{}
	for _, q := range run.Requests {
		if q.Kind == KindSynthetic {
			synthetic++
		}
		rr := RequestReport{ID: q.ID, Kind: q.Kind}
		span, ok := byID[strings.ToLower(q.TraceID)+"/"+strings.ToLower(q.SpanID)]
		rr.Rows = append(rr.Rows, enrichedRow(span, ok))
		enriched := ok && span.Str(AttrFamily) == FamilyVLLM
		if enriched {
			rr.Rows = append(rr.Rows,
				prefillRow(span, q, powerCap),
				labelRow(span, SpanPhaseDecode, LabelMemory, q.Kind == KindSynthetic),
				energyRow(span, q))
		}
		if q.Batch > 1 {
			b := batches.of(q)
			b.members++
			if e, has := span.Float(AttrEnergy); enriched && has {
				b.energy += e
				b.found++
			}
			if b.members == q.Batch {
				rr.Rows = append(rr.Rows, b.row(q))
			}
		}
		rep.Requests = append(rep.Requests, rr)
	}
	if synthetic == 0 {
		rep.Ticks = []Row{{Status: Fail, Check: "synthetic requests ran", Detail: "the workload reported none"}}
		return rep
	}
	rep.Ticks = tickRows(points, run.Requests)
	return rep
}

func enrichedRow(span Span, found bool) Row {
	row := Row{Check: "span enriched (" + AttrFamily + "=" + FamilyVLLM + ")"}
	switch {
	case !found:
		row.Status, row.Detail = Fail, "no span with this trace and span id in the capture"
	case span.Name != SpanNameVLLM:
		row.Status, row.Detail = Fail, fmt.Sprintf("span is named %q, not %q", span.Name, SpanNameVLLM)
	case span.Str(AttrFamily) != FamilyVLLM:
		family := span.Str(AttrFamily)
		if family == "" {
			family = "absent"
		}
		row.Status, row.Detail = Fail, fmt.Sprintf("not enriched: %s %s", AttrFamily, family)
	default:
		cov, _ := span.Float(AttrCoverage)
		row.Status, row.Detail = Pass, fmt.Sprintf("match %s, coverage %.2f", span.Str(AttrMatch), cov)
	}
	return row
}

// labelRow checks (or, when assert is false, reports) a phase's label.
func labelRow(span Span, phase, want string, assert bool) Row {
	got := span.Str(PhaseLabelAttr(phase))
	row := Row{Check: fmt.Sprintf("%s label = %s", phase, want), Detail: got}
	switch {
	case !assert:
		row.Status, row.Check = Info, phase+" label"
		if got == "" {
			row.Detail = "absent"
		}
	case got == "":
		row.Status, row.Detail = Fail, PhaseLabelAttr(phase)+" absent"
	default:
		row.Status = statusOf(got == want)
	}
	return row
}

// prefillRow checks a synthetic request's prefill label: compute_bound,
// unless the GPU reported itself throttled at its power cap for at least
// MinPowerCapShare of the prefill, when power_throttled is the right label
// (the processor ranks a power cap above the unit that would set the pace
// at full clocks). powerCap are the sw_power_cap throttle points.
func prefillRow(span Span, q Request, powerCap []Point) Row {
	if q.Kind != KindSynthetic {
		return labelRow(span, SpanPhasePrefill, LabelCompute, false)
	}
	share, n := tickStats(powerCap, metricThrottle, []window{{q.PrefillStart, q.FirstToken}})
	if n == 0 || share < MinPowerCapShare {
		return labelRow(span, SpanPhasePrefill, LabelCompute, true)
	}
	row := labelRow(span, SpanPhasePrefill, LabelPower, true)
	row.Check += fmt.Sprintf(" (power cap %.0f%% of it)", share*100)
	return row
}

// energyRow checks a request's energy against its reference. A request of
// a batch is reported, not checked: how a batch's energy divides between
// its sequences is not measured (the reference splits it equally, the
// processor by each one's tokens); the batch's total is checked instead
// (batchEnergies).
func energyRow(span Span, q Request) Row {
	got, has := span.Float(AttrEnergy)
	if q.Batch > 1 && has && q.ReferenceEnergyJ != nil {
		return Row{Status: Info, Check: "energy (a share of its batch's)",
			Detail: fmt.Sprintf("%.1f J, an equal share %.1f J (%s)", got, *q.ReferenceEnergyJ, span.Str(AttrEnergySource))}
	}
	return compareEnergy("energy", got, has, q.ReferenceEnergyJ, span.Str(AttrEnergySource))
}

// compareEnergy is the row of an energy check: got (has: the processor
// wrote one) against ref (nil: the workload could not measure power),
// source saying where the processor's energy came from.
func compareEnergy(what string, got float64, has bool, ref *float64, source string) Row {
	row := Row{Check: fmt.Sprintf("%s within %.0f%% of reference", what, MaxEnergyError*100)}
	switch {
	case ref == nil:
		row.Status, row.Detail = NA, "no reference: the workload could not poll power"
		if has {
			row.Detail += fmt.Sprintf(" (gpuviz says %.1f J)", got)
		}
	case !has:
		row.Status, row.Detail = Fail, AttrEnergy+" absent"
	case *ref <= 0:
		row.Status, row.Detail = Fail, fmt.Sprintf("reference %.3f J is not positive: the power poller saw nothing", *ref)
	default:
		rel := (got - *ref) / *ref
		row.Status = statusOf(math.Abs(rel) <= MaxEnergyError)
		row.Detail = fmt.Sprintf("%.1f J vs %.1f J (%+.1f%%, %s)", got, *ref, rel*100, source)
	}
	return row
}

// batchEnergies sums the processor's energies over each batch of requests
// (Batch > 1, sharing one window), keyed by that window.
type batchEnergies map[window]*batchEnergy

type batchEnergy struct {
	members, found int
	energy         float64
}

func (m batchEnergies) of(q Request) *batchEnergy {
	k := window{q.PrefillStart, q.End}
	if m[k] == nil {
		m[k] = &batchEnergy{}
	}
	return m[k]
}

// row checks the batch's total, on its last request q, against the GPU's
// whole energy over the batch's window; a batch with spans missing or
// without energy fails, saying how many carried one.
func (b *batchEnergy) row(q Request) Row {
	row := compareEnergy(fmt.Sprintf("batch of %d: energy", b.members), b.energy, b.found == b.members, q.ReferenceWindowEnergyJ, "sum")
	if row.Status == Fail && b.found < b.members {
		row.Detail = fmt.Sprintf("%d of its %d spans carry %s", b.found, b.members, AttrEnergy)
	}
	return row
}

// window is a stretch [from, to] in Unix nanoseconds.
type window struct{ from, to int64 }

// tickStats is the mean of a GPM metric over the ticks that lie wholly
// inside some window, and how many there were. A GPM point describes the
// stretch since the previous point of its series, so the point at t with
// predecessor p is inside [from, to] when from <= p and t <= to: ticks that
// straddle a phase edge mix two phases and are left out.
func tickStats(points []Point, metric string, ws []window) (mean float64, n int) {
	series := map[string][]Point{}
	for _, p := range points {
		if p.Metric == metric {
			k := seriesKey(p.Attrs)
			series[k] = append(series[k], p)
		}
	}
	sum := 0.0
	for _, k := range slices.Sorted(maps.Keys(series)) {
		s := series[k]
		slices.SortFunc(s, byTime)
		for i := 1; i < len(s); i++ {
			prev, t := s[i-1].TimeUnixNano, s[i].TimeUnixNano
			for _, w := range ws {
				if prev >= w.from && t <= w.to {
					sum += s[i].Value
					n++
					break
				}
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

func tickRows(points []Point, reqs []Request) []Row {
	var prefill, decode []window
	prefillSeconds := 0.0
	for _, q := range reqs {
		if q.Kind != KindSynthetic {
			continue
		}
		prefill = append(prefill, window{q.PrefillStart, q.FirstToken})
		decode = append(decode, window{q.FirstToken, q.End})
		prefillSeconds += float64(q.FirstToken-q.PrefillStart) / 1e9
	}
	hasMetric := func(m string) bool {
		return slices.ContainsFunc(points, func(p Point) bool { return p.Metric == m })
	}
	rateCheck := fmt.Sprintf("tensor ticks in prefill >= %.1f/s", MinTickRate)
	tensorCheck := fmt.Sprintf("tensor prefill - decode >= %.2f", MinTensorGap)
	dramCheck := fmt.Sprintf("dram decode - prefill >= %.2f", MinDRAMGap)
	if !hasMetric(metricTensor) {
		detail := "not in capture: " + metricTensor + " (no GPM on this GPU or driver)"
		return []Row{{Status: NA, Check: rateCheck, Detail: detail}, {Status: NA, Check: tensorCheck, Detail: detail},
			{Status: NA, Check: dramCheck, Detail: "not in capture: " + metricDRAM}}
	}
	var rows []Row
	tp, ntp := tickStats(points, metricTensor, prefill)
	td, ntd := tickStats(points, metricTensor, decode)
	rate := float64(ntp) / prefillSeconds
	rows = append(rows, Row{Status: statusOf(rate >= MinTickRate), Check: rateCheck,
		Detail: fmt.Sprintf("%.1f/s (%d ticks in %.1f s)", rate, ntp, prefillSeconds)})
	rows = append(rows, gapRow(tensorCheck, tp, ntp, td, ntd, MinTensorGap, "prefill", "decode"))
	if !hasMetric(metricDRAM) {
		return append(rows, Row{Status: NA, Check: dramCheck, Detail: "not in capture: " + metricDRAM})
	}
	dp, ndp := tickStats(points, metricDRAM, prefill)
	dd, ndd := tickStats(points, metricDRAM, decode)
	return append(rows, gapRow(dramCheck, dd, ndd, dp, ndp, MinDRAMGap, "decode", "prefill"))
}

// gapRow checks hi - lo >= gap, failing when either side had no tick.
func gapRow(check string, hi float64, nhi int, lo float64, nlo int, gap float64, hiName, loName string) Row {
	row := Row{Check: check, Detail: fmt.Sprintf("%.2f (%s, %d ticks) vs %.2f (%s, %d ticks)", hi, hiName, nhi, lo, loName, nlo)}
	if nhi == 0 || nlo == 0 {
		row.Status = Fail
		row.Detail = fmt.Sprintf("no tick wholly inside the %s or %s windows (%d, %d)", hiName, loName, nhi, nlo)
		return row
	}
	row.Status = statusOf(hi-lo >= gap)
	return row
}

// Table renders the join report: per request its rows, then the tick rows
// and a final JOIN line.
func (r JoinReport) Table() string {
	const format = "%-14s %-6s %-38s %s\n"
	var b strings.Builder
	gpu := r.GPU
	if gpu == "" {
		gpu = "all GPUs in the capture"
	}
	fmt.Fprintf(&b, "gpu-check join: %s; spans the processor enriched against the workload's own measurements\n", gpu)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "skipped: %s: %s\n", s.Part, s.Reason)
	}
	rule := strings.Repeat("-", 96) + "\n"
	b.WriteString(rule)
	fmt.Fprintf(&b, format, "REQUEST", "RESULT", "EXPECTATION", "VALUE")
	for _, q := range r.Requests {
		b.WriteString(rule)
		name := q.ID
		for _, row := range q.Rows {
			fmt.Fprintf(&b, format, name, row.Status, row.Check, row.Detail)
			name = ""
		}
	}
	b.WriteString(rule)
	name := "ticks"
	for _, row := range r.Ticks {
		fmt.Fprintf(&b, format, name, row.Status, row.Check, row.Detail)
		name = ""
	}
	b.WriteString(rule)
	switch n := r.Failed(); {
	case n > 0:
		fmt.Fprintf(&b, "JOIN: FAIL (%d failed)\n", n)
	case r.Incomplete():
		b.WriteString("JOIN: INCOMPLETE (some parts could not run; see skipped and n/a)\n")
	default:
		b.WriteString("JOIN: PASS\n")
	}
	return b.String()
}
