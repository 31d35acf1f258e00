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

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
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

// slurmMetrics is what the receiver reports of Slurm jobs on a node: the
// nvidia.gpu.slurm.job series, or (process) only the job on the GPU
// processes' series, as from their environments.
func slurmMetrics(host string, at time.Time, gpuJob map[string]string, process bool) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", host)
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	var dps pmetric.NumberDataPointSlice
	if process {
		m.SetName("nvidia.gpu.process.memory.usage")
		dps = m.SetEmptySum().DataPoints()
	} else {
		m.SetName("nvidia.gpu.slurm.job")
		dps = m.SetEmptyGauge().DataPoints()
	}
	for id, job := range gpuJob {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(at))
		dp.SetIntValue(1)
		dp.Attributes().PutStr("hw.id", id)
		dp.Attributes().PutStr("slurm.job.id", job)
		dp.Attributes().PutStr("slurm.step.id", "0")
		if process {
			dp.Attributes().PutInt("process.pid", 4000)
		}
	}
	return md
}

// The matching rules of the slurm method, on a store of two 8-GPU nodes:
// job 100 holds GPUs 2 and 3 of both, 101 GPUs 0 and 1 of node-1, 102 its
// GPUs 4 and 5, 104 GPUs 1 and 2 of node-2, 105 GPUs 1 to 4 of node-3; pod
// uid-7 holds node-1's GPU 7.
func TestSlurmJobMatchRules(t *testing.T) {
	cfg := createDefaultConfig()
	store := timeline.New(cfg.timeline())
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	gpu := func(host string, i int) timeline.Key {
		return timeline.Key{Host: host, GPU: fmt.Sprintf("GPU-%s-%d", host, i)}
	}
	for _, host := range []string{"node-1", "node-2", "node-3"} {
		for i := range 8 {
			k := gpu(host, i)
			require.True(t, store.Add(k, timeline.Power, t0, 100))
			require.True(t, store.Add(k, timeline.Power, t0.Add(time.Minute), 100))
			store.SetIndex(k, i)
		}
	}
	jobs := map[string][]timeline.Key{
		"100": {gpu("node-1", 2), gpu("node-1", 3), gpu("node-2", 2), gpu("node-2", 3)},
		"101": {gpu("node-1", 0), gpu("node-1", 1)},
		"102": {gpu("node-1", 4), gpu("node-1", 5)},
		"104": {gpu("node-2", 1), gpu("node-2", 2)},
		"105": {gpu("node-3", 1), gpu("node-3", 2), gpu("node-3", 3), gpu("node-3", 4)},
	}
	for sec := 0; sec <= 60; sec += 10 {
		at := t0.Add(time.Duration(sec) * time.Second)
		for job, keys := range jobs {
			for _, k := range keys {
				store.SetSlurmJob(k, job, at)
			}
		}
		store.SetPod(gpu("node-1", 7), timeline.Pod{UID: "uid-7"}, at)
	}
	m := &matcher{store: store, order: cfg.Match.Order}
	type hints struct {
		ids     []string
		indexes []int
	}
	for _, tc := range []struct {
		name, job, host string
		hints           hints
		pod             string
		at              time.Duration // the request's start after t0, 10 s long
		want            []timeline.Key
		method          string
	}{
		{name: "the job's GPUs, not its neighbour's on the host", job: "101", host: "node-1",
			want: jobs["101"], method: MatchSlurmJob},
		{name: "a multi-node job's span: its own node's", job: "100", host: "node-2",
			want: []timeline.Key{gpu("node-2", 2), gpu("node-2", 3)}, method: MatchSlurmJob},
		{name: "no host.name: every node's", job: "100",
			want: jobs["100"], method: MatchSlurmJob},
		{name: "a host the job has no GPU on (a login node): every node's", job: "100", host: "login-1",
			want: jobs["100"], method: MatchSlurmJob},
		{name: "narrowed by UUID", job: "100", host: "node-1", hints: hints{ids: []string{gpu("node-1", 3).GPU}},
			want: []timeline.Key{gpu("node-1", 3)}, method: MatchSlurmJob},
		{name: "a UUID not the job's is ignored", job: "101", host: "node-1", hints: hints{ids: []string{gpu("node-1", 5).GPU}},
			want: jobs["101"], method: MatchSlurmJob},
		{name: "an index counting the job's devices (device cgroup)", job: "102", host: "node-1", hints: hints{indexes: []int{1}},
			want: []timeline.Key{gpu("node-1", 5)}, method: MatchSlurmJob},
		{name: "an index counting the host's devices", job: "102", host: "node-1", hints: hints{indexes: []int{5}},
			want: []timeline.Key{gpu("node-1", 5)}, method: MatchSlurmJob},
		{name: "both readings of an index agree", job: "101", host: "node-1", hints: hints{indexes: []int{1}},
			want: []timeline.Key{gpu("node-1", 1)}, method: MatchSlurmJob},
		{name: "readings that name different GPUs of the job: ignored", job: "104", host: "node-2", hints: hints{indexes: []int{1}},
			want: jobs["104"], method: MatchSlurmJob},
		{name: "the job's own devices 0 and 1: 0 cannot be the host's, so neither is", job: "105", host: "node-3", hints: hints{indexes: []int{0, 1}},
			want: []timeline.Key{gpu("node-3", 1), gpu("node-3", 2)}, method: MatchSlurmJob},
		{name: "the host's devices 3 and 4: 4 cannot be the job's, so neither is", job: "105", host: "node-3", hints: hints{indexes: []int{3, 4}},
			want: []timeline.Key{gpu("node-3", 3), gpu("node-3", 4)}, method: MatchSlurmJob},
		{name: "the job's every device by the host's indexes", job: "104", host: "node-2", hints: hints{indexes: []int{1, 2}},
			want: jobs["104"], method: MatchSlurmJob},
		{name: "a list either reading fits, naming different GPUs: ignored", job: "105", host: "node-3", hints: hints{indexes: []int{2, 3}},
			want: jobs["105"], method: MatchSlurmJob},
		{name: "no index narrowing across nodes", job: "100", hints: hints{indexes: []int{0}},
			want: jobs["100"], method: MatchSlurmJob},
		{name: "long after the job: the next method", job: "101", host: "node-1", at: 5 * time.Minute,
			want: store.GPUs("node-1"), method: MatchHost},
		{name: "an unknown job: the next method", job: "999", host: "node-1",
			want: store.GPUs("node-1"), method: MatchHost},
		{name: "an unknown job's indexes are not read as the host's", job: "999", host: "node-1", hints: hints{indexes: []int{3}},
			want: store.GPUs("node-1"), method: MatchHost},
		{name: "its UUIDs are", job: "999", host: "node-1", hints: hints{ids: []string{gpu("node-1", 3).GPU}},
			want: []timeline.Key{gpu("node-1", 3)}, method: MatchAttribute},
		{name: "the pod method first", job: "101", host: "node-1", pod: "uid-7",
			want: []timeline.Key{gpu("node-1", 7)}, method: MatchPod},
		{name: "no job: as before", host: "node-1", hints: hints{indexes: []int{3}},
			want: []timeline.Key{gpu("node-1", 3)}, method: MatchAttribute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := t0.Add(20*time.Second + tc.at)
			req := inference.Request{Start: start, End: start.Add(10 * time.Second), Host: tc.host, SlurmJobID: tc.job,
				PodUID: tc.pod, GPUIDs: tc.hints.ids, GPUIndexes: tc.hints.indexes}
			keys, method := m.match(req)
			assert.Equal(t, tc.want, keys)
			assert.Equal(t, tc.method, method)
		})
	}
}

