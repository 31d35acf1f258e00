package gpuvizprocessor

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"
)

// dcgmSeries is one series of a dcgm-exporter scrape.
type dcgmSeries struct {
	name    string
	counter bool // # TYPE counter: a cumulative monotonic sum
	gpu     int
	v       float64
	labels  map[string]string // added to (or, "" values, removed from) the GPU's labels
}

func dcgmUUID(gpu int) string { return fmt.Sprintf("GPU-4f1e2a7c-0000-4000-8000-00000000000%d", gpu) }

// dcgmScrape is one scrape of dcgm-exporter as the prometheus receiver
// v0.165.1 emits it (checked by running it, see e2e/dcgm_test.go): job
// and instance on the resource (service.name, service.instance.id,
// server.port, url.scheme), every label a string attribute, the names as
// they are, a gauge a gauge and a counter a cumulative monotonic sum of
// doubles, every point at the scrape's time.
func dcgmScrape(ts time.Time, series ...dcgmSeries) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	res := rm.Resource().Attributes()
	res.PutStr("service.name", "dcgm-exporter")
	res.PutStr("service.instance.id", "127.0.0.1:9400")
	res.PutStr("server.port", "9400")
	res.PutStr("url.scheme", "http")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	byName := map[string]pmetric.NumberDataPointSlice{}
	for _, s := range series {
		dps, ok := byName[s.name]
		if !ok {
			m := ms.AppendEmpty()
			m.SetName(s.name)
			if s.counter {
				sum := m.SetEmptySum()
				sum.SetIsMonotonic(true)
				sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
				dps = sum.DataPoints()
			} else {
				dps = m.SetEmptyGauge().DataPoints()
			}
			byName[s.name] = dps
		}
		dp := dps.AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(ts))
		dp.SetDoubleValue(s.v)
		a := dp.Attributes()
		labels := map[string]string{
			"gpu": fmt.Sprint(s.gpu), "UUID": dcgmUUID(s.gpu), "pci_bus_id": fmt.Sprintf("00000000:%02X:00.0", 0x18+s.gpu),
			"device": fmt.Sprintf("nvidia%d", s.gpu), "modelName": "NVIDIA H200", "Hostname": "node-a",
			"DCGM_FI_DRIVER_VERSION": "570.124.06",
		}
		for k, v := range s.labels {
			labels[k] = v
		}
		for k, v := range labels {
			if v != "" {
				a.PutStr(k, v)
			}
		}
	}
	return md
}

func dcgmKeyOf(gpu int) timeline.Key { return timeline.Key{Host: "node-a", GPU: dcgmUUID(gpu)} }

// newTestIngest is the ingest of a core with the processor's defaults.
func newTestIngest(t *testing.T) *ingest {
	t.Helper()
	c, now, _ := virtualCore(t, nil)
	*now = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC) // after every point the ingest tests send
	return c.ingest
}

// last is the signal's mean over the second before ts.
func last(in *ingest, k timeline.Key, sig timeline.Signal, ts time.Time) (float64, bool) {
	st := in.store.Window(k, ts.Add(-time.Second), ts).Stats[sig]
	return st.Mean, st.Seconds > 0
}

const mibBytes = 1 << 20

