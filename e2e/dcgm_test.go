//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/gpuviz/gpuviz/internal/procs"
)

// dcgmScrapeInterval is the test's scrape interval: shorter than
// dcgm-exporter's 30 s default so the test takes under a minute, longer
// than the processor's max_wait (dcgmMaxWait) so spans are released only
// because the processor waits for the GPUs' observed sample spacing.
const (
	dcgmScrapeInterval = 10 * time.Second
	dcgmMaxWait        = 6 * time.Second
)

// dcgmGPU is one GPU of the stand-in dcgm-exporter: constant readings, and
// counters that grow at them from the fixture's start.
type dcgmGPU struct {
	uuid, pod                       string
	powerW, grActive, gpuUtilPct    float64
	smActive, tensor, dram, memCopy float64
	fbUsedMiB, fbFreeMiB            float64
	powerViolationShare             float64
	clockEventReasons               int
}

var dcgmGPUs = []dcgmGPU{
	{uuid: "GPU-8f6c2b3e-1d4a-4c0b-9e5f-7a1b2c3d4e50", pod: "vllm-0", powerW: 350, grActive: 0.9, gpuUtilPct: 97,
		smActive: 0.7, tensor: 0.4, dram: 0.6, memCopy: 55, fbUsedMiB: 120000, fbFreeMiB: 23000, clockEventReasons: 0},
	{uuid: "GPU-8f6c2b3e-1d4a-4c0b-9e5f-7a1b2c3d4e51", pod: "vllm-1", powerW: 250, grActive: 0.75, gpuUtilPct: 80,
		smActive: 0.5, tensor: 0.2, dram: 0.8, memCopy: 70, fbUsedMiB: 100000, fbFreeMiB: 43000,
		powerViolationShare: 0.1, clockEventReasons: 0x4},
}

// dcgmFixture serves /metrics as dcgm-exporter 4.x does with its default
// counters (etc/default-counters.csv) and the profiling fields of
// etc/dcp-metrics-included.csv, plus SM_ACTIVE, the NVLink rates, the
// clock event reasons and the violation counters a custom counters file
// enables; its label set (gpu, UUID, pci_bus_id, device, modelName,
// Hostname, DCGM_FI_DRIVER_VERSION) with the Kubernetes mapping's
// container, namespace and pod.
type dcgmFixture struct {
	start time.Time
	mu    sync.Mutex
	times []time.Time // when each scrape was served
}

type dcgmField struct {
	name, typ, help string
	value           func(g dcgmGPU, elapsed float64) string
}

func intv(v float64) string { return fmt.Sprintf("%d", int64(v)) }
func flt(v float64) string  { return fmt.Sprintf("%.6f", v) }