// Two nodes, 4 GPUs each: job 500 spans both (GPUs 0 and 1 of each, from
// nvidia.gpu.slurm.job), job 501 holds node-1's GPUs 2 and 3 (from its
// processes' series). A span carrying slurm.job.id on its resource, as
// OTEL_RESOURCE_ATTRIBUTES sets it in the job script, gets its job's GPUs
// on its own node, or every node's without host.name, and only their
// energy; gpuviz.gpu.match says slurm.
func TestSlurmJobMatchGivesTheJobsGPUs(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.MaxWait = 500 * time.Millisecond })
	base := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	power := map[string]float64{}
	jobGPUs := map[string]map[string]string{"node-1": {}, "node-2": {}}
	procGPUs := map[string]string{}
	for h, host := range []string{"node-1", "node-2"} {
		for i := range 4 {
			id := fmt.Sprintf("GPU-%d%d", h+1, i)
			s := busy
			s.powerW = 300 + 50*float64(4*h+i)
			power[id] = s.powerW
			require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics(host, id, int64(i), base, time.Second, repeat(s, 20))))
			switch {
			case i < 2:
				jobGPUs[host][id] = "500"
			case host == "node-1":
				procGPUs[id] = "501"
			}
		}
	}
	for sec := 0; sec < 20; sec += 5 {
		at := base.Add(time.Duration(sec) * time.Second)
		for host, gpus := range jobGPUs {
			require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), slurmMetrics(host, at, gpus, false)))
		}
		require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), slurmMetrics("node-1", at, procGPUs, true)))
	}

	td := ptrace.NewTraces()
	span := func(trace byte, res map[string]any) {
		rs := td.ResourceSpans().AppendEmpty()
		require.NoError(t, rs.Resource().Attributes().FromRaw(res))
		tmp := ptrace.NewTraces()
		vllmSpan(tmp, trace, base.Add(5*time.Second), 0, 1, 4, 10).CopyTo(rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty())
	}
	span(1, map[string]any{"slurm.job.id": "500", "host.name": "node-2"})
	span(2, map[string]any{"slurm.job.id": "501", "host.name": "node-1", "process.pid": 4000})
	span(3, map[string]any{"slurm.job.id": "500"})
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return len(spanAttrs(t, p.spans, "llm_request")) == 3 }, 5*time.Second, 10*time.Millisecond)

	got := map[string]map[string]any{}
	for _, a := range spanAttrs(t, p.spans, "llm_request") {
		got[fmt.Sprint(a["gpuviz.gpu.ids"])] = a
		assert.Equal(t, MatchSlurmJob, a["gpuviz.gpu.match"], a["gpuviz.gpu.ids"])
	}
	require.Contains(t, got, "[GPU-20 GPU-21]", "job 500's span on node-2: %v", got)
	require.Contains(t, got, "[GPU-10 GPU-11 GPU-20 GPU-21]", "job 500's span without a host: %v", got)
	job501 := got["[GPU-12 GPU-13]"]
	require.NotNil(t, job501, "job 501's span: %v", got)
	// Job 501's request ran 5 s alone on its GPUs: their energy, nobody
	// else's.
	assert.InDelta(t, 5*(power["GPU-12"]+power["GPU-13"]), job501["gpuviz.energy"], 1e-6)
}

