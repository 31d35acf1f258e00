//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"

	"github.com/gpuviz/gpuviz/internal/gpucheck"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/procs"
)

// The fault test's schedule: every fault is on between faultsFrom and
// faultsUntil (since the collector started) on a GPU of its own; GPU 0 has
// none. faultsInterval is the scrape's collection interval, and its
// timeout half of it (the receiver's default).
const (
	faultsInterval = 2 * time.Second
	faultsFrom     = 15 * time.Second
	faultsUntil    = 45 * time.Second
	// faultsRecovery is how long goroutines and heap get to return to
	// where they were before the faults.
	faultsRecovery = 2 * time.Minute
)

const faultsCollectorConfig = `# Written by e2e/faults_test.go: simulated GPUs under injected faults, one
# fault per GPU (GPU 0 is the control), read by the gpuviz receiver and sent
# to the test's OTLP/gRPC server.
receivers:
  gpuviz:
    collection_interval: %[1]v
    backend: simulated
    simulated:
      model: h200
      gpus: 8
      seed: 1
      faults:
        - {kind: missing, calls: [nvmlDeviceGetTotalEnergyConsumption]}
        - {kind: reset, gpu: 1, after: 25s, duration: 5s}
        - {kind: error, gpu: 2, error: unknown, rate: 0.3, after: 15s, duration: 30s}
        - {kind: hang, gpu: 3, calls: [nvmlDeviceGetTemperature], sleep: 8s, after: 15s, duration: 8s}
        - {kind: hang, gpu: 4, calls: [nvmlGpmSampleGet], sleep: 6s, after: 15s, duration: 6s}
        - {kind: error, gpu: 5, error: gpu_is_lost, after: 15s, duration: 20s}
        - {kind: xid_storm, gpu: 6, xid: 48, rate: 500, after: 15s, duration: 10s}
        - {kind: error, gpu: 7, error: timeout, calls: [nvmlDeviceGetFieldValues], after: 15s, duration: 30s}
        - {kind: unsupported, gpu: 7, calls: [nvmlDeviceGetProcessUtilization]}
exporters:
  otlp_grpc:
    endpoint: 127.0.0.1:%[2]d
    tls:
      insecure: true
    compression: none
extensions:
  pprof:
    endpoint: 127.0.0.1:%[3]d
service:
  extensions: [pprof]
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [gpuviz]
      exporters: [otlp_grpc]
`

// faultPoint is one received data point of a GPU.
type faultPoint struct {
	at    time.Duration // its timestamp, since the collector started
	value float64
	state string // hw.status's hw.state
	dir   string // hw.gpu.io's network.io.direction
}

// metricSink is the collector's OTLP/gRPC destination for metrics: it keeps
// the points of the metrics the test reads, per metric and GPU.
type metricSink struct {
	pmetricotlp.UnimplementedGRPCServer
	start time.Time
	keep  []string

	mu        sync.Mutex
	points    map[string]map[string][]faultPoint // metric -> hw.id -> points
	resources map[string]bool                    // gpuviz.simulated.faults values seen
}

func (s *metricSink) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rms := req.Metrics().ResourceMetrics()
	for i := range rms.Len() {
		if v, ok := rms.At(i).Resource().Attributes().Get("gpuviz.simulated.faults"); ok {
			s.resources[v.AsString()] = true
		}
	}
	for _, dp := range gpucheck.FromMetrics(req.Metrics()) {
		if !slices.Contains(s.keep, dp.Metric) {
			continue
		}
		p := faultPoint{
			at:    time.Unix(0, dp.TimeUnixNano).Sub(s.start),
			value: dp.Value,
			state: dp.Attrs["hw.state"],
			dir:   dp.Attrs["network.io.direction"],
		}
		if s.points[dp.Metric] == nil {
			s.points[dp.Metric] = map[string][]faultPoint{}
		}
		s.points[dp.Metric][dp.Attrs["hw.id"]] = append(s.points[dp.Metric][dp.Attrs["hw.id"]], p)
	}
	return pmetricotlp.NewExportResponse(), nil
}