func TestDCGMHandlers(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(10 * time.Second)
	type wantSig struct {
		sig timeline.Signal
		v   float64
	}
	for _, tc := range []struct {
		name   string
		first  []dcgmSeries // at t0
		second []dcgmSeries // at t1, where the values are read
		want   []wantSig
		absent []timeline.Signal
	}{
		{name: "GPU_UTIL percent to ratio", second: []dcgmSeries{{name: "DCGM_FI_DEV_GPU_UTIL", v: 87}}, want: []wantSig{{timeline.Utilization, 0.87}}},
		{
			name:   "GR_ENGINE_ACTIVE preferred to GPU_UTIL",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_GPU_UTIL", v: 90}, {name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", v: 0.6}},
			want:   []wantSig{{timeline.Utilization, 0.6}},
		},
		{
			name:   "GPU_UTIL ignored once GR_ENGINE_ACTIVE came",
			first:  []dcgmSeries{{name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", v: 0.5}},
			second: []dcgmSeries{{name: "DCGM_FI_DEV_GPU_UTIL", v: 90}, {name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", v: 0.55}},
			want:   []wantSig{{timeline.Utilization, 0.55}},
		},
		{name: "MEM_COPY_UTIL", second: []dcgmSeries{{name: "DCGM_FI_DEV_MEM_COPY_UTIL", v: 40}}, want: []wantSig{{timeline.MemoryController, 0.4}}},
		{
			name: "profiling ratios",
			second: []dcgmSeries{
				{name: "DCGM_FI_PROF_SM_ACTIVE", v: 0.5}, {name: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", v: 0.3}, {name: "DCGM_FI_PROF_DRAM_ACTIVE", v: 0.7},
			},
			want: []wantSig{{timeline.SMActivity, 0.5}, {timeline.TensorActivity, 0.3}, {timeline.DRAMActivity, 0.7}},
		},
		{name: "power in W", second: []dcgmSeries{{name: "DCGM_FI_DEV_POWER_USAGE", v: 312.5}}, want: []wantSig{{timeline.Power, 312.5}}},
		{
			name:   "framebuffer MiB: limit is used + free",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_FB_FREE", v: 3000}, {name: "DCGM_FI_DEV_FB_USED", v: 1000}},
			want:   []wantSig{{timeline.MemoryUsed, 1000 * mibBytes}, {timeline.MemoryLimit, 4000 * mibBytes}},
		},
		{
			name:   "framebuffer used alone: no limit",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_FB_USED", v: 1000}},
			want:   []wantSig{{timeline.MemoryUsed, 1000 * mibBytes}},
			absent: []timeline.Signal{timeline.MemoryLimit},
		},
		{
			name:   "framebuffer used and free of different scrapes: no limit",
			first:  []dcgmSeries{{name: "DCGM_FI_DEV_FB_FREE", v: 3000}},
			second: []dcgmSeries{{name: "DCGM_FI_DEV_FB_USED", v: 1000}},
			absent: []timeline.Signal{timeline.MemoryLimit},
		},
		{
			name:   "framebuffer free and used of different scrapes: no limit",
			first:  []dcgmSeries{{name: "DCGM_FI_DEV_FB_USED", v: 1000}},
			second: []dcgmSeries{{name: "DCGM_FI_DEV_FB_FREE", v: 3000}},
			absent: []timeline.Signal{timeline.MemoryLimit},
		},
		{
			name:   "PCIe profiling rates in bytes/s",
			second: []dcgmSeries{{name: "DCGM_FI_PROF_PCIE_TX_BYTES", v: 2e9}, {name: "DCGM_FI_PROF_PCIE_RX_BYTES", v: 1e9}},
			want:   []wantSig{{timeline.PCIeTx, 2e9}, {timeline.PCIeRx, 1e9}},
		},
		{
			name:   "PCIe NVML throughput in KB/s",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", v: 5000, counter: true}, {name: "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", v: 7000, counter: true}},
			want:   []wantSig{{timeline.PCIeTx, 5e6}, {timeline.PCIeRx, 7e6}},
		},
		{
			name:   "PCIe profiling preferred to NVML throughput",
			first:  []dcgmSeries{{name: "DCGM_FI_PROF_PCIE_RX_BYTES", v: 1e9}},
			second: []dcgmSeries{{name: "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", v: 7000, counter: true}, {name: "DCGM_FI_PROF_PCIE_RX_BYTES", v: 3e9}},
			want:   []wantSig{{timeline.PCIeRx, 3e9}},
		},
		{
			name:   "NVLink rates in bytes/s",
			second: []dcgmSeries{{name: "DCGM_FI_PROF_NVLINK_TX_BYTES", v: 4e10}, {name: "DCGM_FI_PROF_NVLINK_RX_BYTES", v: 3e10}},
			want:   []wantSig{{timeline.NVLinkTx, 4e10}, {timeline.NVLinkRx, 3e10}},
		},
		{
			name:   "throttle reasons: sw power cap",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", v: 0x4}},
			want:   []wantSig{{timeline.PowerThrottled, 1}, {timeline.ThermalThrottled, 0}},
		},
		{
			name:   "clock event reasons: hw thermal and hw power brake",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", v: 0x40 | 0x80}},
			want:   []wantSig{{timeline.PowerThrottled, 1}, {timeline.ThermalThrottled, 1}},
		},
		{
			name:   "clock event reasons: hw slowdown is power",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", v: 0x8}},
			want:   []wantSig{{timeline.PowerThrottled, 1}, {timeline.ThermalThrottled, 0}},
		},
		{
			name:   "a clock event mask past 2^53 is no mask",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", v: 1e17}},
			absent: []timeline.Signal{timeline.PowerThrottled, timeline.ThermalThrottled},
		},
		{
			name:   "clock event reasons: idle and sync boost are neither",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", v: 0x1 | 0x10}},
			want:   []wantSig{{timeline.PowerThrottled, 0}, {timeline.ThermalThrottled, 0}},
		},
		{
			name:   "violation counters in ns become shares",
			first:  []dcgmSeries{{name: "DCGM_FI_DEV_POWER_VIOLATION", v: 1e9, counter: true}, {name: "DCGM_FI_DEV_THERMAL_VIOLATION", v: 5e9, counter: true}},
			second: []dcgmSeries{{name: "DCGM_FI_DEV_POWER_VIOLATION", v: 3.5e9, counter: true}, {name: "DCGM_FI_DEV_THERMAL_VIOLATION", v: 5e9, counter: true}},
			want:   []wantSig{{timeline.PowerThrottled, 0.25}, {timeline.ThermalThrottled, 0}},
		},
		{
			name:  "measured violation shares replace the clock event flags",
			first: []dcgmSeries{{name: "DCGM_FI_DEV_POWER_VIOLATION", v: 0, counter: true}},
			second: []dcgmSeries{
				{name: "DCGM_FI_DEV_POWER_VIOLATION", v: 1e9, counter: true}, {name: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", v: 0x4},
			},
			want: []wantSig{{timeline.PowerThrottled, 0.1}},
		},
		{
			name:   "a violation counter that went back is a restart",
			first:  []dcgmSeries{{name: "DCGM_FI_DEV_POWER_VIOLATION", v: 9e9, counter: true}},
			second: []dcgmSeries{{name: "DCGM_FI_DEV_POWER_VIOLATION", v: 1e9, counter: true}},
			absent: []timeline.Signal{timeline.PowerThrottled},
		},
		{
			name:   "a MIG instance's series feeds no signal",
			second: []dcgmSeries{{name: "DCGM_FI_PROF_SM_ACTIVE", v: 0.5, labels: map[string]string{"GPU_I_ID": "1", "GPU_I_PROFILE": "3g.71gb"}}},
			absent: []timeline.Signal{timeline.SMActivity},
		},
		{
			name:   "an unknown field is ignored",
			second: []dcgmSeries{{name: "DCGM_FI_DEV_ENC_UTIL", v: 50}, {name: "DCGM_FI_DEV_XID_ERRORS", v: 79}},
			absent: []timeline.Signal{timeline.Utilization},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newTestIngest(t)
			if tc.first != nil {
				in.consume(context.Background(), dcgmScrape(t0, tc.first...))
			}
			in.consume(context.Background(), dcgmScrape(t1, tc.second...))
			for _, w := range tc.want {
				got, ok := last(in, dcgmKeyOf(0), w.sig, t1)
				require.True(t, ok, "%v learned", w.sig)
				assert.InDelta(t, w.v, got, 1e-9*max(1, w.v), "%v", w.sig)
			}
			for _, sig := range tc.absent {
				_, ok := last(in, dcgmKeyOf(0), sig, t1)
				assert.False(t, ok, "%v not learned", sig)
			}
			if len(tc.want) > 0 {
				assert.Equal(t, "dcgm", in.backend(dcgmKeyOf(0)))
			}
		})
	}
}

func TestDCGMEnergyCounter(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	k := dcgmKeyOf(1)
	for i, mj := range []float64{4.2e9, 4.2e9 + 3e6, 4.2e9 + 7e6} { // 300 W, then 400 W, over 10 s each
		in.consume(context.Background(), dcgmScrape(t0.Add(time.Duration(i)*10*time.Second),
			dcgmSeries{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter: true, gpu: 1, v: mj}))
	}
	w := in.store.Window(k, t0, t0.Add(20*time.Second))
	assert.Equal(t, timeline.EnergyCounter, w.EnergySource)
	assert.InDelta(t, 7000, w.EnergyJ, 1e-6, "mJ since boot, read as J")
	w = in.store.Window(k, t0.Add(10*time.Second), t0.Add(20*time.Second))
	assert.InDelta(t, 4000, w.EnergyJ, 1e-6)
	settled, ok := in.store.Settled(k)
	require.True(t, ok)
	assert.Equal(t, t0.Add(20*time.Second), settled, "the counter settles the GPU's energy")
}

func TestDCGMIdentityAndPods(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	pod := func(name string) map[string]string {
		return map[string]string{"pod": name, "namespace": "llm", "container": "vllm"}
	}
	for i := range 3 {
		ts := t0.Add(time.Duration(i) * 30 * time.Second)
		in.consume(context.Background(), dcgmScrape(ts,
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 0, v: 300, labels: pod("vllm-0")},
			// Time-slicing: dcgm-exporter repeats the GPU's series per pod.
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 1, v: 250, labels: pod("vllm-1")},
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 1, v: 250, labels: pod("vllm-2")},
			// dcgm-exporter's old label names.
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 2, v: 200, labels: map[string]string{"pod_name": "old", "pod_namespace": "batch"}},
			// A MIG instance of GPU 3 names its pod on GPU 3.
			dcgmSeries{name: "DCGM_FI_PROF_SM_ACTIVE", gpu: 3, v: 0.4, labels: map[string]string{"GPU_I_ID": "2", "pod": "mig-pod", "namespace": "llm"}},
			// No pod: an idle GPU.
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 4, v: 80},
		))
	}
	from, to := t0.Add(10*time.Second), t0.Add(50*time.Second)
	assert.Equal(t, []timeline.Key{dcgmKeyOf(0)}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "vllm-0"}, from, to))
	assert.Equal(t, []timeline.Key{dcgmKeyOf(1)}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "vllm-1"}, from, to))
	assert.Equal(t, []timeline.Key{dcgmKeyOf(1)}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "vllm-2"}, from, to))
	assert.Equal(t, []timeline.Key{dcgmKeyOf(2)}, in.store.PodGPUs(timeline.Pod{Namespace: "batch", Name: "old"}, from, to))
	assert.Equal(t, []timeline.Key{dcgmKeyOf(3)}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "mig-pod"}, from, to))
	assert.Empty(t, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "vllm-0"}, t0.Add(10*time.Minute), t0.Add(11*time.Minute)),
		"a span long after the last sighting is not the pod's")
	for gpu := range 3 {
		idx, ok := in.store.Index(dcgmKeyOf(gpu))
		require.True(t, ok, "the gpu label is the index")
		assert.Equal(t, gpu, idx)
	}
	got, _ := last(in, dcgmKeyOf(1), timeline.Power, t0.Add(60*time.Second))
	assert.InDelta(t, 250, got, 1e-9, "a GPU's series repeated per pod are one GPU")
	assert.Equal(t, []timeline.Key{dcgmKeyOf(0), dcgmKeyOf(1), dcgmKeyOf(2), dcgmKeyOf(3), dcgmKeyOf(4)}, in.store.GPUs("node-a"))
}