// dcgm-exporter run with --hpc-job-mapping-dir labels each GPU's series
// with its job (hpc_job, one series per job): the processor learns the
// jobs from them as from the gpuviz receiver's series.
func TestDCGMHPCJobs(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		in.consume(context.Background(), dcgmScrape(t0.Add(time.Duration(i)*30*time.Second),
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 0, v: 300, labels: map[string]string{"hpc_job": "4242"}},
			dcgmSeries{name: "DCGM_FI_DEV_GPU_UTIL", gpu: 0, v: 90, labels: map[string]string{"hpc_job": "4242"}},
			// A GPU shared by two jobs: its series repeated per job.
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 1, v: 250, labels: map[string]string{"hpc_job": "4243"}},
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 1, v: 250, labels: map[string]string{"hpc_job": "4244"}},
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 2, v: 80},
		))
	}
	from, to := t0.Add(10*time.Second), t0.Add(50*time.Second)
	assert.Equal(t, []timeline.Key{dcgmKeyOf(0)}, in.store.SlurmJobGPUs("4242", from, to))
	assert.Equal(t, []timeline.Key{dcgmKeyOf(1)}, in.store.SlurmJobGPUs("4243", from, to))
	assert.Equal(t, []timeline.Key{dcgmKeyOf(1)}, in.store.SlurmJobGPUs("4244", from, to))
	assert.Empty(t, in.store.PodGPUs(timeline.Pod{Name: "4242"}, from, to), "a job is no pod")
}

