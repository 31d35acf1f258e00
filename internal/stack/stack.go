// Package stack runs the demo and end-to-end stack on loopback: Jaeger
// (built from its Go module), Prometheus (Debian's), otelcol-gpuviz and the
// load generator, each as a child process with its log in a work directory.
// `make demo` and `make e2e` both use it, so what the tests prove is what a
// newcomer runs.
package stack // import "github.com/gpuviz/gpuviz/internal/stack"

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuviz/gpuviz/internal/procs"
)

// Addresses of the stack's services.
const (
	JaegerQuery   = "http://127.0.0.1:16686"
	PrometheusURL = "http://127.0.0.1:19090"
	collectorOTLP = "127.0.0.1:14317"
	// ServersMetrics is where the load generator serves the simulated
	// servers' /metrics; examples/e2e/collector.yaml scrapes it.
	ServersMetrics = "127.0.0.1:18000"
)

// Ports are the loopback TCP ports the stack's processes listen on, and
// whose. Jaeger's are those of its built-in configuration
// (cmd/jaeger/internal/all-in-one.yaml of the version scripts/jaeger.sh
// builds).
var Ports = []struct {
	Port int
	What string
}{
	{4317, "jaeger's OTLP/gRPC"}, {4318, "jaeger's OTLP/HTTP"},
	{16686, "jaeger's query API"}, {16685, "jaeger's query gRPC"},
	{8888, "jaeger's own metrics"}, {13133, "jaeger's health check"},
	{5778, "jaeger's sampling HTTP"}, {5779, "jaeger's sampling gRPC"},
	{14250, "jaeger's gRPC receiver"}, {14268, "jaeger's Thrift HTTP receiver"},
	{9411, "jaeger's Zipkin receiver"}, {27777, "jaeger's expvar"}, {27778, "jaeger's zpages"},
	{19090, "prometheus"},
	{14317, "the collector's OTLP/gRPC"}, {14318, "the collector's OTLP/HTTP"},
	{8889, "the collector's Prometheus exporter"}, {8787, "the collector's live view"},
	{18000, "the load generator's servers' /metrics"},
}

// portsInUse names the ports of Ports that something already listens on.
// A leftover of another run (a demo killed, a make e2e) would otherwise
// answer for the process that fails to bind, or leave it to die with the
// reason in its log only.
func portsInUse() error {
	var taken []string
	for _, p := range Ports {
		addr := fmt.Sprintf("127.0.0.1:%d", p.Port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			taken = append(taken, fmt.Sprintf("%s (%s)", addr, p.What))
			continue
		}
		l.Close()
	}
	if len(taken) == 0 {
		return nil
	}
	return fmt.Errorf("the stack's ports are in use already (another demo or make e2e still running? ss -ltnp names what listens): %s",
		strings.Join(taken, ", "))
}

// Config says where the programs and files are.
type Config struct {
	Root       string // the repository root
	WorkDir    string // logs and Prometheus' storage (emptied at Start) go here
	Collector  string // otelcol-gpuviz
	Loadgen    string // the load generator
	Jaeger     string // jaeger (v2)
	Prometheus string // prometheus
	// CollectorArgs and LoadgenArgs are extra flags (e.g. --set, --duration).
	CollectorArgs, LoadgenArgs []string
}

// Stack is the running stack.
type Stack struct {
	procs *procs.Group
}

// Scenario is the batching scenario the stack's simulated GPUs serve and
// its load generator follows: examples/e2e/collector.yaml names it too.
const Scenario = "steady"

// Start starts Jaeger, Prometheus, the collector and the load generator,
// each once the previous one answers. On error everything started is
// stopped.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if err := portsInUse(); err != nil {
		return nil, err
	}
	// Prometheus replays the exemplars in its storage's WAL at start,
	// while Jaeger keeps traces in memory: a last run's exemplars would
	// name traces this Jaeger never held. (After portsInUse: no
	// Prometheus of the stack still uses it.)
	promData := filepath.Join(cfg.WorkDir, "prometheus-data")
	if err := os.RemoveAll(promData); err != nil {
		return nil, fmt.Errorf("emptying the last run's Prometheus storage: %w", err)
	}
	g, err := procs.NewGroup(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	s := &Stack{procs: g}
	steps := []struct {
		name  string
		bin   string
		args  []string
		ready func(context.Context) error
	}{
		{"jaeger", cfg.Jaeger, nil, procs.HTTPReady(JaegerQuery + "/api/services")},
		{"prometheus", cfg.Prometheus, []string{
			"--config.file=" + filepath.Join(cfg.Root, "examples/prometheus/prometheus.yml"),
			"--storage.tsdb.path=" + promData,
			"--web.listen-address=127.0.0.1:19090",
			"--enable-feature=exemplar-storage",
		}, procs.HTTPReady(PrometheusURL + "/-/ready")},
		{"collector", cfg.Collector, append([]string{"--config", filepath.Join(cfg.Root, "examples/e2e/collector.yaml")}, cfg.CollectorArgs...), procs.TCPReady(collectorOTLP)},
		{"loadgen", cfg.Loadgen, append([]string{
			"--endpoint", collectorOTLP, "--protocol", "grpc", "--mode", "simulated",
			"--sim-model", "h200", "--sim-gpus", "8", "--sim-seed", "1", "--scenario", Scenario,
			"--metrics-listen", ServersMetrics,
		}, cfg.LoadgenArgs...), nil},
	}
	for _, st := range steps {
		p, err := g.Spawn(st.name, st.bin, st.args...)
		if err != nil {
			s.Stop()
			return nil, err
		}
		if st.ready != nil {
			if err := procs.WaitReady(ctx, p, st.ready); err != nil {
				s.Stop()
				return nil, fmt.Errorf("%s did not come up (log: %s): %w", st.name, p.Log, err)
			}
		}
	}
	return s, nil
}

// Log returns the path of a process's log.
func (s *Stack) Log(name string) string { return s.procs.Log(name) }

// Exited reports a process that has stopped by itself, among the named
// ones (all when none is named).
func (s *Stack) Exited(names ...string) error {
	return s.procs.Exited(func(p *procs.Proc) bool { return len(names) == 0 || slices.Contains(names, p.Name) })
}

// Wait waits for the named process to exit (the load generator with a
// --duration), or the context to end.
func (s *Stack) Wait(ctx context.Context, name string) error { return s.procs.Wait(ctx, name) }

// Stop stops every process, newest first.
func (s *Stack) Stop() { s.procs.Stop() }