func TestDCGMKeys(t *testing.T) {
	in := newTestIngest(t)
	ts := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	md := dcgmScrape(ts,
		dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 0, v: 300, labels: map[string]string{"Hostname": ""}},
		dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 1, v: 300, labels: map[string]string{"UUID": ""}},
	)
	md.ResourceMetrics().At(0).Resource().Attributes().PutStr("host.name", "from-resource")
	// A staleness marker: the series went away.
	stale := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().AppendEmpty()
	stale.SetTimestamp(pcommon.NewTimestampFromTime(ts.Add(time.Second)))
	stale.SetDoubleValue(0)
	stale.SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))
	stale.Attributes().PutStr("UUID", dcgmUUID(0))
	stale.Attributes().PutStr("Hostname", "node-a")
	in.consume(context.Background(), md)
	assert.Equal(t, []timeline.Key{{Host: "from-resource", GPU: dcgmUUID(0)}}, in.store.GPUs(""),
		"no Hostname: the resource's host.name; no UUID: not a GPU; the staleness marker ignored")
}

// The gpuviz receiver and dcgm-exporter on one node describe the same GPU
// (host.name = Hostname, hw.id = UUID): per signal, the receiver's points
// win while it sends them, DCGM fills the signals it does not send.
func TestDCGMPrecedence(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	k := dcgmKeyOf(0)
	md := gpuMetrics("node-a", k.GPU, 0, t0, time.Second, slices.Repeat([]sample{{util: 0.9, powerW: 500, memUsed: 1e9}}, 10))
	md.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", "nvml")
	in.consume(context.Background(), md)
	dcgm := func(ts time.Time) {
		in.consume(context.Background(), dcgmScrape(ts,
			dcgmSeries{name: "DCGM_FI_DEV_GPU_UTIL", v: 10},
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", v: 100},
			dcgmSeries{name: "DCGM_FI_PROF_SM_ACTIVE", v: 0.45},
			dcgmSeries{name: "DCGM_FI_DEV_MEM_COPY_UTIL", v: 30},
			dcgmSeries{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter: true, v: 1},
		))
	}
	at := t0.Add(9500 * time.Millisecond)
	dcgm(at)
	util, _ := last(in, k, timeline.Utilization, at)
	assert.InDelta(t, 0.9, util, 1e-9, "DCGM's utilisation is superseded by the receiver's")
	power, _ := last(in, k, timeline.Power, at)
	assert.InDelta(t, 500, power, 1e-9, "and its power")
	settled, ok := in.store.Settled(k)
	require.True(t, ok)
	assert.Equal(t, t0.Add(9*time.Second), settled, "and its energy counter")
	assert.InDelta(t, 4500, in.store.Window(k, t0, t0.Add(9*time.Second)).EnergyJ, 1e-6)
	sm, ok := last(in, k, timeline.SMActivity, at)
	require.True(t, ok, "DCGM fills SM activity, which the receiver does not send")
	assert.InDelta(t, 0.45, sm, 1e-9)
	mc, ok := last(in, k, timeline.MemoryController, at)
	require.True(t, ok)
	assert.InDelta(t, 0.3, mc, 1e-9)
	assert.Equal(t, "dcgm,nvml", in.backend(k))

	// The receiver stops (or its config leaves the signal out): after
	// history.max_span DCGM's points are learned.
	later := t0.Add(9*time.Second + createDefaultConfig().History.MaxSpan + time.Second)
	dcgm(later)
	util, ok = last(in, k, timeline.Utilization, later)
	require.True(t, ok)
	assert.InDelta(t, 0.1, util, 1e-9, "DCGM's utilisation once the receiver's is stale")
}

