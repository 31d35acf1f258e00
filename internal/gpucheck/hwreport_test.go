package gpucheck

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
)

// SYNTHETIC: /proc contents, latencies and runs made up here.

func TestParseProcStat(t *testing.T) {
	// Fields after the name: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime ...
	stat := "4242 (otel col) (x)) S 1 4242 4242 0 -1 4194304 100 0 0 0 1234 567 0 0 20 0 12 0 100 0 0\n"
	ticks, err := ParseProcStat(stat)
	require.NoError(t, err)
	assert.Equal(t, int64(1234+567), ticks, "the name's spaces and parentheses do not shift the fields")

	for _, bad := range []string{"", "4242 (x S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194304 100 0 0 0 abc 567"} {
		_, err := ParseProcStat(bad)
		assert.Error(t, err, bad)
	}

	// This process's own stat parses (Linux only, as the report is).
	if data, err := os.ReadFile("/proc/self/stat"); err == nil {
		_, err := ParseProcStat(string(data))
		assert.NoError(t, err)
	}
}

func TestCPUPercent(t *testing.T) {
	assert.InDelta(t, 5.0, CPUPercent(100, 20*time.Second), 1e-12) // 1 s of CPU in 20 s
	assert.InDelta(t, 150.0, CPUPercent(300, 2*time.Second), 1e-12)
	assert.Zero(t, CPUPercent(10, 0))
}

func TestOrderAlternates(t *testing.T) {
	assert.Equal(t, []string{"a", "b", "a", "b"}, Order([]string{"a", "b"}, 2))
	assert.Equal(t, []string{"off", "250ms", "100ms", "off", "250ms", "100ms"}, Order([]string{"off", "250ms", "100ms"}, 2))
}

func TestCPUComparisonMean(t *testing.T) {
	c := CPUComparison{Variants: []string{"a", "b"}, Runs: []CPURun{
		{Variant: "a", Percent: 1, Evidence: 3},
		{Variant: "a", Percent: 3, Evidence: 3},
		{Variant: "a", Percent: 100, Evidence: 0},             // did nothing: not counted
		{Variant: "a", Percent: 100, Evidence: 3, Error: "x"}, // failed: not counted
		{Variant: "b", Percent: 8, Evidence: 1},
	}}
	m, n := c.Mean("a")
	assert.Equal(t, 2.0, m)
	assert.Equal(t, 2, n)
	m, n = c.Mean("none")
	assert.True(t, math.IsNaN(m))
	assert.Zero(t, n)
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	assert.Equal(t, 5.0, Percentile(xs, 50))
	assert.Equal(t, 10.0, Percentile(xs, 99))
	assert.Equal(t, 1.0, Percentile(xs, 1))
	assert.Equal(t, 5.0, xs[0], "the input is not sorted in place")
	assert.True(t, math.IsNaN(Percentile(nil, 50)))

	st := Summarize("GetPowerUsage", "wall", []float64{10, 30, 20}, 2)
	assert.Equal(t, LatencyStats{Call: "GetPowerUsage", Source: "wall", N: 3, Errors: 2, P50us: 20, P99us: 30, MaxUs: 30}, st)
}

func TestMetricNamesOfTheReceiver(t *testing.T) {
	data, err := os.ReadFile("../../receiver/gpuvizreceiver/metadata.yaml")
	require.NoError(t, err)
	names, err := MetricNames(data)
	require.NoError(t, err)
	for _, m := range append(PollingMetrics, "hw.energy", "nvidia.gpu.tensor.activity") {
		assert.Contains(t, names, m, "the comparison and the check read metrics the receiver declares")
	}

	_, err = MetricNames([]byte("attributes: {}\n"))
	assert.Error(t, err)
}