// Two Slurm jobs on one node, each a server exporting slurm.job.id and
// host.name on its resource (no process.pid): their spans, batched
// together, must each get their own job's GPUs.
func TestTwoSlurmJobsInOneBatchKeepTheirGPUs(t *testing.T) {
	base := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(20 * time.Second)
	jobs := map[string]string{}
	for i := range 4 {
		id := fmt.Sprintf("GPU-%d", i)
		s := busy
		s.powerW = 300 + 100*float64(i)
		c.ingest.consume(context.Background(), gpuMetrics("node-1", id, int64(i), base, time.Second, repeat(s, 20)))
		jobs[id] = []string{"700", "701"}[i/2]
	}
	for sec := 0; sec < 20; sec += 5 {
		c.ingest.consume(context.Background(), slurmMetrics("node-1", base.Add(time.Duration(sec)*time.Second), jobs, false))
	}
	td := ptrace.NewTraces()
	for i, job := range []string{"700", "701"} {
		rs := td.ResourceSpans().AppendEmpty()
		require.NoError(t, rs.Resource().Attributes().FromRaw(map[string]any{"slurm.job.id": job, "host.name": "node-1"}))
		tmp := ptrace.NewTraces()
		vllmSpan(tmp, byte(i+1), base.Add(5*time.Second), 0, 1, 4, 10).CopyTo(rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty())
	}
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	for step := range 12 {
		c.tick(base.Add(20*time.Second + time.Duration(step)*time.Second))
	}
	got := map[byte]string{}
	for _, out := range sink.AllTraces() {
		forEachSpan(out, func(sp ptrace.Span) {
			if sp.Name() == "llm_request" {
				ids, _ := sp.Attributes().Get("gpuviz.gpu.ids")
				e, _ := sp.Attributes().Get("gpuviz.energy")
				got[sp.TraceID()[0]] = fmt.Sprint(ids.AsRaw(), " energy=", e.Double())
			}
		})
	}
	assert.Contains(t, got[1], "[GPU-0 GPU-1]")
	assert.Contains(t, got[2], "[GPU-2 GPU-3]", "job 701's span gets job 701's GPUs")
}

// A GPU UUID on a span is matched on whichever host has it when the span's
// own host does not: a gateway's span without host.name, or a host named
// wrong. A UUID two hosts share (a simulation's) matches neither.
func TestGPUUUIDsAreMatchedOnAnyHost(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	store := timeline.New(cfg.timeline())
	for _, k := range []timeline.Key{{Host: "node-1", GPU: "GPU-1a"}, {Host: "node-1", GPU: "GPU-1b"}, {Host: "node-2", GPU: "GPU-2a"}, {Host: "node-2", GPU: "GPU-2b"}, {Host: "node-1", GPU: "GPU-same"}, {Host: "node-2", GPU: "GPU-same"}} {
		require.True(t, store.Add(k, timeline.Power, t0, 100))
	}
	m := &matcher{store: store, order: cfg.Match.Order}
	for _, tc := range []struct {
		host   string
		ids    []string
		want   []timeline.Key
		method string
	}{
		{"node-1", []string{"GPU-1b"}, []timeline.Key{{Host: "node-1", GPU: "GPU-1b"}}, MatchAttribute},
		{"", []string{"GPU-2b", "GPU-2a"}, []timeline.Key{{Host: "node-2", GPU: "GPU-2a"}, {Host: "node-2", GPU: "GPU-2b"}}, MatchAttribute},
		{"node-1", []string{"GPU-2a"}, []timeline.Key{{Host: "node-2", GPU: "GPU-2a"}}, MatchAttribute},
		{"", []string{"GPU-same"}, nil, ""},
	} {
		req := inference.Request{Host: tc.host, GPUIDs: tc.ids, Start: t0, End: t0.Add(time.Second)}
		keys, method := m.match(req)
		assert.Equal(t, tc.want, keys, "%s %v", tc.host, tc.ids)
		assert.Equal(t, tc.method, method, "%s %v", tc.host, tc.ids)
	}
	// Forgotten GPUs leave the index.
	store.Expire(t0.Add(time.Hour))
	_, ok := store.ByID("GPU-2a")
	assert.False(t, ok)
}

