package gpucheck

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Everything below is SYNTHETIC: captures made up in the test, shaped like
// what the collector exports for one GPU scraped once a second, with levels
// chosen per phase. None of it was recorded on hardware.

const (
	synthGPU   = "GPU-synthetic-0"
	otherGPU   = "GPU-synthetic-1"
	t0         = int64(1_700_000_000_000_000_000) // an arbitrary Unix time in ns
	phaseLen   = 20 * time.Second
	scrapeStep = time.Second
)

// synthPhases are the four expected phases, 20 s each, back to back from t0.
func synthPhases() []Phase {
	var phases []Phase
	for i, name := range ExpectedPhases {
		start := t0 + int64(i)*int64(phaseLen)
		phases = append(phases, Phase{Name: name, Start: start, End: start + int64(phaseLen)})
	}
	return phases
}

// series is one synthetic time series: a gauge, or, with counter set, a
// cumulative counter whose level is its rate per second.
type series struct {
	metric  string
	attrs   map[string]string
	counter bool
}

var synthSeries = map[string]series{
	"util":     {metric: "hw.gpu.utilization", attrs: map[string]string{"hw.gpu.task": "general"}},
	"encoder":  {metric: "hw.gpu.utilization", attrs: map[string]string{"hw.gpu.task": "encoder"}},
	"sm":       {metric: "nvidia.gpu.sm.activity"},
	"tensor":   {metric: "nvidia.gpu.tensor.activity"},
	"dram":     {metric: "nvidia.gpu.dram.activity"},
	"memctl":   {metric: "nvidia.gpu.memory_controller.utilization"},
	"power":    {metric: "hw.power"},
	"io_rx":    {metric: "hw.gpu.io", attrs: map[string]string{"network.io.direction": "receive"}, counter: true},
	"io_tx":    {metric: "hw.gpu.io", attrs: map[string]string{"network.io.direction": "transmit"}, counter: true},
	"pcie_rx":  {metric: "nvidia.gpu.pcie.throughput", attrs: map[string]string{"network.io.direction": "receive"}},
	"sm_clock": {metric: "nvidia.gpu.clock.frequency", attrs: map[string]string{"nvidia.gpu.clock.domain": "sm"}},
	"mem_clk":  {metric: "nvidia.gpu.clock.frequency", attrs: map[string]string{"nvidia.gpu.clock.domain": "memory"}},
	"throttle": {metric: "nvidia.gpu.throttle.active", attrs: map[string]string{"nvidia.gpu.throttle.reason": "sw_power_cap"}},
}

// levels gives, per phase, the level of each synthetic series (keys of
// synthSeries).
type levels map[string]map[string]float64

// goodLevels is a made-up GPU that shows every expected signature.
func goodLevels() levels {
	return levels{
		PhaseIdle: {"util": 0, "encoder": 0, "sm": 0, "tensor": 0, "dram": 0, "memctl": 0, "power": 80,
			"io_rx": 0.01e9, "io_tx": 0.01e9, "pcie_rx": 0.01e9, "sm_clock": 345e6, "mem_clk": 2619e6, "throttle": 0},
		PhaseMatmul: {"util": 1, "encoder": 0, "sm": 0.97, "tensor": 0.7, "dram": 0.2, "memctl": 0.3, "power": 690,
			"io_rx": 0.01e9, "io_tx": 0.01e9, "pcie_rx": 0.01e9, "sm_clock": 1755e6, "mem_clk": 2619e6, "throttle": 0.5},
		PhaseD2DCopy: {"util": 1, "encoder": 0, "sm": 0.3, "tensor": 0, "dram": 0.9, "memctl": 0.95, "power": 450,
			"io_rx": 0.01e9, "io_tx": 0.01e9, "pcie_rx": 0.01e9, "sm_clock": 1980e6, "mem_clk": 2619e6, "throttle": 0},
		PhaseH2DCopy: {"util": 0.9, "encoder": 0, "sm": 0.01, "tensor": 0, "dram": 0.05, "memctl": 0.05, "power": 150,
			"io_rx": 25e9, "io_tx": 0.1e9, "pcie_rx": 25e9, "sm_clock": 1980e6, "mem_clk": 2619e6, "throttle": 0},
	}
}