func TestCostConfig(t *testing.T) {
	all := []string{"hw.energy", "hw.gpu.utilization", "hw.power", "nvidia.gpu.info"}
	cfg, err := CostConfig(CostOptions{Interval: time.Second, Only: []string{"hw.gpu.utilization", "hw.power"}, All: all})
	require.NoError(t, err)
	conf := confOf(t, cfg)
	for key, want := range map[string]any{
		"receivers::gpuviz::backend":                              "nvml",
		"receivers::gpuviz::collection_interval":                  "1s",
		"receivers::gpuviz::samples::enabled":                     false,
		"receivers::gpuviz::processes::enabled":                   false,
		"receivers::gpuviz::xid_events::enabled":                  false,
		"receivers::gpuviz::metrics::hw.energy::enabled":          false,
		"receivers::gpuviz::metrics::nvidia.gpu.info::enabled":    false,
		"receivers::gpuviz::metrics::hw.gpu.utilization::enabled": true,
		"receivers::gpuviz::metrics::hw.power::enabled":           true,
		"exporters::debug::verbosity":                             "basic",
		"service::pipelines::metrics::receivers":                  []any{"gpuviz"},
		"service::pipelines::metrics::exporters":                  []any{"debug"},
	} {
		assert.Equal(t, want, conf.Get(key), key)
	}
	assert.Nil(t, conf.Get("processors"), "nothing but the receiver and the exporter")

	cfg, err = CostConfig(CostOptions{Interval: 10 * time.Second, SampleInterval: 100 * time.Millisecond, FlushInterval: time.Second})
	require.NoError(t, err)
	conf = confOf(t, cfg)
	assert.Equal(t, true, conf.Get("receivers::gpuviz::samples::enabled"))
	assert.Equal(t, "100ms", conf.Get("receivers::gpuviz::samples::interval"))
	assert.Equal(t, "1s", conf.Get("receivers::gpuviz::samples::flush_interval"))
	assert.Nil(t, conf.Get("receivers::gpuviz::metrics"), "the receiver's default metrics")
	assert.Nil(t, conf.Get("receivers::gpuviz::processes"), "the receiver's default processes")

	_, err = CostConfig(CostOptions{Interval: time.Second, Only: []string{"hw.nope"}, All: all})
	assert.Error(t, err, "a metric the receiver does not declare")
}

func confOf(t *testing.T, yaml []byte) *confmap.Conf {
	t.Helper()
	retrieved, err := confmap.NewRetrievedFromYAML(yaml)
	require.NoError(t, err)
	conf, err := retrieved.AsConf()
	require.NoError(t, err)
	return conf
}

func TestMarkdown(t *testing.T) {
	info := ReportInfo{Date: "2026-12-01", GPUName: "NVIDIA H200", Driver: "570.1", CUDA: "12.8", GPUs: 2,
		Commands:       map[string]string{"latency": "_build/gpuviz-hwreport latency", "gpu-check": "scripts/gpu-check"},
		GPUCheckStatus: 1, GPUCheckSummary: "RESULT: FAIL (1 failed)\n"}
	lat := []GPULatency{{Index: 0, UUID: "GPU-x", Name: "NVIDIA H200", Calls: []LatencyStats{
		{Call: "GetPowerUsage", Source: "wall", N: 200, P50us: 12.5, P99us: 40, MaxUs: 80}}}}
	tick := &CPUComparison{Variants: []string{"off", "250ms"}, Window: 15 * time.Second, Runs: []CPURun{
		{Variant: "off", Round: 1, Ticks: 15, Wall: 15 * time.Second, Percent: 1, Evidence: 2},
		{Variant: "250ms", Round: 1, Ticks: 45, Wall: 15 * time.Second, Percent: 3, Evidence: 2},
		{Variant: "off", Round: 2, Ticks: 15, Wall: 15 * time.Second, Percent: 1, Evidence: 2},
		{Variant: "250ms", Round: 2, Ticks: 75, Wall: 15 * time.Second, Percent: 5, Evidence: 2},
	}}
	py := &CPUComparison{Variants: []string{"pynvml", "gpuviz"}, Window: 20 * time.Second, Runs: []CPURun{
		{Variant: "pynvml", Round: 1, Percent: 3, Evidence: 20}, {Variant: "gpuviz", Round: 1, Percent: 1.5, Evidence: 20},
	}}
	md := Markdown(info, lat, tick, py)
	for _, want := range []string{
		"### 2026-12-01 — NVIDIA H200",
		"- GPUs: 2 × NVIDIA H200; driver 570.1; CUDA 12.8 (from nvidia-smi)",
		"| GetPowerUsage | wall | 200 | 0 | 12.5 | 40.0 | 80.0 |  |",
		"Command: `_build/gpuviz-hwreport latency`",
		"| 250ms | 4.00% | 2 | 1.50% |", // (4 - 1) / 2 GPUs
		"| off | 1.00% | 2 | 0.00% |",
		"ratio pynvml / gpuviz: 2.00",
		"a 15s window resolves 0.067% of one core",
		"exit status 1: FAIL",
		"RESULT: FAIL (1 failed)",
		"Command: `scripts/gpu-check`",
	} {
		assert.Contains(t, md, want)
	}

	md = Markdown(info, nil, nil, &CPUComparison{Skipped: "pynvml is not installed"})
	assert.Contains(t, md, "could not run: pynvml is not installed")
	assert.Equal(t, 2, strings.Count(md, "not measured (see the report's log)"))

	// render's --gpu-check-status default, -1, is documented as "not run".
	info.GPUCheckStatus, info.GPUCheckSummary = -1, ""
	assert.Contains(t, Markdown(info, nil, nil, nil), "exit status -1: not run")
}