// A span naming one GPU by both its UUID and its index (gpu.uuid and
// CUDA_VISIBLE_DEVICES on its resource) ran on that GPU once: it is listed
// once and its power is the GPU's, not twice it; indexes in any order name
// the GPUs in one order.
func TestAGPUNamedByUUIDAndIndexIsMatchedOnce(t *testing.T) {
	p := newPipelines(t, func(c *Config) { c.MaxWait = 500 * time.Millisecond })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", fmt.Sprintf("GPU-%d", i), int64(i), base, time.Second, repeat(busy, 20))))
	}
	td := ptrace.NewTraces()
	for trace, attrs := range map[byte]map[string]any{
		1: {"host.name": "node-1", "gpu.uuid": "GPU-0", "CUDA_VISIBLE_DEVICES": "0"},
		2: {"host.name": "node-1", "CUDA_VISIBLE_DEVICES": "1,0"},
	} {
		rs := td.ResourceSpans().AppendEmpty()
		require.NoError(t, rs.Resource().Attributes().FromRaw(attrs))
		vllmSpan(ptrace.NewTraces(), trace, base.Add(5*time.Second), 0, 1, 4, 10).CopyTo(rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty())
	}
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return len(spanAttrs(t, p.spans, "llm_request")) == 2 }, 5*time.Second, 10*time.Millisecond)
	got := map[string]map[string]any{}
	for _, a := range spanAttrs(t, p.spans, "llm_request") {
		assert.Equal(t, MatchAttribute, a["gpuviz.gpu.match"])
		got[fmt.Sprint(a["gpuviz.gpu.ids"])] = a
	}
	require.Contains(t, got, "[GPU-0]")
	require.Contains(t, got, "[GPU-0 GPU-1]")
	assert.InDelta(t, busy.powerW, got["[GPU-0]"]["gpuviz.gpu.power.mean"], 1e-6, "one GPU's power")
	assert.InDelta(t, 2*busy.powerW, got["[GPU-0 GPU-1]"]["gpuviz.gpu.power.mean"], 1e-6)
}

// A span's process.pid is looked for on its host; without host.name, on
// the one host the GPUs belong to (a node-local agent), as the host method
// and GPU indexes take it, and on none when they belong to several.
func TestProcessMatchWithoutHostName(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	store := timeline.New(cfg.timeline())
	for _, k := range []timeline.Key{{Host: "node-1", GPU: "GPU-0"}, {Host: "node-1", GPU: "GPU-1"}} {
		require.True(t, store.Add(k, timeline.Power, t0, 100))
	}
	store.SetProcess(timeline.Key{Host: "node-1", GPU: "GPU-1"}, 4000, t0)
	m := &matcher{store: store, order: cfg.Match.Order}
	for _, host := range []string{"node-1", ""} {
		keys, method := m.match(inference.Request{Host: host, PID: 4000, Start: t0, End: t0.Add(time.Second)})
		assert.Equal(t, []timeline.Key{{Host: "node-1", GPU: "GPU-1"}}, keys, "host %q", host)
		assert.Equal(t, MatchProcess, method, "host %q", host)
	}
	// Another host's GPUs: a PID without a host names none of them.
	require.True(t, store.Add(timeline.Key{Host: "node-2", GPU: "GPU-2"}, timeline.Power, t0, 100))
	store.SetProcess(timeline.Key{Host: "node-2", GPU: "GPU-2"}, 4000, t0)
	keys, method := m.match(inference.Request{PID: 4000, Start: t0, End: t0.Add(time.Second)})
	assert.Empty(t, keys)
	assert.Empty(t, method)
}

