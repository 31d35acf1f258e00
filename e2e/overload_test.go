//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/gpuviz/gpuviz/internal/otlpsend"
	"github.com/gpuviz/gpuviz/internal/procs"
)

// overloadPorts moves every port the quickstart binds (so a collector
// already on 4317 does not clash) and puts the collector's own metrics on
// a known one. Arguments: OTLP gRPC, OTLP HTTP, prometheus exporter,
// health_check, pprof, zpages, gpuviz_view, telemetry.
const overloadPorts = `receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:%d}
      http: {endpoint: 127.0.0.1:%d}
exporters:
  prometheus: {endpoint: 127.0.0.1:%d}
extensions:
  health_check: {endpoint: 127.0.0.1:%d}
  pprof: {endpoint: 127.0.0.1:%d}
  zpages: {endpoint: 127.0.0.1:%d}
  gpuviz_view: {endpoint: 127.0.0.1:%d}
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: %d}
`

// TestOverload offers the built collector, on the quickstart's
// configuration and GOMEMLIMIT (as `make run` sets them), 20,000 vLLM spans a second from a fixed-rate sender of
// pre-encoded OTLP (GPUVIZ_OVERLOAD_RATE, _SECONDS to change), and asserts
// what must hold however slow the machine: RSS stays within the
// quickstart's memory_limiter limit_mib + 64 MiB; every refusal the
// client got is backpressure (ResourceExhausted or Unavailable), none
// needed otherwise; every span the receiver accepted leaves the exporter
// (the processor's phase spans counted apart). `go test -tags e2e -run
// TestOverload ./e2e/` after make build.
func TestOverload(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := env("GPUVIZ_COLLECTOR", filepath.Join(root, "_build/otelcol-gpuviz"))
	_, err = os.Stat(bin)
	require.NoError(t, err, "build the collector first: make build")
	rate, err := strconv.ParseFloat(env("GPUVIZ_OVERLOAD_RATE", "20000"), 64)
	require.NoError(t, err)
	seconds, err := strconv.Atoi(env("GPUVIZ_OVERLOAD_SECONDS", "30"))
	require.NoError(t, err)
	quickstart := filepath.Join(root, "examples/quickstart/config.yaml")
	limit := limitMiB(t, quickstart)

	work := t.TempDir()
	ports, err := procs.FreePorts(8)
	require.NoError(t, err)
	overlay := filepath.Join(work, "ports.yaml")
	args := make([]any, len(ports))
	for i, p := range ports {
		args[i] = p
	}
	require.NoError(t, os.WriteFile(overlay, fmt.Appendf(nil, overloadPorts, args...), 0o644))
	group, err := procs.NewGroup(work)
	require.NoError(t, err)
	// As `make run` runs the quickstart (the collector inherits it).
	t.Setenv("GOMEMLIMIT", env("GOMEMLIMIT", "400MiB"))
	collector, err := group.Spawn("collector", bin, "--config", quickstart, "--config", overlay)
	require.NoError(t, err)
	t.Cleanup(func() {
		group.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(collector.Log); err == nil {
				t.Logf("collector log (tail):\n%s", tail(b, 4000))
			}
		}
	})
	telemetry := fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[7])
	ctx := context.Background()
	require.NoError(t, procs.WaitReady(ctx, collector, procs.HTTPReady(telemetry)))
	pid := collector.Pid()
	// The processor holds spans only once GPU data has come (before, they
	// pass as no_gpu): wait for the simulated receiver's first scrape.
	require.Eventually(t, func() bool { return telemetryOf(t, ports[7]).sum("otelcol_receiver_accepted_metric_points", "") > 0 },
		time.Minute, 200*time.Millisecond, "the gpuviz receiver's first scrape")

	peak := &rssPeak{}
	stopSampling := peak.sample(pid)
	host, err := os.Hostname()
	require.NoError(t, err)
	payloads, err := otlpsend.VLLM(host, 16, 100, rate, uint64(time.Now().UnixNano()))
	require.NoError(t, err)
	res, err := otlpsend.Run(ctx, otlpsend.Config{
		Endpoint: fmt.Sprintf("127.0.0.1:%d", ports[0]), Rate: rate, Duration: time.Duration(seconds) * time.Second,
		MaxInFlight: 32, Timeout: 5 * time.Second,
	}, payloads)
	require.NoError(t, err)
	t.Logf("sender: offered %d, accepted %d, refused %v, unsent %d (due while 32 requests were out)", res.Offered, res.Accepted, res.Refused, res.Unsent)
	require.Positive(t, res.Accepted, "the collector accepted nothing")

	// Drain: held spans leave within max_wait of the quickstart's GPU
	// data. Bounded generously; what is asserted is the count, not when.
	var m promText
	drained := func() bool {
		m = telemetryOf(t, ports[7])
		out := m.sum("otelcol_exporter_sent_spans", "") - m.sum("otelcol_processor_gpuviz_phase_spans_added", "")
		return out >= m.sum("otelcol_receiver_accepted_spans", "") && m.sum("otelcol_processor_gpuviz_pending_spans", "") == 0
	}
	assert.Eventually(t, drained, 3*time.Minute, 500*time.Millisecond, "the held spans leave")
	stopSampling()
	require.NoError(t, group.Exited(nil), "the collector kept running")
	// The sampler drops a failed read: with none read, the RSS bound below
	// held at 0.
	require.Positive(t, peak.max(), "the collector's VmHWM (pid %d) was read", pid)

	accepted := m.sum("otelcol_receiver_accepted_spans", "")
	t.Logf("collector: accepted %.0f, refused %.0f, exported %.0f + %.0f phase spans; RSS peak %.1f MiB (limit_mib %d)",
		accepted, m.sum("otelcol_receiver_refused_spans", ""), m.sum("otelcol_exporter_sent_spans", "")-m.sum("otelcol_processor_gpuviz_phase_spans_added", ""),
		m.sum("otelcol_processor_gpuviz_phase_spans_added", ""), float64(peak.max())/(1<<20), limit)
	assert.LessOrEqual(t, peak.max(), int64(limit+64)<<20, "RSS within limit_mib + 64 MiB")
	assert.Equal(t, float64(res.Accepted), accepted, "the client was told of every span the receiver accepted")
	assert.Equal(t, float64(res.RefusedTotal()), m.sum("otelcol_receiver_refused_spans", ""), "the client was told of every refusal")
	for code := range res.Refused {
		assert.Contains(t, []string{codes.ResourceExhausted.String(), codes.Unavailable.String()}, code, "refusals are backpressure")
	}
	assert.Equal(t, accepted, m.sum("otelcol_exporter_sent_spans", "")-m.sum("otelcol_processor_gpuviz_phase_spans_added", ""), "every accepted span exported")
	assert.Zero(t, m.sum("otelcol_exporter_send_failed_spans", ""))
	assert.Zero(t, m.sum("otelcol_processor_gpuviz_spans_refused", ""))
	assert.Positive(t, m.sum("otelcol_processor_gpuviz_spans_enriched", ""), "the processor was in the path")
}

// limitMiB reads memory_limiter's limit_mib from a config.
func limitMiB(t *testing.T, config string) int {
	t.Helper()
	b, err := os.ReadFile(config)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s+limit_mib:\s*(\d+)`).FindSubmatch(b)
	require.NotNil(t, m, "no limit_mib in %s", config)
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}

// rssPeak is the collector's peak resident memory: the kernel's VmHWM,
// which catches the spikes between samples, and VmRSS beside it.
type rssPeak struct {
	mu    sync.Mutex
	bytes int64
}

func (r *rssPeak) max() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// sample reads pid's VmHWM and VmRSS every 100 ms until the returned func
// is called.
func (r *rssPeak) sample(pid int) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, err := procs.ReadMemory(pid); err == nil {
				r.mu.Lock()
				r.bytes = max(r.bytes, m.RSS, m.Peak)
				r.mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// telemetryOf scrapes the collector's own metrics on port.
func telemetryOf(t *testing.T, port int) promText {
	t.Helper()
	m, err := scrapePromText(port)
	require.NoError(t, err)
	return m
}