// without returns lv with the named series removed from every phase.
func (lv levels) without(names ...string) levels {
	for _, phase := range lv {
		for _, n := range names {
			delete(phase, n)
		}
	}
	return lv
}

// synth makes the capture of GPU gpu: a point per series every second over
// the phases, with the level of the phase the second falls in; counters
// integrate their rate from 0.
func synth(gpu string, lv levels) []Point {
	phases := synthPhases()
	end := phases[len(phases)-1].End
	phaseAt := func(t int64) string {
		for _, p := range phases {
			if t >= p.Start && t < p.End {
				return p.Name
			}
		}
		return PhaseH2DCopy
	}
	var points []Point
	for name, s := range synthSeries {
		if _, ok := lv[PhaseIdle][name]; !ok {
			continue
		}
		total := 0.0
		for t := t0; t <= end; t += int64(scrapeStep) {
			value := lv[phaseAt(t)][name]
			if s.counter {
				value = total
				// The second from t to t+1 s belongs to the phase t is in.
				total += lv[phaseAt(t)][name] * scrapeStep.Seconds()
			}
			attrs := map[string]string{"hw.id": gpu, "hw.name": "GPU 0"}
			for k, v := range s.attrs {
				attrs[k] = v
			}
			points = append(points, Point{Metric: s.metric, Attrs: attrs, TimeUnixNano: t, Value: value})
		}
	}
	return points
}

// rowsOf lists a phase's rows as "STATUS check", for compact assertions.
func rowsOf(t *testing.T, rep Report, phase string) []string {
	t.Helper()
	for _, p := range rep.Phases {
		if p.Name == phase {
			var rows []string
			for _, r := range p.Rows {
				rows = append(rows, string(r.Status)+" "+r.Check)
			}
			return rows
		}
	}
	t.Fatalf("no phase %s in the report", phase)
	return nil
}

func signalOf(t *testing.T, rep Report, phase, signal string) SignalValue {
	t.Helper()
	for _, p := range rep.Phases {
		if p.Name == phase {
			return p.signal(signal)
		}
	}
	t.Fatalf("no phase %s in the report", phase)
	return SignalValue{}
}

