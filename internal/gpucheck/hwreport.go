package gpucheck

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// This file is the analysis behind scripts/hardware-report: CPU time from
// /proc, latency percentiles, the collector configurations of the CPU
// comparisons, and the report's Markdown. All plain functions of plain data,
// so they are tested without a GPU.

// ClockTicksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: 100 on every Linux architecture's ABI (the kernel's own
// HZ may differ; the exported unit does not).
const ClockTicksPerSecond = 100

// ParseProcStat returns utime + stime, in clock ticks, from the contents of
// /proc/<pid>/stat. The second field, the command name, is in parentheses
// and may itself hold spaces and parentheses, so the fields are counted
// from the last ')'.
func ParseProcStat(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no ')' after the command name")
	}
	// After ") ": field 3 (state) is index 0, so utime (14) is 11, stime (15) 12.
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc stat utime: %w", err)
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc stat stime: %w", err)
	}
	return utime + stime, nil
}

// CPUPercent is CPU time over wall time as percent of one core.
func CPUPercent(ticks int64, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(ticks) / ClockTicksPerSecond / wall.Seconds() * 100
}

// CPURun is one measured window of one variant.
type CPURun struct {
	Variant string        `json:"variant"`
	Round   int           `json:"round"`
	Ticks   int64         `json:"ticks"`
	Wall    time.Duration `json:"wall_ns"`
	Percent float64       `json:"percent_of_core"`
	// Evidence is what shows the process did its work in the window (the
	// exports the debug exporter logged, the polls the baseline counted); 0
	// means it did nothing and the figure is worthless.
	Evidence int    `json:"evidence"`
	Error    string `json:"error,omitempty"`
}

// CPUComparison is one A B A B experiment: its variants in order, and every
// window measured.
type CPUComparison struct {
	Name     string   `json:"name"`
	Variants []string `json:"variants"`
	// Command says how each variant was run, for the report.
	Commands map[string]string `json:"commands"`
	Window   time.Duration     `json:"window_ns"`
	GPUs     int               `json:"gpus"`
	Runs     []CPURun          `json:"runs"`
	Skipped  string            `json:"skipped,omitempty"`
}

// Order is the alternation of variants over rounds: A B A B ..., so drift
// (the GPU warming, other load) falls on every variant alike.
func Order(variants []string, rounds int) []string {
	var out []string
	for r := 0; r < rounds; r++ {
		out = append(out, variants...)
	}
	return out
}

