package gpucheck

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The phases scripts/gpu-workload.py runs, in order.
const (
	PhaseIdle    = "idle"
	PhaseMatmul  = "matmul"
	PhaseD2DCopy = "d2d_copy"
	PhaseH2DCopy = "h2d_copy"
)

// ExpectedPhases are the phases the analysis has expectations for, in the
// order the workload runs them.
var ExpectedPhases = []string{PhaseIdle, PhaseMatmul, PhaseD2DCopy, PhaseH2DCopy}

// EdgeTrim is cut from both ends of every phase before averaging. NVML's
// utilisations and power are averages over the driver's last sample period (up
// to a second), a scrape lands anywhere in the collection interval, and a
// phase starts with clocks ramping up, so readings near a phase edge mix two
// phases. 2 s covers all three at a 1 s interval; a 20 s phase keeps 16 s.
const EdgeTrim = 2 * time.Second

// Thresholds of the expected signatures. Each is chosen so that a correct
// receiver on a healthy GPU passes with a wide margin, and a failure means the
// signal is wrong or missing, not that the GPU is a little slower than usual.
const (
	// MaxIdleUtil: with nothing launched NVML reports 0; 0.10 leaves room for
	// a stray kernel of another process or the tail of the warm-up.
	MaxIdleUtil = 0.10
	// MinMatmulUtil: the matmul loop keeps kernels queued back to back, with
	// only short synchronisations between batches, and "general" utilisation
	// counts the time any kernel ran, so it reads close to 1.
	MinMatmulUtil = 0.90
	// MinMatmulTensor: a bf16 8192x8192 GEMM runs on the tensor cores for most
	// of its time; 0.30 fails only when the tensor pipe is hardly busy (the
	// GEMM fell back to another path, or the GPM field read is the wrong one).
	MinMatmulTensor = 0.30
	// MinCopyDRAM: a device-to-device copy of 2 GiB, far beyond L2, streams
	// through HBM and keeps DRAM (or, without GPM, the memory controller)
	// busy nearly all the time; 0.50 fails only when that traffic is not seen.
	MinCopyDRAM = 0.50
	// MinH2DReceive: an H100/H200 PCIe Gen5 x16 link carries ~50 GB/s per
	// direction and pinned host-to-device copies reach well over 10 GB/s even
	// on older links, so 2 GB/s fails only when the traffic is not seen at all
	// (or is reported in the other direction).
	MinH2DReceive = 2e9
)

// unit is how a signal's value is read and printed.
type unit int

const (
	ratio unit = iota // 0..1
	watts
	bytesPerSecond
	hertz
)