// A late scrape's violation counter (older than one already measured)
// changes nothing: the next share is measured from the newest point.
func TestDCGMLateViolationPointChangesNothing(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, p := range []struct {
		at time.Duration
		ns float64
	}{{0, 1e9}, {10 * time.Second, 3.5e9}, {5 * time.Second, 2e9}, {20 * time.Second, 6e9}} {
		in.consume(context.Background(), dcgmScrape(t0.Add(p.at), dcgmSeries{name: "DCGM_FI_DEV_POWER_VIOLATION", counter: true, v: p.ns}))
	}
	got, ok := last(in, dcgmKeyOf(0), timeline.PowerThrottled, t0.Add(20*time.Second))
	require.True(t, ok)
	assert.InDelta(t, 0.25, got, 1e-9, "2.5 s of 10 s since the newest point before")
}

// A span on GPUs dcgm-exporter describes every 30 s is held until the
// scrape after its end, past max_wait, and let go two spacings after it
// came when that scrape never arrives; scraped every 45 s, at the longest
// hold (two history.max_span, 60 s).
func TestDCGMSpanWaitsForTheNextScrape(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	scrapeEvery := func(c *core, i int, every time.Duration) {
		c.ingest.consume(context.Background(), dcgmScrape(t0.Add(time.Duration(i)*every),
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 1, v: 300, labels: map[string]string{"pod": "vllm-1", "namespace": "llm"}},
			dcgmSeries{name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu: 1, v: 0.8, labels: map[string]string{"pod": "vllm-1", "namespace": "llm"}},
			dcgmSeries{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter: true, gpu: 1, v: 1e9 + float64(i)*300*every.Seconds()*1000,
				labels: map[string]string{"pod": "vllm-1", "namespace": "llm"}},
		))
	}
	scrape := func(c *core, i int) { scrapeEvery(c, i, 30*time.Second) }
	span := func(c *core, now *time.Time, next consumer.Traces) {
		td := ptrace.NewTraces()
		vllmSpan(td, 1, t0.Add(-3*time.Second), 0, 1, 3, 100) // ends at t0 + 1 s, just after a scrape
		res := td.ResourceSpans().At(0).Resource().Attributes()
		res.PutStr("host.name", "node-a")
		res.PutStr("k8s.pod.name", "vllm-1")
		res.PutStr("k8s.namespace.name", "llm")
		*now = t0.Add(2 * time.Second)
		require.NoError(t, c.consumeTraces(context.Background(), td, next, started))
	}
	t.Run("released when the scrape comes", func(t *testing.T) {
		c, now, sink := virtualCore(t, nil)
		*now = t0
		for i := -3; i <= 0; i++ {
			scrape(c, i)
		}
		span(c, now, sink)
		*now = t0.Add(2*time.Second + c.cfg.MaxWait + time.Second)
		c.tick(*now)
		assert.Zero(t, sink.SpanCount(), "held past max_wait: the GPU's samples come every 30 s")
		scrape(c, 1)
		*now = t0.Add(31 * time.Second)
		c.tick(*now)
		spans := spanAttrs(t, sink, "llm_request")
		require.Len(t, spans, 1)
		a := spans[0]
		assert.Equal(t, "pod", a["gpuviz.gpu.match"])
		assert.Equal(t, "dcgm", a["gpuviz.backend"])
		assert.Equal(t, "counter", a["gpuviz.energy.source"])
		assert.InDelta(t, 1.0, a["gpuviz.coverage"], 1e-9)
		assert.InDelta(t, 0.8, a["gpuviz.gpu.utilization.mean"], 1e-9)
		assert.InDelta(t, 4*300.0, a["gpuviz.energy"], 1e-6, "4 s at 300 W from the energy counter, alone on the GPU")
	})
	t.Run("let go two spacings after it came", func(t *testing.T) {
		c, now, sink := virtualCore(t, nil)
		*now = t0
		for i := -3; i <= 0; i++ {
			scrape(c, i)
		}
		span(c, now, sink)
		*now = t0.Add(2*time.Second + 59*time.Second)
		c.tick(*now)
		assert.Zero(t, sink.SpanCount())
		*now = t0.Add(2*time.Second + 60*time.Second)
		c.tick(*now)
		assert.Equal(t, 1, len(spanAttrs(t, sink, "llm_request")))
	})
	t.Run("let go at the longest hold", func(t *testing.T) {
		c, now, sink := virtualCore(t, nil)
		*now = t0
		for i := -3; i <= 0; i++ {
			scrapeEvery(c, i, 45*time.Second)
		}
		span(c, now, sink)
		*now = t0.Add(2*time.Second + 59*time.Second)
		c.tick(*now)
		assert.Zero(t, sink.SpanCount())
		*now = t0.Add(2*time.Second + 60*time.Second)
		c.tick(*now)
		assert.Equal(t, 1, len(spanAttrs(t, sink, "llm_request")), "not two spacings, 90 s")
	})
}