var dcgmFields = []dcgmField{
	{"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", func(dcgmGPU, float64) string { return "1980" }},
	{"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", func(dcgmGPU, float64) string { return "3201" }},
	{"DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", func(dcgmGPU, float64) string { return "48" }},
	{"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", func(dcgmGPU, float64) string { return "61" }},
	{"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", func(g dcgmGPU, _ float64) string { return flt(g.powerW) }},
	{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
		func(g dcgmGPU, s float64) string { return intv(812_345_678 + g.powerW*s*1000) }},
	{"DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "Total number of bytes transmitted through PCIe TX (in KB) via NVML.", func(dcgmGPU, float64) string { return "1210" }},
	{"DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "Total number of bytes received through PCIe RX (in KB) via NVML.", func(dcgmGPU, float64) string { return "3470" }},
	{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", func(g dcgmGPU, _ float64) string { return intv(g.gpuUtilPct) }},
	{"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", func(g dcgmGPU, _ float64) string { return intv(g.memCopy) }},
	{"DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns).",
		func(g dcgmGPU, s float64) string { return intv(g.powerViolationShare * s * 1e9) }},
	{"DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns).", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons.", func(g dcgmGPU, _ float64) string { return fmt.Sprint(g.clockEventReasons) }},
	{"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", func(g dcgmGPU, _ float64) string { return intv(g.fbFreeMiB) }},
	{"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", func(g dcgmGPU, _ float64) string { return intv(g.fbUsedMiB) }},
	{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", func(dcgmGPU, float64) string { return "0" }},
	{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", func(g dcgmGPU, _ float64) string { return flt(g.grActive) }},
	{"DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", func(g dcgmGPU, _ float64) string { return flt(g.smActive) }},
	{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", func(g dcgmGPU, _ float64) string { return flt(g.tensor) }},
	{"DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or receiving data.", func(g dcgmGPU, _ float64) string { return flt(g.dram) }},
	{"DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", func(dcgmGPU, float64) string { return "1500000000" }},
	{"DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", func(dcgmGPU, float64) string { return "4200000000" }},
	{"DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.", func(dcgmGPU, float64) string { return "20000000000" }},
	{"DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "The rate of data received over NVLink, not including protocol headers, in bytes per second.", func(dcgmGPU, float64) string { return "20000000000" }},
}

// exposition renders one scrape at now.
func (f *dcgmFixture) exposition(now time.Time) []byte {
	elapsed := now.Sub(f.start).Seconds()
	var b bytes.Buffer
	for _, field := range dcgmFields {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", field.name, field.help, field.name, field.typ)
		for i, g := range dcgmGPUs {
			fmt.Fprintf(&b, `%s{gpu="%d",UUID="%s",pci_bus_id="00000000:%02X:00.0",device="nvidia%d",modelName="NVIDIA H200",Hostname="gpu-node-1",DCGM_FI_DRIVER_VERSION="570.124.06",container="vllm",namespace="llm",pod="%s"} %s`+"\n",
				field.name, i, g.uuid, 0x18+i*0x1a, i, g.pod, field.value(g, elapsed))
		}
	}
	return b.Bytes()
}

func (f *dcgmFixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	now := time.Now()
	f.mu.Lock()
	f.times = append(f.times, now)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(f.exposition(now))
}

func (f *dcgmFixture) scrapes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.times...)
}

// traceSink is an OTLP/HTTP traces endpoint that keeps what it is sent and
// when.
type traceSink struct {
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	at       time.Time
	resource map[string]any
	attrs    map[string]any
	name     string
}

func (s *traceSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := ptraceotlp.NewExportRequest()
	if err == nil {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	s.mu.Lock()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		res := rss.At(i).Resource().Attributes().AsRaw()
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				sp := spans.At(k)
				s.spans = append(s.spans, receivedSpan{at: now, resource: res, attrs: sp.Attributes().AsRaw(), name: sp.Name()})
			}
		}
	}
	s.mu.Unlock()
	resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

func (s *traceSink) requests() []receivedSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []receivedSpan
	for _, sp := range s.spans {
		if sp.name == "llm_request" {
			out = append(out, sp)
		}
	}
	return out
}

const dcgmCollectorConfig = `# Written by e2e/dcgm_test.go: the prometheus receiver scrapes a stand-in
# dcgm-exporter, spans come over OTLP/HTTP, enriched spans go to the test.
receivers:
  prometheus:
    config:
      scrape_configs:
        - job_name: dcgm-exporter
          scrape_interval: %[1]s
          static_configs:
            - targets: [%[2]s]
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%[3]d
processors:
  gpuviz:
    max_wait: %[4]s
    attribution:
      settle_window: 1s
      finalize_after: 5s
exporters:
  debug:
    verbosity: basic
  otlp_http:
    endpoint: %[5]s
    compression: none
    retry_on_failure:
      enabled: false
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [prometheus]
      processors: [gpuviz]
      exporters: [debug]
    traces:
      receivers: [otlp]
      processors: [gpuviz]
      exporters: [otlp_http]
`

// vllmRequest is vLLM's llm_request span of a request from the given pod
// that arrived 4 s ago: 0.5 s queued, 0.5 s prefill, 3 s decode.
func vllmRequest(td ptrace.Traces, pod string, end time.Time, trace byte) {
	rs := td.ResourceSpans().AppendEmpty()
	res := rs.Resource().Attributes()
	res.PutStr("service.name", "vllm")
	res.PutStr("host.name", "gpu-node-1")
	res.PutStr("k8s.namespace.name", "llm")
	res.PutStr("k8s.pod.name", pod)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	sp := ss.Spans().AppendEmpty()
	sp.SetName("llm_request")
	sp.SetKind(ptrace.SpanKindServer)
	sp.SetTraceID(pcommon.TraceID{0xdc, 0x61, trace})
	sp.SetSpanID(pcommon.SpanID{0xdc, trace})
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(end.Add(-4 * time.Second)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(end))
	a := sp.Attributes()
	a.PutDouble("gen_ai.latency.time_in_queue", 0.5)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.5)
	a.PutDouble("gen_ai.latency.time_in_model_decode", 3)
	a.PutDouble("gen_ai.latency.e2e", 4)
	a.PutInt("gen_ai.usage.prompt_tokens", 1024)
	a.PutInt("gen_ai.usage.completion_tokens", 350)
	a.PutStr("gen_ai.request.model", "meta-llama/Llama-3.1-70B-Instruct")
}

// TestDCGMExporter runs the built collector's real prometheus receiver
// against a stand-in dcgm-exporter and sends vLLM spans from two pods over
// OTLP: each comes out enriched from its own pod's GPU (the pod match from
// dcgm-exporter's pod labels), with energy from the energy counter, and
// only after the scrape that follows its end, though that comes later than
// max_wait. It needs only the collector (make build); `make e2e` runs it
// with the rest, `go test -tags e2e -run TestDCGMExporter ./e2e/` alone.
func TestDCGMExporter(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := env("GPUVIZ_COLLECTOR", filepath.Join(root, "_build/otelcol-gpuviz"))
	_, err = os.Stat(bin)
	require.NoError(t, err, "build the collector first: make build")

	fixture := &dcgmFixture{start: time.Now()}
	dcgm := httptest.NewServer(fixture)
	defer dcgm.Close()
	sink := &traceSink{}
	out := httptest.NewServer(sink)
	defer out.Close()

	work := t.TempDir()
	ports, err := procs.FreePorts(1)
	require.NoError(t, err)
	otlpPort := ports[0]
	conf := filepath.Join(work, "collector.yaml")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, dcgmCollectorConfig,
		dcgmScrapeInterval, strings.TrimPrefix(dcgm.URL, "http://"), otlpPort, dcgmMaxWait, out.URL), 0o644))
	group, err := procs.NewGroup(work)
	require.NoError(t, err)
	collector, err := group.Spawn("collector", bin, "--config", conf)
	require.NoError(t, err)
	t.Cleanup(func() {
		group.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(collector.Log); err == nil {
				t.Logf("collector log:\n%s", b)
			}
		}
	})

	// Two scrapes, so every GPU's sample spacing is known.
	require.Eventually(t, func() bool { return len(fixture.scrapes()) >= 2 }, 2*dcgmScrapeInterval+15*time.Second, 50*time.Millisecond,
		"the prometheus receiver scrapes the stand-in dcgm-exporter")
	time.Sleep(500 * time.Millisecond) // the scrape's data through the pipeline
	scraped := len(fixture.scrapes())

	td := ptrace.NewTraces()
	end := time.Now()
	vllmRequest(td, "vllm-0", end, 0)
	vllmRequest(td, "vllm-1", end, 1)
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	require.NoError(t, err)
	sent := time.Now()
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/traces", otlpPort), "application/x-protobuf", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.Eventually(t, func() bool { return len(sink.requests()) == 2 }, dcgmScrapeInterval+dcgmMaxWait+10*time.Second, 100*time.Millisecond,
		"both spans come out")
	scrapes := fixture.scrapes()
	require.Greater(t, len(scrapes), scraped, "a scrape came after the spans")
	next := scrapes[scraped]
	energy := map[string]float64{}
	for _, sp := range sink.requests() {
		pod := sp.resource["k8s.pod.name"].(string)
		var g dcgmGPU
		for _, x := range dcgmGPUs {
			if x.pod == pod {
				g = x
			}
		}
		a := sp.attrs
		t.Logf("%s: %v", pod, a)
		assert.True(t, sp.at.After(next), "%s released after the scrape that followed its end", pod)
		assert.Greater(t, sp.at.Sub(sent), dcgmMaxWait, "%s held past max_wait for its GPU's 10 s spacing", pod)
		assert.Equal(t, "pod", a["gpuviz.gpu.match"], pod)
		assert.Equal(t, []any{g.uuid}, a["gpuviz.gpu.ids"], "%s: its pod's GPU only", pod)
		assert.Equal(t, "dcgm", a["gpuviz.backend"], pod)
		assert.Equal(t, "counter", a["gpuviz.energy.source"], pod)
		assert.InDelta(t, 1.0, a["gpuviz.coverage"], 1e-3, pod)
		// 3.5 s in the model at the GPU's power, give or take the books'
		// 100 ms bins at the phases' edges.
		assert.InDelta(t, 3.5*g.powerW, a["gpuviz.energy"], 0.2*g.powerW, "%s: 3.5 s in the model at %v W, from the energy counter", pod, g.powerW)
		energy[pod] = a["gpuviz.energy"].(float64)
		assert.InDelta(t, g.grActive, a["gpuviz.gpu.utilization.mean"], 1e-3, "%s: GR_ENGINE_ACTIVE", pod)
		assert.InDelta(t, g.smActive, a["gpuviz.gpu.sm_activity.mean"], 1e-3, pod)
		assert.InDelta(t, g.tensor, a["gpuviz.gpu.tensor_activity.mean"], 1e-3, pod)
		assert.InDelta(t, g.dram, a["gpuviz.gpu.dram_activity.mean"], 1e-3, pod)
		assert.InDelta(t, g.memCopy/100, a["gpuviz.gpu.memory_controller.mean"], 1e-3, "%s: MEM_COPY_UTIL percent as a ratio", pod)
		assert.InDelta(t, g.powerW, a["gpuviz.gpu.power.mean"], 1e-3, pod)
		assert.EqualValues(t, g.fbUsedMiB*(1<<20), a["gpuviz.gpu.memory.peak"], "%s: FB_USED MiB as bytes", pod)
	}
	// The same window on two GPUs: the energies are in the ratio of their
	// counters' rates.
	assert.InEpsilon(t, dcgmGPUs[0].powerW/dcgmGPUs[1].powerW, energy["vllm-0"]/energy["vllm-1"], 0.01)
}
