package gpuvizprocessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// podMetrics is what the receiver reports of pods on a node: the kubelet's
// allocation of GPU to pod by name, and the pod UID of each GPU's process
// (every container's server is PID 1 in its own namespace).
func podMetrics(host string, at time.Time, gpuPod map[string]int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", host)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	alloc := ms.AppendEmpty()
	alloc.SetName("nvidia.gpu.k8s.allocation")
	allocs := alloc.SetEmptyGauge().DataPoints()
	proc := ms.AppendEmpty()
	proc.SetName("nvidia.gpu.process.memory.usage")
	procs := proc.SetEmptySum().DataPoints()
	for id, pod := range gpuPod {
		dp := allocs.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(at))
		dp.SetIntValue(1)
		dp.Attributes().PutStr("hw.id", id)
		dp.Attributes().PutStr("k8s.namespace.name", "llm")
		dp.Attributes().PutStr("k8s.pod.name", fmt.Sprintf("vllm-%d", pod))
		dp.Attributes().PutStr("k8s.container.name", "vllm")
		dp = procs.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(at))
		dp.SetIntValue(40e9)
		dp.Attributes().PutStr("hw.id", id)
		dp.Attributes().PutInt("process.pid", 1)
		dp.Attributes().PutStr("k8s.pod.uid", fmt.Sprintf("uid-%d", pod))
	}
	return md
}

// A node with 4 pods × 2 GPUs: a span from a pod gets exactly its pod's two
// GPUs, by UID or by name, and shares their energy only with requests on
// them; its container's PID and CUDA indexes are its own, not the host's.
func TestPodMatchGivesThePodsGPUs(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.MaxWait = 500 * time.Millisecond })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	gpuPod := map[string]int{}
	power := map[string]float64{}
	for i := range 8 {
		id := fmt.Sprintf("GPU-%d", i)
		gpuPod[id] = i / 2
		s := busy
		s.powerW = 300 + 50*float64(i)
		power[id] = s.powerW
		require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", id, int64(i), base, time.Second, repeat(s, 20))))
	}
	for sec := 0; sec < 20; sec += 5 {
		require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), podMetrics("node-1", base.Add(time.Duration(sec)*time.Second), gpuPod)))
	}

	td := ptrace.NewTraces()
	resource := func(attrs map[string]any) ptrace.SpanSlice {
		rs := td.ResourceSpans().AppendEmpty()
		require.NoError(t, rs.Resource().Attributes().FromRaw(attrs))
		return rs.ScopeSpans().AppendEmpty().Spans()
	}
	span := func(spans ptrace.SpanSlice, trace byte) {
		tmp := ptrace.NewTraces()
		vllmSpan(tmp, trace, base.Add(5*time.Second), 0, 1, 4, 10).CopyTo(spans.AppendEmpty())
	}
	// Two identical requests in pod 1, by UID, with the container's PID.
	byUID := resource(map[string]any{"host.name": "node-1", "k8s.pod.uid": "uid-1", "process.pid": 1})
	span(byUID, 1)
	span(byUID, 2)
	// One in pod 2, by name, as k8sattributes names it.
	span(resource(map[string]any{"k8s.pod.name": "vllm-2", "k8s.namespace.name": "llm"}), 3)
	// One in pod 3 on its second device only: CUDA_VISIBLE_DEVICES=1 counts
	// the pod's devices.
	span(resource(map[string]any{"k8s.pod.uid": "uid-3", "CUDA_VISIBLE_DEVICES": "1"}), 4)
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return len(spanAttrs(t, p.spans, "llm_request")) == 4 }, 5*time.Second, 10*time.Millisecond)

	got := map[string]map[string]any{}
	for _, a := range spanAttrs(t, p.spans, "llm_request") {
		got[fmt.Sprint(a["gpuviz.gpu.ids"])] = a
		assert.Equal(t, "pod", a["gpuviz.gpu.match"], a["gpuviz.gpu.ids"])
	}
	require.Len(t, got, 3, "pod 1's two requests share one GPU set: %v", got)
	pod1, pod2, pod3 := got["[GPU-2 GPU-3]"], got["[GPU-4 GPU-5]"], got["[GPU-7]"]
	require.NotNil(t, pod1, "%v", got)
	require.NotNil(t, pod2, "%v", got)
	require.NotNil(t, pod3, "%v", got)
	// Each request ran 5 s; pod 1's two split their GPUs' energy evenly,
	// and nobody else's energy reached them.
	assert.InDelta(t, 5*(power["GPU-2"]+power["GPU-3"])/2, pod1["gpuviz.energy"], 1e-6)
	assert.InDelta(t, 5*(power["GPU-4"]+power["GPU-5"]), pod2["gpuviz.energy"], 1e-6)
	assert.InDelta(t, 5*power["GPU-7"], pod3["gpuviz.energy"], 1e-6)
}

// Without the kubelet's allocation, a pod's span is not matched by its
// container-local PID or CUDA indexes: those would name the host's GPUs 0
// and 1 and the processes of every other pod.
func TestPodSpanIgnoresContainerLocalHints(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.MaxWait = 500 * time.Millisecond })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		id := fmt.Sprintf("GPU-%d", i)
		require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", id, int64(i), base, time.Second, repeat(busy, 20))))
	}
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0, 1, 4, 10)
	require.NoError(t, td.ResourceSpans().At(0).Resource().Attributes().FromRaw(map[string]any{
		"host.name": "node-1", "k8s.pod.uid": "uid-x", "process.pid": 1, "CUDA_VISIBLE_DEVICES": "0",
	}))
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return len(spanAttrs(t, p.spans, "llm_request")) == 1 }, 5*time.Second, 10*time.Millisecond)
	a := spanAttrs(t, p.spans, "llm_request")[0]
	assert.Equal(t, "host", a["gpuviz.gpu.match"], "neither the PID nor the index is the host's")
	assert.Equal(t, []any{"GPU-0", "GPU-1"}, a["gpuviz.gpu.ids"])
}