// FuzzDCGMIngest feeds any DCGM field the table knows with any value and
// labels: nothing panics, and whatever is learned is finite.
func FuzzDCGMIngest(f *testing.F) {
	names := make([]string, 0, len(dcgmHandlers))
	for name := range dcgmHandlers {
		names = append(names, name)
	}
	slices.Sort(names)
	f.Add(uint8(0), 87.0, 12.0, "vllm-0", "", false)
	f.Add(uint8(3), math.NaN(), math.Inf(1), "", "1", true)
	f.Add(uint8(7), -1.0, 1e300, "p", "", true)
	f.Fuzz(func(t *testing.T, which uint8, v1, v2 float64, pod, migID string, counter bool) {
		in := newTestIngest(t)
		name := names[int(which)%len(names)]
		t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		labels := map[string]string{"pod": pod, "namespace": "ns", "GPU_I_ID": migID}
		in.consume(context.Background(), dcgmScrape(t0, dcgmSeries{name: name, counter: counter, v: v1, labels: labels}))
		in.consume(context.Background(), dcgmScrape(t0.Add(30*time.Second), dcgmSeries{name: name, counter: counter, v: v2, labels: labels}))
		w := in.store.Window(dcgmKeyOf(0), t0.Add(-time.Minute), t0.Add(time.Minute))
		for sig, st := range w.Stats {
			if math.IsNaN(st.Mean) || math.IsInf(st.Mean, 0) {
				t.Fatalf("%s: %v learned %v", name, timeline.Signal(sig), st.Mean)
			}
		}
		if math.IsNaN(w.EnergyJ) {
			t.Fatalf("%s: energy NaN", name)
		}
	})
}