// series returns a copy of metric's points of GPU i, in time order.
func (s *metricSink) series(metric string, i int) []faultPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	pts := slices.Clone(s.points[metric][simulatedGPU(i)])
	slices.SortStableFunc(pts, func(a, b faultPoint) int { return int(a.at - b.at) })
	return pts
}

func simulatedGPU(i int) string { return fmt.Sprintf("GPU-simulated-h200-1-%02d", i) }

// states returns GPU i's hw.state at each scrape, in time order.
func (s *metricSink) states(i int) []faultPoint {
	var out []faultPoint
	for _, p := range s.series("hw.status", i) {
		if p.value == 1 {
			out = append(out, p)
		}
	}
	return out
}

// stateBetween reports the states GPU i reported in [from, to).
func stateBetween(pts []faultPoint, from, to time.Duration) map[string]int {
	out := map[string]int{}
	for _, p := range pts {
		if p.at >= from && p.at < to {
			out[p.state]++
		}
	}
	return out
}

// maxGap is the longest time between two consecutive points in [from, to),
// counting from from and up to to.
func maxGap(pts []faultPoint, from, to time.Duration) time.Duration {
	last, gap := from, time.Duration(0)
	for _, p := range pts {
		if p.at < from || p.at >= to {
			continue
		}
		gap = max(gap, p.at-last)
		last = p.at
	}
	return max(gap, to-last)
}

// pprofFacts reads goroutines and the live heap (after a GC) from the pprof
// extension; goroutines is the least of a few readings, so that the
// receiver's short-lived per-scrape goroutines do not count.
func pprofFacts(t *testing.T, port int) (goroutines, heap int64) {
	t.Helper()
	get := func(path string) string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	number := func(re *regexp.Regexp, text string) int64 {
		m := re.FindStringSubmatch(text)
		require.NotNil(t, m, "pprof's answer has %s", re)
		n, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		return n
	}
	goroutines = -1
	for range 5 {
		n := number(regexp.MustCompile(`goroutine profile: total (\d+)`), get("/debug/pprof/goroutine?debug=1"))
		if goroutines < 0 || n < goroutines {
			goroutines = n
		}
		time.Sleep(150 * time.Millisecond)
	}
	heap = number(regexp.MustCompile(`# HeapAlloc = (\d+)`), get("/debug/pprof/heap?gc=1&debug=1"))
	return goroutines, heap
}

// memoryOf says the collector's RSS and peak RSS.
func memoryOf(t *testing.T, collector *procs.Proc) string {
	t.Helper()
	m, err := collector.Memory()
	require.NoError(t, err)
	return fmt.Sprintf("RSS %d MiB, peak %d MiB", m.RSS>>20, m.Peak>>20)
}

// untilOneEpisodeHolds is how long to wait from now for [now, now+d) to
// lie inside one episode of the faults' simulated node (the default
// scenario's episodes start on wall-clock multiples of their length).
func untilOneEpisodeHolds(t *testing.T, now time.Time, d time.Duration) time.Duration {
	t.Helper()
	node, err := nvmlsim.NewNode("h200", nvmlsim.DefaultScenario, 8, 1)
	require.NoError(t, err)
	episode := node.Scenario().Episode
	require.Less(t, d, episode, "the run is longer than an episode")
	off := time.Duration(now.UnixNano() % int64(episode))
	if off+d <= episode {
		return 0
	}
	return episode - off + time.Second
}