func (u unit) format(v float64) string {
	switch u {
	case watts:
		return fmt.Sprintf("%.0f W", v)
	case bytesPerSecond:
		return fmt.Sprintf("%.1f GB/s", v/1e9)
	case hertz:
		return fmt.Sprintf("%.0f MHz", v/1e6)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// source is one metric a signal can be read from.
type source struct {
	metric string
	// attr and value, when attr is set, select the points with that attribute
	// value (one task, one direction, one clock domain).
	attr, value string
	// rate marks a cumulative counter, whose per-second rate is the signal.
	rate bool
}

func (s source) matches(p Point) bool {
	return p.Metric == s.metric && (s.attr == "" || p.Attrs[s.attr] == s.value)
}

func (s source) String() string {
	name := s.metric
	if s.rate {
		name += " rate"
	}
	return name
}

// signalDef is a named signal and the metrics it can be read from, preferred
// first; the first one with points anywhere in the capture is used for every
// phase, so that phases are compared on the same metric.
type signalDef struct {
	name    string
	unit    unit
	sources []source
}

var signalDefs = []signalDef{
	{"util", ratio, []source{{metric: "hw.gpu.utilization", attr: "hw.gpu.task", value: "general"}}},
	{"sm", ratio, []source{{metric: "nvidia.gpu.sm.activity"}}},
	{"tensor", ratio, []source{{metric: "nvidia.gpu.tensor.activity"}}},
	{"dram", ratio, []source{{metric: "nvidia.gpu.dram.activity"}}},
	{"memctl", ratio, []source{{metric: "nvidia.gpu.memory_controller.utilization"}}},
	{"power", watts, []source{{metric: "hw.power"}}},
	{"pcie_rx", bytesPerSecond, []source{
		{metric: "hw.gpu.io", attr: "network.io.direction", value: "receive", rate: true},
		{metric: "nvidia.gpu.pcie.throughput", attr: "network.io.direction", value: "receive"},
	}},
	{"sm_clock", hertz, []source{{metric: "nvidia.gpu.clock.frequency", attr: "nvidia.gpu.clock.domain", value: "sm"}}},
	{"throttle_power", ratio, []source{{metric: "nvidia.gpu.throttle.active", attr: "nvidia.gpu.throttle.reason", value: "sw_power_cap"}}},
}

// check is one way to evaluate an expectation: the signal must be above (or
// below) a threshold, or, when than is set, above (or below) the same signal
// in each of those phases.
type check struct {
	signal    string
	above     bool
	threshold float64
	than      []string
}

// expectation is one row of a phase's signature: its checks are tried in
// order, and the first whose signal is in the capture is evaluated (the
// second, if any, is the fallback for GPUs or drivers without the first).
type expectation struct {
	phase  string
	checks []check
}

var expectations = []expectation{
	{PhaseIdle, []check{{signal: "util", threshold: MaxIdleUtil}}},
	{PhaseIdle, []check{{signal: "power", than: []string{PhaseMatmul}}}},
	{PhaseMatmul, []check{{signal: "util", above: true, threshold: MinMatmulUtil}}},
	{PhaseMatmul, []check{{signal: "tensor", above: true, threshold: MinMatmulTensor}}},
	{PhaseMatmul, []check{{signal: "tensor", above: true, than: []string{PhaseD2DCopy, PhaseH2DCopy}}}},
	{PhaseD2DCopy, []check{
		{signal: "dram", above: true, threshold: MinCopyDRAM},
		{signal: "memctl", above: true, threshold: MinCopyDRAM},
	}},
	{PhaseD2DCopy, []check{
		{signal: "dram", above: true, than: []string{PhaseMatmul}},
		{signal: "memctl", above: true, than: []string{PhaseMatmul}},
	}},
	{PhaseH2DCopy, []check{{signal: "pcie_rx", above: true, threshold: MinH2DReceive}}},
	{PhaseH2DCopy, []check{{signal: "pcie_rx", above: true, than: []string{PhaseIdle, PhaseMatmul}}}},
}

// Status is the outcome of one expectation.
type Status string

const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	// NA is an expectation whose signals are not in the capture (a metric the
	// GPU, driver or receiver does not provide): reported, never a failure.
	NA Status = "n/a"
)

// SignalValue is one signal in one phase.
type SignalValue struct {
	Name string
	// Source is the metric the value comes from; empty when no metric of the
	// signal is in the capture (the signal is n/a).
	Source string
	// HasValue is false when the metric is in the capture but gave no value in
	// the phase's trimmed window.
	HasValue bool
	Value    float64
	// Points is how many points the value is computed from.
	Points int

	unit unit
}

// Formatted is the value as the table prints it.
func (s SignalValue) Formatted() string {
	switch {
	case s.Source == "":
		return string(NA)
	case !s.HasValue:
		return "no data in window"
	}
	return s.unit.format(s.Value)
}

// Row is one evaluated expectation.
type Row struct {
	Status Status
	Check  string // what was expected, e.g. "util > 0.90"
	Detail string // what was seen
}

// PhaseReport is what one phase showed.
type PhaseReport struct {
	Name string
	// Ran is false for an expected phase the workload never reported.
	Ran bool
	// Window is the trimmed window the values are computed over.
	Window  time.Duration
	Signals []SignalValue
	Rows    []Row
}

// Report is the outcome of a check.
type Report struct {
	GPU    string   // the GPU analysed; empty when all points counted
	Notes  []string // what the reader should know about the capture itself
	Phases []PhaseReport
}

// Failed counts the failed expectations.
func (r Report) Failed() int {
	n := 0
	for _, p := range r.Phases {
		for _, row := range p.Rows {
			if row.Status == Fail {
				n++
			}
		}
	}
	return n
}

// OK tells whether no expectation failed.
func (r Report) OK() bool { return r.Failed() == 0 }

// Incomplete tells whether some expectation could not be evaluated: its
// signals are not in the capture (n/a; no GPM on the GPU, say).
func (r Report) Incomplete() bool {
	for _, p := range r.Phases {
		if slices.ContainsFunc(p.Rows, func(row Row) bool { return row.Status == NA }) {
			return true
		}
	}
	return false
}

// Analyze computes, per phase, every signal over the phase's window less
// EdgeTrim at both ends, and evaluates the expected signatures. When gpuUUID
// is set only the points of that GPU (hw.id) count; else all do, averaged over
// however many GPUs the capture holds. Phases appear in the order given, then
// any expected phase that did not run (a failure).
func Analyze(points []Point, phases []Phase, gpuUUID string) Report {
	rep := Report{GPU: gpuUUID}
	points, rep.Notes = selectGPU(points, gpuUUID)

	// Which source each signal is read from, decided once for all phases.
	chosen := map[string]source{}
	for _, def := range signalDefs {
		for _, src := range def.sources {
			if slices.ContainsFunc(points, src.matches) {
				chosen[def.name] = src
				break
			}
		}
	}

	ran := map[string]bool{}
	for _, ph := range phases {
		if ran[ph.Name] {
			rep.Notes = append(rep.Notes, fmt.Sprintf("phase %s reported twice: the first one is analysed", ph.Name))
			continue
		}
		ran[ph.Name] = true
		pr := PhaseReport{Name: ph.Name, Ran: true}
		from, to := ph.Start+int64(EdgeTrim), ph.End-int64(EdgeTrim)
		pr.Window = max(time.Duration(to-from), 0)
		for _, def := range signalDefs {
			sv := SignalValue{Name: def.name, unit: def.unit}
			if src, ok := chosen[def.name]; ok {
				sv.Source = src.String()
				sv.Value, sv.Points, sv.HasValue = measure(points, src, from, to)
			}
			pr.Signals = append(pr.Signals, sv)
		}
		rep.Phases = append(rep.Phases, pr)
	}
	for _, name := range ExpectedPhases {
		if !ran[name] {
			rep.Phases = append(rep.Phases, PhaseReport{Name: name,
				Rows: []Row{{Status: Fail, Check: "phase ran", Detail: "the workload did not report this phase"}}})
		}
	}
	// The phases that ran, by name; rep.Phases no longer grows, so its
	// elements can be pointed at.
	byName := map[string]*PhaseReport{}
	for i := range rep.Phases {
		if rep.Phases[i].Ran {
			byName[rep.Phases[i].Name] = &rep.Phases[i]
		}
	}

	for _, exp := range expectations {
		if pr, ok := byName[exp.phase]; ok {
			pr.Rows = append(pr.Rows, evaluate(exp, byName, chosen))
		}
	}
	for _, name := range ExpectedPhases {
		pr, ok := byName[name]
		// idle has no load to show, so it may show nothing; a phase that did
		// not run has failed already.
		if name == PhaseIdle || !ok || slices.ContainsFunc(pr.Rows, func(r Row) bool { return r.Status != NA }) {
			continue
		}
		pr.Rows = append(pr.Rows, Row{Status: Fail, Check: "no signal",
			Detail: "none of this phase's expected signals is in the capture"})
	}
	return rep
}

// selectGPU keeps the points of gpuUUID (all of them when it is empty) and
// says what is surprising about the GPUs the capture holds.
func selectGPU(points []Point, gpuUUID string) ([]Point, []string) {
	seen := map[string]bool{}
	for _, p := range points {
		if id, ok := p.Attrs["hw.id"]; ok {
			seen[id] = true
		}
	}
	ids := slices.Sorted(maps.Keys(seen))
	if gpuUUID == "" {
		if len(ids) > 1 {
			return points, []string{fmt.Sprintf("the workload did not say which GPU it ran on: values are averaged over %d GPUs (%s)",
				len(ids), strings.Join(ids, ", "))}
		}
		return points, nil
	}
	var kept []Point
	for _, p := range points {
		if p.Attrs["hw.id"] == gpuUUID {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 && len(points) > 0 {
		return nil, []string{fmt.Sprintf("no point carries hw.id=%s; the capture has hw.id %s",
			gpuUUID, strings.Join(ids, ", "))}
	}
	return kept, nil
}

// measure computes src over the window [from, to]: the mean of a gauge, or
// the per-second rate of a cumulative counter, (last - first) / (time between
// them), averaged over the counter's series when the capture holds several.
// ok is false when the window gives no value.
func measure(points []Point, src source, from, to int64) (value float64, n int, ok bool) {
	var in []Point
	for _, p := range points {
		if src.matches(p) && p.TimeUnixNano >= from && p.TimeUnixNano <= to {
			in = append(in, p)
		}
	}
	if !src.rate {
		if len(in) == 0 {
			return 0, 0, false
		}
		sum := 0.0
		for _, p := range in {
			sum += p.Value
		}
		return sum / float64(len(in)), len(in), true
	}

	series := map[string][]Point{}
	for _, p := range in {
		key := seriesKey(p.Attrs)
		series[key] = append(series[key], p)
	}
	var rates []float64
	for _, s := range series {
		first := slices.MinFunc(s, byTime)
		last := slices.MaxFunc(s, byTime)
		if dt := last.TimeUnixNano - first.TimeUnixNano; dt > 0 {
			rates = append(rates, (last.Value-first.Value)/(float64(dt)/1e9))
		}
	}
	if len(rates) == 0 {
		return 0, len(in), false
	}
	sum := 0.0
	for _, r := range rates {
		sum += r
	}
	return sum / float64(len(rates)), len(in), true
}

func byTime(a, b Point) int { return cmp.Compare(a.TimeUnixNano, b.TimeUnixNano) }

// seriesKey identifies a time series by its attributes (the metric is already
// fixed by the source).
func seriesKey(attrs map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		fmt.Fprintf(&b, "%s=%s\x00", k, attrs[k])
	}
	return b.String()
}

// evaluate runs the first check of exp whose signal is in the capture.
func evaluate(exp expectation, phases map[string]*PhaseReport, chosen map[string]source) Row {
	primary := exp.checks[0]
	for i, c := range exp.checks {
		if _, ok := chosen[c.signal]; !ok {
			continue
		}
		row := c.run(phases[exp.phase], phases)
		if i > 0 {
			row.Check += fmt.Sprintf(" (no %s)", primary.signal)
		}
		return row
	}
	var missing []string
	for _, c := range exp.checks {
		for _, src := range lookupSignal(c.signal).sources {
			missing = append(missing, src.metric)
		}
	}
	return Row{Status: NA, Check: primary.String(), Detail: "not in capture: " + strings.Join(slices.Compact(missing), ", ")}
}

func (c check) String() string {
	op := "<"
	if c.above {
		op = ">"
	}
	if len(c.than) > 0 {
		return fmt.Sprintf("%s %s %s in %s", c.signal, op, c.signal, strings.Join(c.than, ", "))
	}
	return fmt.Sprintf("%s %s %s", c.signal, op, lookupSignal(c.signal).unit.format(c.threshold))
}

// run evaluates c on phase pr, comparing with the other phases where c says so.
func (c check) run(pr *PhaseReport, phases map[string]*PhaseReport) Row {
	row := Row{Check: c.String()}
	v := pr.signal(c.signal)
	if !v.HasValue {
		row.Status, row.Detail = Fail, "no data in this phase's window"
		return row
	}
	holds := func(a, b float64) bool {
		if c.above {
			return a > b
		}
		return a < b
	}
	if len(c.than) == 0 {
		row.Status, row.Detail = statusOf(holds(v.Value, c.threshold)), v.Formatted()
		return row
	}
	ok := true
	var others []string
	for _, name := range c.than {
		other, ran := phases[name]
		if !ran || !other.signal(c.signal).HasValue {
			ok = false
			others = append(others, "no data ("+name+")")
			continue
		}
		ov := other.signal(c.signal)
		ok = ok && holds(v.Value, ov.Value)
		others = append(others, fmt.Sprintf("%s (%s)", ov.Formatted(), name))
	}
	row.Status, row.Detail = statusOf(ok), v.Formatted()+" vs "+strings.Join(others, ", ")
	return row
}

func statusOf(ok bool) Status {
	if ok {
		return Pass
	}
	return Fail
}

func (pr *PhaseReport) signal(name string) SignalValue {
	for _, s := range pr.Signals {
		if s.Name == name {
			return s
		}
	}
	return SignalValue{Name: name}
}

func lookupSignal(name string) signalDef {
	for _, d := range signalDefs {
		if d.name == name {
			return d
		}
	}
	panic("gpucheck: no signal " + name) // the expectations table names an unknown signal
}

// Table renders the report as one fixed-width table: per phase its signals,
// then its expectations, and a final RESULT line.
func (r Report) Table() string {
	const format = "%-10s %-6s %-38s %s\n"
	var b strings.Builder
	gpu := r.GPU
	if gpu == "" {
		gpu = "all GPUs in the capture"
	}
	fmt.Fprintf(&b, "gpu-check: %s; each phase trimmed by %s at both ends\n", gpu, EdgeTrim)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	rule := strings.Repeat("-", 80) + "\n"
	b.WriteString(rule)
	fmt.Fprintf(&b, format, "PHASE", "RESULT", "SIGNAL / EXPECTATION", "VALUE")
	for _, p := range r.Phases {
		b.WriteString(rule)
		name := p.Name
		if p.Ran {
			fmt.Fprintf(&b, format, name, "", "window", fmt.Sprintf("%.1f s", p.Window.Seconds()))
			name = ""
			for _, s := range p.Signals {
				value := s.Formatted()
				if s.HasValue && len(lookupSignal(s.Name).sources) > 1 {
					value += " (" + s.Source + ")"
				}
				fmt.Fprintf(&b, format, "", "", s.Name, value)
			}
		}
		for _, row := range p.Rows {
			fmt.Fprintf(&b, format, name, row.Status, row.Check, row.Detail)
			name = ""
		}
	}
	b.WriteString(rule)
	switch n := r.Failed(); {
	case n > 0:
		fmt.Fprintf(&b, "RESULT: FAIL (%d failed)\n", n)
	case r.Incomplete():
		b.WriteString("RESULT: INCOMPLETE (some expectations could not be checked; see n/a)\n")
	default:
		b.WriteString("RESULT: PASS\n")
	}
	return b.String()
}