// The gpuviz receiver with complement: dcgm and dcgm-exporter on one node,
// on one virtual clock: the receiver's driver samples and tick energy give
// utilisation, power and energy; DCGM's profiling fields, which the
// receiver leaves alone, give SM, tensor and DRAM activity; DCGM's own
// utilisation, power and energy (wrong here on purpose) are superseded.
func TestDCGMBesideTheReceiver(t *testing.T) {
	ctx := context.Background()
	host, err := os.Hostname()
	require.NoError(t, err)
	c, now, sink := virtualCore(t, nil)
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	*now = start
	clock := func() time.Time { return *now }
	lib, err := nvmlsim.New("h200", 1, 1, clock, nvmlsim.WithScenario(nvmlsim.ScenarioSequential))
	require.NoError(t, err)
	rcfg := gpuvizreceiver.NewFactory().CreateDefaultConfig().(*gpuvizreceiver.Config)
	rcfg.Backend = gpuvizreceiver.BackendSimulated
	rcfg.Complement = gpuvizreceiver.ComplementDCGM
	rcfg.XidEvents.Enabled = false
	rcfg.Kubernetes.PodResources.Enabled = false
	recv := gpuvizreceiver.NewDriven(rcfg, receivertest.NewNopSettings(component.MustNewType("gpuviz")), lib, gpuvizreceiver.BackendSimulated, clock)
	require.NoError(t, recv.Start(ctx))
	t.Cleanup(func() { require.NoError(t, recv.Shutdown(ctx)) })
	uuid := nvmlsim.SimulatedUUID("h200", 1, 0)
	gpu := map[string]string{"UUID": uuid, "Hostname": host}
	dcgm := func(ts time.Time, i int) {
		c.ingest.consume(ctx, dcgmScrape(ts,
			dcgmSeries{name: "DCGM_FI_DEV_GPU_UTIL", v: 3, labels: gpu},
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", v: 1, labels: gpu},
			dcgmSeries{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter: true, v: float64(i), labels: gpu},
			dcgmSeries{name: "DCGM_FI_PROF_SM_ACTIVE", v: 0.42, labels: gpu},
			dcgmSeries{name: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", v: 0.33, labels: gpu},
			dcgmSeries{name: "DCGM_FI_PROF_DRAM_ACTIVE", v: 0.55, labels: gpu},
		))
	}
	step := rcfg.Samples.Interval
	for d := time.Duration(0); d <= 70*time.Second; d += step {
		*now = start.Add(d)
		if d%rcfg.CollectionInterval == 0 {
			md, err := recv.Scrape(ctx)
			require.NoError(t, err)
			c.ingest.consume(ctx, md)
		}
		if md, ok := recv.Tick(); ok {
			c.ingest.consume(ctx, md)
		}
		if d%(30*time.Second) == 0 {
			dcgm(*now, int(d/time.Second))
		}
		if d == 50*time.Second {
			td := ptrace.NewTraces()
			vllmSpan(td, 1, start.Add(30*time.Second), 0, 1, 3, 100) // 30 s to 34 s
			require.NoError(t, c.consumeTraces(ctx, td, sink, started))
		}
		if d > 50*time.Second {
			c.tick(*now)
		}
	}
	spans := spanAttrs(t, sink, "llm_request")
	require.Len(t, spans, 1)
	a := spans[0]
	assert.Equal(t, "dcgm,simulated", a["gpuviz.backend"])
	assert.Equal(t, "counter", a["gpuviz.energy.source"])
	assert.InDelta(t, 0.42, a["gpuviz.gpu.sm_activity.mean"], 1e-9, "DCGM's SM activity: the receiver reads no GPM")
	assert.InDelta(t, 0.33, a["gpuviz.gpu.tensor_activity.mean"], 1e-9)
	assert.InDelta(t, 0.55, a["gpuviz.gpu.dram_activity.mean"], 1e-9)
	assert.Greater(t, a["gpuviz.gpu.power.mean"], 50.0, "the receiver's power, not DCGM's 1 W")
	assert.Greater(t, a["gpuviz.energy"], 50.0*4, "the receiver's energy counter, not DCGM's")
	w := c.spans.store.Window(timeline.Key{Host: host, GPU: uuid}, start.Add(30*time.Second), start.Add(34*time.Second))
	assert.Greater(t, math.Abs(w.Stats[timeline.Utilization].Mean-0.03), 1e-6, "the receiver's utilisation samples, not DCGM's 3 %%")
	assert.InDelta(t, 1.0, w.Coverage, 1e-9)
}

// A GPU that sends the driver's power samples has its power from them
// alone: the tick's hw.power readings (one 20 ms reading every 250 ms on an
// H200) stop counting once the first sample has arrived, and count again
// once none has come for history.max_span; a GPU that sends none keeps its
// hw.power.
func TestPowerSamplesReplaceTheTicksPower(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	points := func(name, id string, from time.Time, step time.Duration, n int, watts float64) pmetric.Metrics {
		md := pmetric.NewMetrics()
		m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName(name)
		dps := m.SetEmptyGauge().DataPoints()
		for i := range n {
			dp := dps.AppendEmpty()
			dp.SetTimestamp(pcommon.NewTimestampFromTime(from.Add(time.Duration(i) * step)))
			dp.SetDoubleValue(watts)
			dp.Attributes().PutStr("hw.id", id)
		}
		return md
	}
	ctx := context.Background()
	for _, id := range []string{"GPU-a", "GPU-b"} {
		in.consume(ctx, points("hw.power", id, t0, 250*time.Millisecond, 5, 100)) // 0 to 1 s
	}
	// GPU-a's buffer from 1 s on at 20 ms; both GPUs' ticks read 900 W.
	in.consume(ctx, points("nvidia.gpu.samples.power", "GPU-a", t0.Add(time.Second+20*time.Millisecond), 20*time.Millisecond, 50, 300))
	for _, id := range []string{"GPU-a", "GPU-b"} {
		in.consume(ctx, points("hw.power", id, t0.Add(1250*time.Millisecond), 250*time.Millisecond, 4, 900))
	}
	a, b := timeline.Key{GPU: "GPU-a"}, timeline.Key{GPU: "GPU-b"}
	got, ok := last(in, a, timeline.Power, t0.Add(time.Second))
	require.True(t, ok)
	assert.InDelta(t, 100, got, 1e-9, "GPU-a before its samples: its ticks")
	got, _ = last(in, a, timeline.Power, t0.Add(2*time.Second))
	assert.InDelta(t, 300, got, 1e-9, "GPU-a from its samples on: the samples alone")
	got, _ = last(in, b, timeline.Power, t0.Add(2*time.Second))
	assert.InDelta(t, 900, got, 1e-9, "GPU-b sends no samples: its ticks")

	// GPU-a's samples stop at 2 s; its ticks go on at 500 W. A late batch
	// of its samples from before 1 s (a retry) moves nothing back.
	in.consume(ctx, points("nvidia.gpu.samples.power", "GPU-a", t0.Add(20*time.Millisecond), 20*time.Millisecond, 25, 300))
	maxSpan := createDefaultConfig().History.MaxSpan
	ticks := int((maxSpan - time.Second) / (250 * time.Millisecond))
	in.consume(ctx, points("hw.power", "GPU-a", t0.Add(2250*time.Millisecond), 250*time.Millisecond, ticks, 500))
	_, ok = last(in, a, timeline.Power, t0.Add(2*time.Second+maxSpan-time.Second))
	assert.False(t, ok, "GPU-a's ticks within history.max_span of its last sample: still out")
	in.consume(ctx, points("hw.power", "GPU-a", t0.Add(time.Second+maxSpan), 250*time.Millisecond, 24, 500))
	got, ok = last(in, a, timeline.Power, t0.Add(2*time.Second+maxSpan+3*time.Second))
	require.True(t, ok)
	assert.InDelta(t, 500, got, 1e-9, "GPU-a's ticks count again once its samples stopped for history.max_span")
}

// dcgm-exporter's default device option (-d f, "flex") watches a MIG GPU's
// GPU instances and not the GPU itself (internal/pkg/devicemonitoring,
// monitorAllGPUInstances): every series of the GPU carries GPU_I_ID, and
// the whole GPU's fields (power, the energy counter, temperature, clocks,
// throttling) are repeated on each instance's series with the parent's
// UUID (NVIDIA/dcgm-exporter#317 shows one). Those feed the parent GPU; an
// instance's own readings (profiling, framebuffer) still do not.
func TestDCGMMIGGPUKeepsItsPowerAndEnergy(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	k := dcgmKeyOf(0)
	mig := func(id, profile, pod string) map[string]string {
		return map[string]string{"GPU_I_ID": id, "GPU_I_PROFILE": profile, "pod": pod, "namespace": "llm"}
	}
	for i := range 3 {
		ts := t0.Add(time.Duration(i) * 30 * time.Second)
		mj := 5e9 + float64(i)*300*30*1000 // 300 W
		var series []dcgmSeries
		for _, inst := range []map[string]string{mig("1", "3g.71gb", "vllm-a"), mig("2", "3g.71gb", "vllm-b")} {
			series = append(series,
				dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", v: 300, labels: inst},
				dcgmSeries{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter: true, v: mj, labels: inst},
				dcgmSeries{name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", v: 0.5, labels: inst},
				dcgmSeries{name: "DCGM_FI_DEV_FB_USED", v: 1000, labels: inst},
			)
		}
		in.consume(context.Background(), dcgmScrape(ts, series...))
	}
	w := in.store.Window(k, t0, t0.Add(time.Minute))
	assert.Equal(t, timeline.EnergyCounter, w.EnergySource, "the parent GPU's energy counter, from its instances' series")
	assert.InDelta(t, 300*60.0, w.EnergyJ, 1e-6)
	got, ok := last(in, k, timeline.Power, t0.Add(time.Minute))
	require.True(t, ok, "the parent GPU's power")
	assert.InDelta(t, 300, got, 1e-9)
	for _, sig := range []timeline.Signal{timeline.Utilization, timeline.MemoryUsed} {
		_, ok := last(in, k, sig, t0.Add(time.Minute))
		assert.False(t, ok, "an instance's own %v is not the GPU's", sig)
	}
	assert.Equal(t, []timeline.Key{k}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "vllm-b"}, t0, t0.Add(time.Minute)))
}