func TestAnalyze(t *testing.T) {
	tests := []struct {
		name       string
		points     []Point
		phases     []Phase
		ok         bool
		failed     int
		rows       map[string][]string // phase → expected rows, when checked
		notesMatch string
	}{{
		name:   "every signature shows",
		points: synth(synthGPU, goodLevels()),
		phases: synthPhases(),
		ok:     true,
		rows: map[string][]string{
			PhaseIdle:    {"PASS util < 0.10", "PASS power < power in matmul"},
			PhaseMatmul:  {"PASS util > 0.90", "PASS tensor > 0.30", "PASS tensor > tensor in d2d_copy, h2d_copy"},
			PhaseD2DCopy: {"PASS dram > 0.50", "PASS dram > dram in matmul"},
			PhaseH2DCopy: {"PASS pcie_rx > 2.0 GB/s", "PASS pcie_rx > pcie_rx in idle, matmul"},
		},
	}, {
		name: "d2d copy with low DRAM activity fails its rows",
		points: synth(synthGPU, func() levels {
			lv := goodLevels()
			lv[PhaseD2DCopy]["dram"] = 0.1
			return lv
		}()),
		phases: synthPhases(),
		failed: 2,
		rows: map[string][]string{
			PhaseD2DCopy: {"FAIL dram > 0.50", "FAIL dram > dram in matmul"},
			PhaseMatmul:  {"PASS util > 0.90", "PASS tensor > 0.30", "PASS tensor > tensor in d2d_copy, h2d_copy"},
		},
	}, {
		name:   "without GPM the GPM rows are n/a and the fallbacks pass",
		points: synth(synthGPU, goodLevels().without("sm", "tensor", "dram", "pcie_rx")),
		phases: synthPhases(),
		ok:     true,
		rows: map[string][]string{
			PhaseMatmul:  {"PASS util > 0.90", "n/a tensor > 0.30", "n/a tensor > tensor in d2d_copy, h2d_copy"},
			PhaseD2DCopy: {"PASS memctl > 0.50 (no dram)", "PASS memctl > memctl in matmul (no dram)"},
			PhaseH2DCopy: {"PASS pcie_rx > 2.0 GB/s", "PASS pcie_rx > pcie_rx in idle, matmul"},
		},
	}, {
		name:   "the PCIe GPM gauge stands in for the hw.gpu.io counter",
		points: synth(synthGPU, goodLevels().without("io_rx", "io_tx")),
		phases: synthPhases(),
		ok:     true,
		rows: map[string][]string{
			PhaseH2DCopy: {"PASS pcie_rx > 2.0 GB/s", "PASS pcie_rx > pcie_rx in idle, matmul"},
		},
	}, {
		name: "only the GPU the workload ran on counts",
		points: append(synth(synthGPU, goodLevels()), synth(otherGPU, func() levels {
			// The other GPU is idle throughout: were it counted, matmul's
			// utilisation would be averaged down to 0.5 and fail.
			lv := goodLevels()
			for _, phase := range ExpectedPhases {
				lv[phase] = goodLevels()[PhaseIdle]
			}
			return lv
		}())...),
		phases: synthPhases(),
		ok:     true,
	}, {
		name:   "phases with none of their signals fail with no signal",
		points: synth(synthGPU, goodLevels().without("sm", "tensor", "dram", "memctl", "io_rx", "io_tx", "pcie_rx")),
		phases: synthPhases(),
		failed: 2,
		rows: map[string][]string{
			PhaseIdle:    {"PASS util < 0.10", "PASS power < power in matmul"},
			PhaseMatmul:  {"PASS util > 0.90", "n/a tensor > 0.30", "n/a tensor > tensor in d2d_copy, h2d_copy"},
			PhaseD2DCopy: {"n/a dram > 0.50", "n/a dram > dram in matmul", "FAIL no signal"},
			PhaseH2DCopy: {"n/a pcie_rx > 2.0 GB/s", "n/a pcie_rx > pcie_rx in idle, matmul", "FAIL no signal"},
		},
	}, {
		name:   "an expected phase that did not run fails, and so do comparisons with it",
		points: synth(synthGPU, goodLevels()),
		phases: synthPhases()[:3],
		failed: 2,
		rows: map[string][]string{
			PhaseMatmul:  {"PASS util > 0.90", "PASS tensor > 0.30", "FAIL tensor > tensor in d2d_copy, h2d_copy"},
			PhaseH2DCopy: {"FAIL phase ran"},
		},
	}, {
		name:       "no point of the workload's GPU",
		points:     synth(otherGPU, goodLevels()),
		phases:     synthPhases(),
		failed:     3, // matmul, d2d_copy and h2d_copy: no signal
		notesMatch: "no point carries hw.id=" + synthGPU,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Analyze(tt.points, tt.phases, synthGPU)
			assert.Equal(t, tt.ok, rep.OK(), rep.Table())
			assert.Equal(t, tt.failed, rep.Failed(), rep.Table())
			for phase, want := range tt.rows {
				assert.Equal(t, want, rowsOf(t, rep, phase), "phase %s\n%s", phase, rep.Table())
			}
			if tt.notesMatch != "" {
				require.Len(t, rep.Notes, 1)
				assert.Contains(t, rep.Notes[0], tt.notesMatch)
			} else {
				assert.Empty(t, rep.Notes)
			}
		})
	}
}