// TestFaults runs the built collector on simulated GPUs under injected
// faults, one per GPU, all between faultsFrom and faultsUntil: a GPU
// reset, a 30% error rate, a hung scrape call, a hung GPM call, a lost
// GPU, an Xid storm, failing field values and an unsupported entry point,
// with a missing optional symbol on all. It asserts that the other GPUs
// keep reporting on schedule, each faulty GPU's hw.status says so and
// recovers, energy and byte counters continue across the reset, nothing
// panics, and goroutines and live heap return to where they were before
// the faults. It needs only the collector (make build):
//
//	go test -tags e2e -count=1 -run TestFaults -v ./e2e/
func TestFaults(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := env("GPUVIZ_COLLECTOR", filepath.Join(root, "_build/otelcol-gpuviz"))
	_, err = os.Stat(bin)
	require.NoError(t, err, "build the collector first: make build")

	sink := &metricSink{
		keep:      []string{"hw.status", "hw.temperature", "hw.power", "hw.energy", "hw.gpu.io", "nvidia.gpu.xid.errors", "nvidia.gpu.sm.activity"},
		points:    map[string]map[string][]faultPoint{},
		resources: map[string]bool{},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	pmetricotlp.RegisterGRPCServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop) // after the collector's

	work := t.TempDir()
	ports, err := procs.FreePorts(1)
	require.NoError(t, err)
	pprofPort := ports[0]
	conf := filepath.Join(work, "faults-collector.yaml")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, faultsCollectorConfig,
		faultsInterval, lis.Addr().(*net.TCPAddr).Port, pprofPort), 0o644))
	group, err := procs.NewGroup(work)
	require.NoError(t, err)
	// The live heap is compared before the faults and after they cleared;
	// at an episode boundary the simulation caches a second episode
	// (about 10 MB), so the run must lie inside one.
	time.Sleep(untilOneEpisodeHolds(t, time.Now(), faultsUntil+3*faultsInterval+faultsRecovery+15*time.Second))
	sink.start = time.Now() // the faults are armed a little later, when the receiver starts
	collector, err := group.Spawn("collector", bin, "--config", conf)
	require.NoError(t, err)
	t.Cleanup(func() {
		group.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(collector.Log); err == nil {
				t.Logf("collector log (last 6 KiB):\n%s", b[max(0, len(b)-6144):])
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, procs.WaitReady(ctx, collector, procs.TCPReady(fmt.Sprintf("127.0.0.1:%d", pprofPort))))

	// The baseline, before any fault.
	time.Sleep(time.Until(sink.start.Add(faultsFrom - 3*time.Second)))
	goroutines0, heap0 := pprofFacts(t, pprofPort)
	t.Logf("before the faults: %d goroutines, %d B live heap, %s", goroutines0, heap0, memoryOf(t, collector))

	time.Sleep(time.Until(sink.start.Add(faultsUntil + 3*faultsInterval)))
	var goroutines, heap int64
	recovered := time.Now()
	for {
		goroutines, heap = pprofFacts(t, pprofPort)
		if (goroutines-goroutines0 <= 2 && goroutines0-goroutines <= 2 && float64(heap) <= 1.1*float64(heap0)) ||
			time.Since(recovered) > faultsRecovery {
			break
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("after the faults: %d goroutines, %d B live heap, %v after they cleared, %s", goroutines, heap, time.Since(recovered).Round(time.Second), memoryOf(t, collector))
	end := time.Since(sink.start)
	exited, err := collector.Exited()
	require.False(t, exited, "the collector is still running (%v)", err)
	log, err := os.ReadFile(collector.Log)
	require.NoError(t, err)

	assert.InDelta(t, goroutines0, goroutines, 2, "goroutines return to where they were")
	assert.LessOrEqual(t, float64(heap), 1.1*float64(heap0), "the live heap returns to within 10%% of where it was")
	assert.NotContains(t, string(log), "panic", "no panic")
	assert.Contains(t, string(log), "FAULT INJECTION IS ON")
	sink.mu.Lock()
	assert.Equal(t, map[string]bool{"missing,reset@1,error@2,hang@3,hang@4,error@5,xid_storm@6,error@7,unsupported@7": true}, sink.resources,
		"every data point says it was made under injected faults")
	sink.mu.Unlock()

	// On schedule: the healthy GPU's scrape-time readings every interval and
	// its sampled power every flush (1 s), however the others fail; a
	// sequential scrape would have held GPU 0's next reading for GPU 3's 8 s
	// hang.
	for _, i := range []int{0, 6} {
		assert.LessOrEqual(t, maxGap(sink.series("hw.temperature", i), faultsFrom, end-faultsInterval), 2*faultsInterval,
			"GPU %d's scrape-time readings keep coming", i)
		assert.LessOrEqual(t, maxGap(sink.series("hw.power", i), faultsFrom, end-faultsInterval), 2*time.Second,
			"GPU %d's sampled readings keep coming", i)
	}
	assert.Equal(t, map[string]int{"ok": len(sink.states(0))}, stateBetween(sink.states(0), 0, end), "GPU 0 is ok throughout")
	assert.LessOrEqual(t, maxGap(sink.series("hw.power", 3), faultsFrom, end-faultsInterval), 2*time.Second,
		"a hung scrape call holds up none of its GPU's sampled readings")
	assert.LessOrEqual(t, maxGap(sink.series("hw.temperature", 4), faultsFrom, end-faultsInterval), 2*faultsInterval,
		"a hung sampling call holds up none of its GPU's scrape-time readings")
	assert.Less(t, maxGap(sink.series("nvidia.gpu.sm.activity", 0), faultsFrom, end-faultsInterval), 2*time.Second,
		"GPM on GPU 0 goes on while GPU 4's hangs")

	// The faulty GPUs say so while the fault lasts, and recover.
	last := end - 3*faultsInterval
	for _, tc := range []struct {
		gpu      int
		during   string
		from, to time.Duration
	}{
		{1, "failed", 25 * time.Second, 30 * time.Second},
		{2, "degraded", faultsFrom, faultsUntil},
		{3, "degraded", faultsFrom, 23 * time.Second},
		{4, "degraded", faultsFrom, 21 * time.Second},
		{5, "failed", faultsFrom, 35 * time.Second},
		{6, "degraded", faultsFrom, 25 * time.Second},
		{7, "degraded", faultsFrom, faultsUntil},
	} {
		st := sink.states(tc.gpu)
		assert.Positive(t, stateBetween(st, tc.from, tc.to+faultsInterval)[tc.during], "GPU %d reports %s during its fault: %v", tc.gpu, tc.during, st)
		before := stateBetween(st, 0, faultsFrom-time.Second)
		assert.Equal(t, map[string]int{"ok": before["ok"]}, before, "GPU %d is ok before", tc.gpu)
		after := stateBetween(st, last, end)
		assert.Equal(t, map[string]int{"ok": after["ok"]}, after, "GPU %d is ok again at the end", tc.gpu)
		assert.Positive(t, after["ok"], "GPU %d is read at the end", tc.gpu)
	}
	xids := sink.series("nvidia.gpu.xid.errors", 6)
	require.NotEmpty(t, xids)
	assert.Equal(t, 5000.0, xids[len(xids)-1].value, "every Xid of the storm is counted (10 s at 500/s)")
	assert.LessOrEqual(t, strings.Count(string(log), "GPU reported a critical Xid error"), 2, "a storm is logged, not every Xid of it")

	// After the reset, the counters continue: no step back, no wrap-sized
	// step forward.
	energy := sink.series("hw.energy", 1)
	require.NotEmpty(t, energy)
	assert.Greater(t, energy[len(energy)-1].at, 35*time.Second, "GPU 1's energy is read after its reset")
	for k := 1; k < len(energy); k++ {
		step, dt := energy[k].value-energy[k-1].value, (energy[k].at - energy[k-1].at).Seconds()
		assert.GreaterOrEqual(t, step, 0.0, "energy never falls (at %v)", energy[k].at)
		assert.LessOrEqual(t, step, 1000*max(dt, 1), "energy rises at most 1 kW (at %v)", energy[k].at)
	}
	io := map[string][]faultPoint{}
	for _, p := range sink.series("hw.gpu.io", 1) {
		io[p.dir] = append(io[p.dir], p)
	}
	require.NotEmpty(t, io)
	for dir, pts := range io {
		for k := 1; k < len(pts); k++ {
			step, dt := pts[k].value-pts[k-1].value, (pts[k].at - pts[k-1].at).Seconds()
			assert.GreaterOrEqual(t, step, 0.0, "%s bytes never fall (at %v)", dir, pts[k].at)
			assert.LessOrEqual(t, step, 128e9*max(dt, 1), "%s bytes rise at most at PCIe 5 x16 (at %v)", dir, pts[k].at)
		}
	}
	t.Logf("collector log: %d lines", strings.Count(string(log), "\n"))
}