// dcgm-exporter after 4.5.3-4.8.2 writes the host label as hostname
// (NVIDIA/dcgm-exporter#655, render_metrics.go); before, Hostname.
func TestDCGMLowercaseHostnameLabel(t *testing.T) {
	in := newTestIngest(t)
	ts := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	md := dcgmScrape(ts, dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 0, v: 300, labels: map[string]string{"Hostname": "", "hostname": "node-a"}})
	in.consume(context.Background(), md)
	assert.Equal(t, []timeline.Key{dcgmKeyOf(0)}, in.store.GPUs("node-a"))
}

// dcgm-exporter run with --use-old-namespace (-o,
// DCGM_EXPORTER_USE_OLD_NAMESPACE) names the GPU's UUID label uuid, not
// UUID (internal/pkg/collector/gpu_collector.go, toMetric; the label
// name is render_metrics.go's {{ $metric.UUID }}), and its pod labels
// pod_name, pod_namespace and container_name
// (transformation/kubernetes.go). The metric names stay those of the
// counters file (DCGM_FI_*).
func TestDCGMOldNamespaceUUIDLabel(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	old := map[string]string{"UUID": "", "uuid": dcgmUUID(0), "Hostname": "", "hostname": "node-a",
		"pod_name": "vllm-0", "pod_namespace": "llm", "container_name": "vllm"}
	for i := range 2 {
		in.consume(context.Background(), dcgmScrape(t0.Add(time.Duration(i)*30*time.Second),
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", v: 300, labels: old},
			dcgmSeries{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", counter: true, v: 5e9 + float64(i)*300*30*1000, labels: old},
		))
	}
	k := dcgmKeyOf(0)
	assert.Equal(t, []timeline.Key{k}, in.store.GPUs("node-a"))
	assert.InDelta(t, 300*30.0, in.store.Window(k, t0, t0.Add(30*time.Second)).EnergyJ, 1e-6)
	assert.Equal(t, []timeline.Key{k}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "vllm-0"}, t0, t0.Add(30*time.Second)))
}

// DCGM reads the framebuffer with nvmlDeviceGetMemoryInfo_v2 (driver 510
// on; DcgmCacheManager.cpp, ReadAndCacheFBMemoryInfo), whose used leaves
// out what the driver reserves: total = used + free + reserved, and
// dcgm-exporter's counters files send DCGM_FI_DEV_FB_RESERVED (MiB) beside
// FB_USED and FB_FREE. The limit is the GPU's memory, as the receiver's
// hw.gpu.memory.limit (NVML's total) is, whichever order the scrape's
// series come in (dcgm-exporter ranges over a map of counters).
func TestDCGMMemoryLimitCountsTheReservedFramebuffer(t *testing.T) {
	const totalMiB, usedMiB, reservedMiB = 81559, 40000, 587 // an H100 80GB HBM3
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	used := dcgmSeries{name: "DCGM_FI_DEV_FB_USED", v: usedMiB}
	free := dcgmSeries{name: "DCGM_FI_DEV_FB_FREE", v: totalMiB - usedMiB - reservedMiB}
	reserved := dcgmSeries{name: "DCGM_FI_DEV_FB_RESERVED", v: reservedMiB}
	for _, order := range [][]dcgmSeries{{used, free, reserved}, {reserved, free, used}, {free, reserved, used}} {
		in := newTestIngest(t)
		in.consume(context.Background(), dcgmScrape(t0, order...))
		got, ok := last(in, dcgmKeyOf(0), timeline.MemoryLimit, t0)
		require.True(t, ok)
		assert.InDelta(t, totalMiB*mibBytes, got, 1, "%s, %s, %s", order[0].name, order[1].name, order[2].name)
	}
	// Without FB_RESERVED (older counters files, a driver before 510) the
	// limit is used + free.
	in := newTestIngest(t)
	in.consume(context.Background(), dcgmScrape(t0, used, free))
	got, ok := last(in, dcgmKeyOf(0), timeline.MemoryLimit, t0)
	require.True(t, ok)
	assert.InDelta(t, (totalMiB-reservedMiB)*mibBytes, got, 1)
}

// A scrape job that sets pod and namespace target labels (Kubernetes
// service discovery's usual relabelling, __meta_kubernetes_pod_name →
// pod) with honor_labels false (the default) makes Prometheus rename
// dcgm-exporter's own pod, namespace and container labels exported_pod,
// exported_namespace and exported_container, and pod and namespace name
// the dcgm-exporter pod (scrape.mutateSampleLabels). The workload's pod is
// the exported one.
func TestDCGMExportedPodLabels(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		in.consume(context.Background(), dcgmScrape(t0.Add(time.Duration(i)*30*time.Second),
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 0, v: 300, labels: map[string]string{
				"pod": "nvidia-dcgm-exporter-7xk2p", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter",
				"exported_pod": "vllm-0", "exported_namespace": "llm", "exported_container": "vllm",
			}},
			dcgmSeries{name: "DCGM_FI_DEV_POWER_USAGE", gpu: 1, v: 80, labels: map[string]string{
				"pod": "nvidia-dcgm-exporter-7xk2p", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter",
			}},
		))
	}
	from, to := t0, t0.Add(30*time.Second)
	assert.Equal(t, []timeline.Key{dcgmKeyOf(0)}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: "vllm-0"}, from, to))
	assert.NotContains(t, in.store.PodGPUs(timeline.Pod{Namespace: "gpu-operator", Name: "nvidia-dcgm-exporter-7xk2p"}, from, to),
		dcgmKeyOf(0), "the exporter's own pod does not hold the workload's GPU")
}