func TestAnalyzeValues(t *testing.T) {
	rep := Analyze(synth(synthGPU, goodLevels()), synthPhases(), synthGPU)

	// Gauges: the mean of the phase's level; the other clock domain and the
	// encoder's utilisation are not mixed in.
	assert.Equal(t, 1.0, signalOf(t, rep, PhaseMatmul, "util").Value)
	assert.Equal(t, 1755e6, signalOf(t, rep, PhaseMatmul, "sm_clock").Value)
	assert.Equal(t, 0.5, signalOf(t, rep, PhaseMatmul, "throttle_power").Value)
	assert.Equal(t, 80.0, signalOf(t, rep, PhaseIdle, "power").Value)

	// The counter: the window [t+2 s, t+18 s] holds 17 points, and the rate is
	// the known slope of the receive series only (transmit is 0.1 GB/s).
	rx := signalOf(t, rep, PhaseH2DCopy, "pcie_rx")
	assert.Equal(t, "hw.gpu.io rate", rx.Source)
	assert.Equal(t, 17, rx.Points)
	assert.InDelta(t, 25e9, rx.Value, 1)
	assert.InDelta(t, 0.01e9, signalOf(t, rep, PhaseIdle, "pcie_rx").Value, 1)

	// The gauge alternative is only used when the counter is absent.
	lv := goodLevels()
	lv[PhaseH2DCopy]["pcie_rx"] = 3e9
	rep = Analyze(synth(synthGPU, lv.without("io_rx", "io_tx")), synthPhases(), synthGPU)
	rx = signalOf(t, rep, PhaseH2DCopy, "pcie_rx")
	assert.Equal(t, "nvidia.gpu.pcie.throughput", rx.Source)
	assert.InDelta(t, 3e9, rx.Value, 1)

	// Absent metrics are n/a, not zero.
	rep = Analyze(synth(synthGPU, goodLevels().without("tensor")), synthPhases(), synthGPU)
	assert.Equal(t, "n/a", signalOf(t, rep, PhaseMatmul, "tensor").Formatted())
}

func TestAnalyzeTrimsPhaseEdges(t *testing.T) {
	points := synth(synthGPU, goodLevels())
	matmul := synthPhases()[1]
	// Utilisation of 0 in the first 2 s of matmul, and in its last 2 s but
	// one: trimmed away, they must not lower the mean. The points just inside
	// the window count.
	for i, p := range points {
		if p.Metric != "hw.gpu.utilization" || p.Attrs["hw.gpu.task"] != "general" {
			continue
		}
		switch p.TimeUnixNano - matmul.Start {
		case 0, int64(time.Second), int64(19 * time.Second):
			points[i].Value = 0
		case int64(2 * time.Second), int64(18 * time.Second):
			points[i].Value = 0.5
		}
	}
	rep := Analyze(points, synthPhases(), synthGPU)
	util := signalOf(t, rep, PhaseMatmul, "util")
	assert.Equal(t, 17, util.Points)
	assert.InDelta(t, 16.0/17, util.Value, 1e-12)
	assert.Equal(t, 16*time.Second, rep.Phases[1].Window)

	// A phase shorter than both trims has no window: no data, and its
	// expectations fail rather than pass on nothing.
	short := synthPhases()
	short[1].End = short[1].Start + int64(3*time.Second)
	rep = Analyze(synth(synthGPU, goodLevels()), short, synthGPU)
	assert.Equal(t, "no data in window", signalOf(t, rep, PhaseMatmul, "util").Formatted())
	assert.Contains(t, rowsOf(t, rep, PhaseMatmul), "FAIL util > 0.90")
}

func TestAnalyzeWithoutGPUUUID(t *testing.T) {
	points := append(synth(synthGPU, goodLevels()), synth(otherGPU, goodLevels())...)
	rep := Analyze(points, synthPhases(), "")
	assert.True(t, rep.OK(), rep.Table())
	require.Len(t, rep.Notes, 1)
	assert.Contains(t, rep.Notes[0], "averaged over 2 GPUs")
	// Two counter series, one per GPU: the rate is theirs, not that of their
	// interleaved points.
	assert.InDelta(t, 25e9, signalOf(t, rep, PhaseH2DCopy, "pcie_rx").Value, 1)
}