// Mean is a variant's mean percent of one core over its good runs, and how
// many there were.
func (c CPUComparison) Mean(variant string) (float64, int) {
	sum, n := 0.0, 0
	for _, r := range c.Runs {
		if r.Variant == variant && r.Error == "" && r.Evidence > 0 {
			sum += r.Percent
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return sum / float64(n), n
}

// LatencyStats summarises one NVML call's latencies.
type LatencyStats struct {
	Call string `json:"call"`
	// Source is "LatencyUsec" when NVML measured the call itself (field
	// values), else "wall" (time around the Go call, cgo included).
	Source string  `json:"source"`
	N      int     `json:"n"`
	Errors int     `json:"errors"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	MaxUs  float64 `json:"max_us"`
	Note   string  `json:"note,omitempty"`
}

// Percentile is the nearest-rank percentile p (0 < p <= 100) of xs; NaN for
// none. xs is not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Summarize fills n, p50, p99 and max from microsecond latencies.
func Summarize(call, source string, us []float64, errs int) LatencyStats {
	st := LatencyStats{Call: call, Source: source, N: len(us), Errors: errs}
	if len(us) > 0 {
		st.P50us, st.P99us, st.MaxUs = Percentile(us, 50), Percentile(us, 99), slices.Max(us)
	}
	return st
}

// GPULatency is the latency probe's result for one GPU.
type GPULatency struct {
	Index int            `json:"index"`
	UUID  string         `json:"uuid"`
	Name  string         `json:"name"`
	Calls []LatencyStats `json:"calls"`
}

// MetricNames lists the metrics a receiver's metadata.yaml declares, sorted.
func MetricNames(metadataYAML []byte) ([]string, error) {
	retrieved, err := confmap.NewRetrievedFromYAML(metadataYAML)
	if err != nil {
		return nil, err
	}
	raw, err := retrieved.AsRaw()
	if err != nil {
		return nil, err
	}
	doc, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("metadata.yaml is not a mapping")
	}
	metrics, ok := doc["metrics"].(map[string]any)
	if !ok || len(metrics) == 0 {
		return nil, errors.New("metadata.yaml has no metrics")
	}
	names := make([]string, 0, len(metrics))
	for name := range metrics {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// PollingMetrics are the receiver's metrics for what a hand-written pynvml
// loop reads (scripts/pynvml-baseline.py): utilisation (GPU and memory
// controller), memory, temperature, power, power limit, PCIe throughput.
var PollingMetrics = []string{
	"hw.gpu.utilization",                                                      // nvmlDeviceGetUtilizationRates.gpu (and encoder/decoder)
	"nvidia.gpu.memory_controller.utilization",                                // nvmlDeviceGetUtilizationRates.memory
	"hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.gpu.memory.utilization", // nvmlDeviceGetMemoryInfo
	"hw.temperature",         // nvmlDeviceGetTemperature
	"hw.power",               // nvmlDeviceGetPowerUsage
	"nvidia.gpu.power.limit", // nvmlDeviceGetEnforcedPowerLimit
	"hw.gpu.io",              // PCIe bytes (counters, or nvmlDeviceGetPcieThroughput)
}

// CostOptions configure a collector whose CPU time is measured: only the
// gpuviz receiver and the debug exporter at basic verbosity (one log line
// per export: the cheapest exporter the distribution has).
type CostOptions struct {
	Interval time.Duration
	// SampleInterval > 0 runs the sampling clock at that tick, flushing
	// every FlushInterval; 0 turns samples off.
	SampleInterval, FlushInterval time.Duration
	// Only, when set, enables just these metrics (all declared in All) and
	// turns processes and Xid events off; empty keeps the receiver's
	// defaults.
	Only, All []string
}

// CostConfig is the collector configuration for one CPU measurement.
func CostConfig(o CostOptions) ([]byte, error) {
	var b strings.Builder
	b.WriteString("# Written by gpuviz-hwreport for one CPU measurement; see scripts/hardware-report.\n")
	fmt.Fprintf(&b, "receivers:\n  gpuviz:\n    backend: nvml\n    collection_interval: %s\n", o.Interval)
	if o.SampleInterval > 0 {
		fmt.Fprintf(&b, "    samples:\n      enabled: true\n      interval: %s\n      flush_interval: %s\n", o.SampleInterval, o.FlushInterval)
	} else {
		b.WriteString("    samples:\n      enabled: false\n")
	}
	if len(o.Only) > 0 {
		for _, m := range o.Only {
			if !slices.Contains(o.All, m) {
				return nil, fmt.Errorf("metric %s is not in the receiver's metadata.yaml", m)
			}
		}
		b.WriteString("    processes:\n      enabled: false\n    xid_events:\n      enabled: false\n    metrics:\n")
		for _, m := range o.All {
			fmt.Fprintf(&b, "      %s:\n        enabled: %t\n", m, slices.Contains(o.Only, m))
		}
	}
	b.WriteString(`exporters:
  debug:
    verbosity: basic
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [gpuviz]
      exporters: [debug]
`)
	return []byte(b.String()), nil
}

// ReportInfo is what the report says about the machine and the run.
type ReportInfo struct {
	Date, GPUName, Driver, CUDA string
	GPUs                        int
	// Commands maps a section (latency, tick, pynvml, gpu-check) to the
	// command that produced it.
	Commands map[string]string
	// GPUCheckStatus is scripts/gpu-check's exit status, -1 when it was not
	// run; GPUCheckSummary its summary table (empty when it did not get that
	// far).
	GPUCheckStatus  int
	GPUCheckSummary string
}

func fmtPercent(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", v)
}

// Markdown renders the report: ready to paste into docs/hardware.md.
// latency, tick and pynvml may be nil for parts that did not run.
func Markdown(info ReportInfo, latency []GPULatency, tick, pynvml *CPUComparison) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s — %s\n\n", info.Date, info.GPUName)
	fmt.Fprintf(&b, "- GPUs: %d × %s; driver %s; CUDA %s (from nvidia-smi)\n\n", info.GPUs, info.GPUName, info.Driver, info.CUDA)

	b.WriteString("#### NVML call latency (per call, per GPU)\n\n")
	if len(latency) == 0 {
		b.WriteString("not measured (see the report's log)\n\n")
	}
	for _, g := range latency {
		fmt.Fprintf(&b, "GPU %d (%s, %s):\n\n", g.Index, g.Name, g.UUID)
		b.WriteString("| call | source | n | errors | p50 µs | p99 µs | max µs | note |\n|---|---|---|---|---|---|---|---|\n")
		for _, c := range g.Calls {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %.1f | %.1f | %.1f | %s |\n", c.Call, c.Source, c.N, c.Errors, c.P50us, c.P99us, c.MaxUs, c.Note)
		}
		b.WriteString("\n")
	}
	writeCommand(&b, info, "latency")

	b.WriteString("#### Sampling clock CPU cost (whole collector: gpuviz receiver + debug exporter)\n\n")
	b.WriteString(ComparisonMarkdown(tick, info.GPUs, true))
	writeCommand(&b, info, "tick")

	b.WriteString("#### Hand-written pynvml loop against the gpuviz receiver, same metrics, same rate\n\n")
	b.WriteString(ComparisonMarkdown(pynvml, info.GPUs, false))
	writeCommand(&b, info, "pynvml")

	b.WriteString("#### gpu-check\n\n")
	status := map[int]string{-1: "not run", 0: "PASS", 1: "FAIL", 2: "could not run (or part of it)"}[info.GPUCheckStatus]
	if status == "" {
		status = "unexpected"
	}
	fmt.Fprintf(&b, "exit status %d: %s\n\n", info.GPUCheckStatus, status)
	if info.GPUCheckSummary != "" {
		b.WriteString("```\n" + strings.TrimRight(info.GPUCheckSummary, "\n") + "\n```\n\n")
	}
	writeCommand(&b, info, "gpu-check")
	return b.String()
}

func writeCommand(b *strings.Builder, info ReportInfo, section string) {
	if cmd := info.Commands[section]; cmd != "" {
		fmt.Fprintf(b, "Command: `%s`\n\n", cmd)
	}
}

// ComparisonMarkdown is the runs of c and its summary: with perGPU (the
// tick), each variant's cost over the first (samples off) per GPU; else (the
// pynvml comparison) the ratio of the first variant to the second.
func ComparisonMarkdown(c *CPUComparison, gpus int, perGPU bool) string {
	var b strings.Builder
	writeComparison(&b, c, gpus, perGPU)
	return b.String()
}

func writeComparison(b *strings.Builder, c *CPUComparison, gpus int, perGPU bool) {
	if c == nil {
		b.WriteString("not measured (see the report's log)\n\n")
		return
	}
	if c.Skipped != "" {
		fmt.Fprintf(b, "could not run: %s\n\n", c.Skipped)
		return
	}
	fmt.Fprintf(b, "%s, alternated, each window %s:\n\n", strings.Join(c.Variants, " / "), c.Window)
	b.WriteString("| round | variant | CPU ticks | wall s | % of one core | evidence | error |\n|---|---|---|---|---|---|---|\n")
	for _, r := range c.Runs {
		fmt.Fprintf(b, "| %d | %s | %d | %.1f | %s | %d | %s |\n", r.Round, r.Variant, r.Ticks, r.Wall.Seconds(), fmtPercent(r.Percent), r.Evidence, r.Error)
	}
	b.WriteString("\n")
	if len(c.Variants) == 0 {
		return
	}
	base, _ := c.Mean(c.Variants[0])
	b.WriteString("| variant | mean % of one core | runs |")
	if perGPU {
		b.WriteString(" over " + c.Variants[0] + ", per GPU |\n|---|---|---|---|\n")
	} else {
		b.WriteString("\n|---|---|---|\n")
	}
	for _, v := range c.Variants {
		m, n := c.Mean(v)
		fmt.Fprintf(b, "| %s | %s | %d |", v, fmtPercent(m), n)
		if perGPU {
			fmt.Fprintf(b, " %s |", fmtPercent((m-base)/float64(max(gpus, 1))))
		}
		b.WriteString("\n")
	}
	if !perGPU && len(c.Variants) == 2 {
		other, _ := c.Mean(c.Variants[1])
		ratio := base / other
		s := "n/a"
		if !math.IsNaN(ratio) && !math.IsInf(ratio, 0) {
			s = fmt.Sprintf("%.2f", ratio)
		}
		fmt.Fprintf(b, "\nratio %s / %s: %s\n", c.Variants[0], c.Variants[1], s)
	}
	fmt.Fprintf(b, "\nResolution: one clock tick is %d ms of CPU; a %s window resolves %.3f%% of one core.\n\n",
		1000/ClockTicksPerSecond, c.Window, CPUPercent(1, c.Window))
}