// DCGM's violation counters count nanoseconds: dcgm_fields.h ("Power
// Violation time in ns"), NVML's nvmlViolationTime_t.violationTime, and
// dcgm-exporter's counters files since NVIDIA/dcgm-exporter#589 ("(in
// ns)"). A GPU held at its power cap a quarter of a 10 s scrape interval
// grows the counter by 2.5e9.
func TestDCGMViolationCountersAreNanoseconds(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(10 * time.Second)
	in.consume(context.Background(), dcgmScrape(t0, dcgmSeries{name: "DCGM_FI_DEV_POWER_VIOLATION", counter: true, v: 7e12}))
	in.consume(context.Background(), dcgmScrape(t1, dcgmSeries{name: "DCGM_FI_DEV_POWER_VIOLATION", counter: true, v: 7e12 + 2.5e9}))
	got, ok := last(in, dcgmKeyOf(0), timeline.PowerThrottled, t1)
	require.True(t, ok)
	assert.InDelta(t, 0.25, got, 1e-9, "power-capped a quarter of the interval, not all of it")
}

// dcgm-exporter with --kubernetes-virtual-gpus (time-slicing) sends
// DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED as the GPU's series (no pod
// labels) followed by one series per pod holding that pod's processes'
// share, with pod_uid (transformation/kubernetes.go, Process and
// createPerProcessMetrics, since 4.5.3-4.8.2); its other fields are
// repeated per pod with the GPU's value. The GPU's utilisation and memory
// are the GPU's series, not the last pod's share; each pod is still a
// sighting.
func TestDCGMPerPodSharesAreNotTheGPUs(t *testing.T) {
	in := newTestIngest(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	k := dcgmKeyOf(0)
	pod := func(name, uid string) map[string]string {
		return map[string]string{"pod": name, "namespace": "llm", "container": "vllm", "pod_uid": uid}
	}
	a, b := pod("vllm-a", "0c6f7e9a-1111-4a1b-9c1d-000000000001"), pod("vllm-b", "0c6f7e9a-1111-4a1b-9c1d-000000000002")
	for i := range 2 {
		in.consume(context.Background(), dcgmScrape(t0.Add(time.Duration(i)*30*time.Second),
			dcgmSeries{name: "DCGM_FI_DEV_GPU_UTIL", v: 90},
			dcgmSeries{name: "DCGM_FI_DEV_GPU_UTIL", v: 60, labels: a},
			dcgmSeries{name: "DCGM_FI_DEV_GPU_UTIL", v: 0, labels: b},
			dcgmSeries{name: "DCGM_FI_DEV_FB_USED", v: 50000},
			dcgmSeries{name: "DCGM_FI_DEV_FB_USED", v: 30000, labels: a},
			dcgmSeries{name: "DCGM_FI_DEV_FB_USED", v: 20000, labels: b},
			dcgmSeries{name: "DCGM_FI_DEV_FB_FREE", v: 30000, labels: a},
			dcgmSeries{name: "DCGM_FI_DEV_FB_FREE", v: 30000, labels: b},
		))
	}
	ts := t0.Add(30 * time.Second)
	for _, w := range []struct {
		sig timeline.Signal
		v   float64
	}{{timeline.Utilization, 0.9}, {timeline.MemoryUsed, 50000 * mibBytes}, {timeline.MemoryLimit, 80000 * mibBytes}} {
		got, ok := last(in, k, w.sig, ts)
		require.True(t, ok, "%v", w.sig)
		assert.InDelta(t, w.v, got, 1e-9*w.v, "%v is the GPU's, not a pod's share", w.sig)
	}
	for _, name := range []string{"vllm-a", "vllm-b"} {
		assert.Equal(t, []timeline.Key{k}, in.store.PodGPUs(timeline.Pod{Namespace: "llm", Name: name}, t0, ts))
	}
}

// Where the gpuviz receiver and dcgm-exporter both describe a GPU, a span
// is held until DCGM's point after its end has come, for the activity only
// DCGM gives: past max_wait (20 s) for a scrape late by 10 s, up to two of
// its spacings; on two such GPUs, until the one whose DCGM data is behind
// has sent, for two of the longer spacing. A GPU whose DCGM points stopped
// is still waited for until they are two history.max_span (60 s) behind
// its newest point.
func TestDCGMBesideTheReceiverHoldsForItsNextScrape(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	every := func(from, to, step int) []int {
		var out []int
		for s := from; s <= to; s += step {
			out = append(out, s)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		scrapes   [][]int // per GPU, the seconds from t0 its DCGM points are stamped and sent at
		leavesAtS int
	}{
		{"one GPU, its scrape late", [][]int{{-60, -30, 0, 40}}, 40},
		{"two GPUs, the slower one's scrape late", [][]int{{-60, -30, 0, 40}, every(-60, 80, 10)}, 40},
		{"one GPU, its DCGM points stopped", [][]int{{-60, -30}}, 31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now, _ := virtualCore(t, nil)
			var receiver []pmetric.Metrics
			for g := range tc.scrapes {
				md := gpuMetrics("node-a", dcgmUUID(g), int64(g), t0.Add(-70*time.Second), time.Second, repeat(busy, 151))
				md.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", "nvml")
				receiver = append(receiver, md)
			}
			sink := &releaseClock{now: now, trace: 1}
			for s := -70; s <= 80; s++ {
				*now = t0.Add(time.Duration(s) * time.Second)
				for g, scrapes := range tc.scrapes {
					c.ingest.consume(context.Background(), pointsWhere(receiver[g], (*now).Equal))
					if slices.Contains(scrapes, s) {
						c.ingest.consume(context.Background(), dcgmScrape(*now,
							dcgmSeries{name: "DCGM_FI_PROF_SM_ACTIVE", gpu: g, v: 0.4}, dcgmSeries{name: "DCGM_FI_PROF_NVLINK_RX_BYTES", gpu: g, v: 1e9}))
					}
				}
				if s == 2 {
					td := ptrace.NewTraces()
					vllmSpan(td, 1, t0.Add(-3*time.Second), 0, 1, 3, 100) // ends at t0 + 1 s
					td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-a")
					require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
				}
				c.tick(*now)
			}
			require.False(t, sink.at.IsZero(), "handed on")
			assert.Equal(t, tc.leavesAtS, int(sink.at.Sub(t0)/time.Second))
		})
	}
}