// A StatefulSet's pod recreated on another node at once: over the old
// pod's last requests its name was seen on both nodes' GPUs. A pod runs on
// one node; a span naming its host gets that host's.
func TestAPodNameSeenOnTwoNodesTakesTheSpansNode(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	store := timeline.New(cfg.timeline())
	a, b := timeline.Key{Host: "node-1", GPU: "GPU-a"}, timeline.Key{Host: "node-2", GPU: "GPU-b"}
	for _, k := range []timeline.Key{a, b} {
		require.True(t, store.Add(k, timeline.Power, t0, 100))
		require.True(t, store.Add(k, timeline.Power, t0.Add(200*time.Second), 100))
	}
	pod := timeline.Pod{Namespace: "llm", Name: "vllm-0"}
	for sec := 10; sec <= 100; sec += 10 {
		store.SetPod(a, pod, t0.Add(time.Duration(sec)*time.Second))
	}
	for sec := 105; sec <= 200; sec += 10 {
		store.SetPod(b, pod, t0.Add(time.Duration(sec)*time.Second))
	}
	m := &matcher{store: store, order: cfg.Match.Order}
	for _, tc := range []struct {
		host     string
		from, to int
		want     []timeline.Key
	}{
		{"node-1", 95, 100, []timeline.Key{a}},    // the old pod's last request
		{"node-2", 150, 160, []timeline.Key{b}},   // the new pod's
		{"vllm-0", 95, 100, []timeline.Key{a, b}}, // host.name the pod's own hostname: no node to go by
	} {
		req := inference.Request{Host: tc.host, PodNamespace: "llm", PodName: "vllm-0",
			Start: t0.Add(time.Duration(tc.from) * time.Second), End: t0.Add(time.Duration(tc.to) * time.Second)}
		keys, method := m.match(req)
		assert.Equal(t, tc.want, keys, "%s [%d, %d]", tc.host, tc.from, tc.to)
		assert.Equal(t, MatchPod, method)
	}
}

// A pod's process.pid is the container's, in its own PID namespace: where
// the host runs another process under the same number on one of its GPUs,
// the pod's span is not matched to that GPU by it. Without the pod's
// allocation it falls through to its host's GPUs.
func TestAPodsPIDIsNotLookedForAmongTheHostsProcesses(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	store := timeline.New(cfg.timeline())
	both := []timeline.Key{{Host: "node-1", GPU: "GPU-0"}, {Host: "node-1", GPU: "GPU-1"}}
	for _, k := range both {
		require.True(t, store.Add(k, timeline.Power, t0, 100))
	}
	store.SetProcess(timeline.Key{Host: "node-1", GPU: "GPU-1"}, 4000, t0) // a host process, not the pod's
	m := &matcher{store: store, order: cfg.Match.Order}
	for name, req := range map[string]inference.Request{
		"by uid":  {Host: "node-1", PodUID: "uid-x", PID: 4000, Start: t0, End: t0.Add(time.Second)},
		"by name": {Host: "node-1", PodName: "vllm-0", PID: 4000, Start: t0, End: t0.Add(time.Second)},
	} {
		keys, method := m.match(req)
		assert.Equal(t, MatchHost, method, name)
		assert.ElementsMatch(t, both, keys, name)
	}
	// The same PID on a span outside any pod is the host's process.
	keys, method := m.match(inference.Request{Host: "node-1", PID: 4000, Start: t0, End: t0.Add(time.Second)})
	assert.Equal(t, MatchProcess, method)
	assert.Equal(t, []timeline.Key{{Host: "node-1", GPU: "GPU-1"}}, keys)
}

// The default match.order (README: pod, slurm, attribute, process, host)
// tries the span's own GPU names before its process: a span naming GPU-0
// whose process.pid the receiver saw on GPU-1 (a server that also holds a
// context there) gets GPU-0, by attribute. With process first in the
// order, the process decides.
func TestDefaultOrderTriesAttributesBeforeTheProcess(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	store := timeline.New(cfg.timeline())
	gpu0, gpu1 := timeline.Key{Host: "node-1", GPU: "GPU-0"}, timeline.Key{Host: "node-1", GPU: "GPU-1"}
	for _, k := range []timeline.Key{gpu0, gpu1} {
		require.True(t, store.Add(k, timeline.Power, t0, 100))
	}
	store.SetProcess(gpu1, 4000, t0)
	req := inference.Request{Host: "node-1", PID: 4000, GPUIDs: []string{"GPU-0"}, Start: t0, End: t0.Add(time.Second)}

	keys, method := (&matcher{store: store, order: cfg.Match.Order}).match(req)
	assert.Equal(t, MatchAttribute, method)
	assert.Equal(t, []timeline.Key{gpu0}, keys)

	keys, method = (&matcher{store: store, order: []string{MatchProcess, MatchAttribute, MatchHost}}).match(req)
	assert.Equal(t, MatchProcess, method, "an order naming process first is followed")
	assert.Equal(t, []timeline.Key{gpu1}, keys)
}