func TestTable(t *testing.T) {
	lv := goodLevels()
	lv[PhaseD2DCopy]["dram"] = 0.1
	table := Analyze(synth(synthGPU, lv.without("tensor")), synthPhases(), synthGPU).Table()

	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	assert.Equal(t, "RESULT: FAIL (2 failed)", lines[len(lines)-1])
	for _, want := range []string{
		"gpu-check: " + synthGPU,
		"PHASE      RESULT SIGNAL / EXPECTATION                   VALUE",
		"idle              window                                 16.0 s",
		"                  power                                  80 W",
		"                  sm_clock                               345 MHz",
		"                  tensor                                 n/a",
		"                  pcie_rx                                25.0 GB/s (hw.gpu.io rate)",
		"           PASS   util < 0.10                            0.00",
		"           PASS   power < power in matmul                80 W vs 690 W (matmul)",
		"d2d_copy          window",
		"           FAIL   dram > 0.50                            0.10",
		"           n/a    tensor > 0.30                          not in capture: nvidia.gpu.tensor.activity",
		"           n/a    tensor > tensor in d2d_copy, h2d_copy  not in capture: nvidia.gpu.tensor.activity",
	} {
		assert.Contains(t, table, want)
	}

	pass := Analyze(synth(synthGPU, goodLevels()), synthPhases(), synthGPU).Table()
	assert.True(t, strings.HasSuffix(pass, "\nRESULT: PASS\n"), pass)

	// Without GPM nothing fails, but the tensor rows were not checked: not
	// a PASS.
	noGPM := Analyze(synth(synthGPU, goodLevels().without("sm", "tensor", "dram")), synthPhases(), synthGPU)
	assert.True(t, noGPM.OK())
	assert.True(t, noGPM.Incomplete())
	assert.True(t, strings.HasSuffix(noGPM.Table(), "\nRESULT: INCOMPLETE (some expectations could not be checked; see n/a)\n"), noGPM.Table())
}

func TestFromMetrics(t *testing.T) {
	md := pmetric.NewMetrics()
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
	ts := pcommon.Timestamp(t0)

	power := sm.Metrics().AppendEmpty()
	power.SetName("hw.power")
	dp := power.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(ts)
	dp.SetDoubleValue(312.5)
	dp.Attributes().PutStr("hw.id", synthGPU)

	io := sm.Metrics().AppendEmpty()
	io.SetName("hw.gpu.io")
	sum := io.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp = sum.DataPoints().AppendEmpty()
	dp.SetTimestamp(ts + 1)
	dp.SetIntValue(1 << 40)
	dp.Attributes().PutStr("hw.id", synthGPU)
	dp.Attributes().PutStr("network.io.direction", "receive")
	dp.Attributes().PutInt("nvidia.gpu.index", 3)

	// Skipped: a histogram, and a data point without a value.
	sm.Metrics().AppendEmpty().SetEmptyHistogram().DataPoints().AppendEmpty().SetCount(1)
	empty := sm.Metrics().AppendEmpty()
	empty.SetName("empty")
	empty.SetEmptyGauge().DataPoints().AppendEmpty()

	assert.Equal(t, []Point{
		{Metric: "hw.power", Attrs: map[string]string{"hw.id": synthGPU}, TimeUnixNano: t0, Value: 312.5},
		{Metric: "hw.gpu.io", Attrs: map[string]string{"hw.id": synthGPU, "network.io.direction": "receive", "nvidia.gpu.index": "3"},
			TimeUnixNano: t0 + 1, Value: 1 << 40},
	}, FromMetrics(md))
}

func TestWorkloadAddLine(t *testing.T) {
	var wl Workload
	for _, line := range []string{
		`{"gpu_uuid": "GPU-synthetic-0"}`,
		``,
		`{"phase": "idle", "start_unix_nano": 10, "end_unix_nano": 20}`,
		`{"phase": "matmul", "start_unix_nano": 20, "end_unix_nano": 30}`,
	} {
		require.NoError(t, wl.AddLine(line))
	}
	assert.Equal(t, Workload{GPUUUID: "GPU-synthetic-0", Phases: []Phase{
		{Name: "idle", Start: 10, End: 20}, {Name: "matmul", Start: 20, End: 30},
	}}, wl)

	for _, bad := range []string{
		`Using cuBLAS workspace`,
		`{"phase": "d2d_copy", "start_unix_nano": 30}`,
		`{"phase": "d2d_copy", "start_unix_nano": 40, "end_unix_nano": 30}`,
		`{"step": 1}`,
	} {
		assert.Error(t, wl.AddLine(bad), bad)
	}
	assert.Len(t, wl.Phases, 2)
}

// exportBody is an OTLP ExportMetricsServiceRequest as the otlphttp exporter
// sends it (same wire format as MetricsData), built from a one-point gauge.
func exportBody(t *testing.T) []byte {
	t.Helper()
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("hw.gpu.utilization")
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.Timestamp(t0))
	dp.SetDoubleValue(0.75)
	dp.Attributes().PutStr("hw.gpu.task", "general")
	body, err := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	require.NoError(t, err)
	return body
}

func TestHandler(t *testing.T) {
	capture := &Capture{}
	srv := httptest.NewServer(capture.Handler())
	defer srv.Close()

	post := func(contentType, encoding string, body []byte) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/metrics", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}

	resp := post("application/x-protobuf", "", exportBody(t))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/x-protobuf", resp.Header.Get("Content-Type"))

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(exportBody(t))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	assert.Equal(t, http.StatusOK, post("application/x-protobuf", "gzip", gz.Bytes()).StatusCode)

	want := Point{Metric: "hw.gpu.utilization", Attrs: map[string]string{"hw.gpu.task": "general"}, TimeUnixNano: t0, Value: 0.75}
	assert.Equal(t, []Point{want, want}, capture.Points())

	assert.Equal(t, http.StatusUnsupportedMediaType, post("application/json", "", []byte("{}")).StatusCode)
	assert.Equal(t, http.StatusUnsupportedMediaType, post("application/x-protobuf", "zstd", exportBody(t)).StatusCode)
	assert.Equal(t, http.StatusBadRequest, post("application/x-protobuf", "gzip", []byte("not gzip")).StatusCode)
	assert.Equal(t, http.StatusBadRequest, post("application/x-protobuf", "", []byte{0xff, 0xff, 0xff}).StatusCode)
	assert.Len(t, capture.Points(), 2, "rejected requests add nothing")

	get, err := srv.Client().Get(srv.URL + "/v1/metrics")
	require.NoError(t, err)
	get.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, get.StatusCode)
}

func TestCollectorConfig(t *testing.T) {
	retrieved, err := confmap.NewRetrievedFromYAML(CollectorConfig(CollectorOptions{
		Endpoint: "http://127.0.0.1:4318", OTLPAddr: "127.0.0.1:4319",
		Interval: 1500 * time.Millisecond, SampleInterval: 250 * time.Millisecond, FlushInterval: time.Second,
	}))
	require.NoError(t, err)
	conf, err := retrieved.AsConf()
	require.NoError(t, err)
	for key, want := range map[string]any{
		"receivers::gpuviz::backend":                 "nvml",
		"receivers::gpuviz::collection_interval":     "1.5s",
		"receivers::gpuviz::samples::enabled":        true,
		"receivers::gpuviz::samples::interval":       "250ms",
		"receivers::gpuviz::samples::flush_interval": "1s",
		"receivers::otlp::protocols::http::endpoint": "127.0.0.1:4319",
		"exporters::otlp_http::endpoint":             "http://127.0.0.1:4318",
		"exporters::otlp_http::compression":          "none",
		"exporters::otlp_http::tls::insecure":        true,
		"service::telemetry::metrics::level":         "none",
		"service::pipelines::metrics::receivers":     []any{"gpuviz"},
		"service::pipelines::metrics::processors":    []any{"gpuviz"},
		"service::pipelines::metrics::exporters":     []any{"otlp_http"},
		"service::pipelines::traces::receivers":      []any{"otlp"},
		"service::pipelines::traces::processors":     []any{"gpuviz"},
		"service::pipelines::traces::exporters":      []any{"otlp_http"},
	} {
		assert.Equal(t, want, conf.Get(key), key)
	}
	assert.True(t, conf.IsSet("processors::gpuviz"), "the processor is configured")
}
