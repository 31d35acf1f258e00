// Package stack runs the demo and end-to-end stack on loopback: Jaeger
// (built from its Go module), Prometheus (Debian's), otelcol-gpuviz and the
// load generator, each as a child process with its log in a work directory.
// `make demo` and `make e2e` both use it, so what the tests prove is what a
// newcomer runs.
package stack // import "github.com/gpuviz/gpuviz/internal/stack"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Addresses of the stack's services.
const (
	JaegerQuery   = "http://127.0.0.1:16686"
	PrometheusURL = "http://127.0.0.1:19090"
	collectorOTLP = "127.0.0.1:14317"
	exporterAddr  = "127.0.0.1:8889"
)

// Config says where the programs and files are.
type Config struct {
	Root       string // the repository root
	WorkDir    string // logs and Prometheus' storage go here
	Collector  string // otelcol-gpuviz
	Loadgen    string // the load generator
	Jaeger     string // jaeger (v2)
	Prometheus string // prometheus
	// CollectorArgs and LoadgenArgs are extra flags (e.g. --set, --duration).
	CollectorArgs, LoadgenArgs []string
}

// Stack is the running stack.
type Stack struct {
	cfg   Config
	procs []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// Start starts Jaeger, Prometheus, the collector and the load generator,
// each once the previous one answers. On error everything started is
// stopped.
// Scenario is the batching scenario the stack's simulated GPUs serve and
// its load generator follows: examples/e2e/collector.yaml names it too.
const Scenario = "steady"

func Start(ctx context.Context, cfg Config) (*Stack, error) {
	s := &Stack{cfg: cfg}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	steps := []struct {
		name  string
		bin   string
		args  []string
		ready func(context.Context) error
	}{
		{"jaeger", cfg.Jaeger, nil, httpReady(JaegerQuery + "/api/services")},
		{"prometheus", cfg.Prometheus, []string{
			"--config.file=" + filepath.Join(cfg.Root, "examples/prometheus/prometheus.yml"),
			"--storage.tsdb.path=" + filepath.Join(cfg.WorkDir, "prometheus-data"),
			"--web.listen-address=127.0.0.1:19090",
			"--enable-feature=exemplar-storage",
		}, httpReady(PrometheusURL + "/-/ready")},
		{"collector", cfg.Collector, append([]string{"--config", filepath.Join(cfg.Root, "examples/e2e/collector.yaml")}, cfg.CollectorArgs...), tcpReady(collectorOTLP)},
		{"loadgen", cfg.Loadgen, append([]string{
			"--endpoint", collectorOTLP, "--protocol", "grpc", "--mode", "simulated",
			"--sim-model", "h200", "--sim-gpus", "8", "--sim-seed", "1", "--scenario", Scenario,
		}, cfg.LoadgenArgs...), nil},
	}
	for _, st := range steps {
		p, err := s.spawn(st.name, st.bin, st.args)
		if err != nil {
			s.Stop()
			return nil, err
		}
		if st.ready != nil {
			if err := waitReady(ctx, p, st.ready); err != nil {
				s.Stop()
				return nil, fmt.Errorf("%s did not come up (log: %s): %w", st.name, p.log, err)
			}
		}
	}
	return s, nil
}

func (s *Stack) spawn(name, bin string, args []string) (*process, error) {
	logPath := filepath.Join(s.cfg.WorkDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.cfg.WorkDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that stopping it stops whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	return p, nil
}

// Log returns the path of a process's log.
func (s *Stack) Log(name string) string { return filepath.Join(s.cfg.WorkDir, name+".log") }

// Exited reports a process that has stopped by itself, among the named
// ones (all when none is named).
func (s *Stack) Exited(names ...string) error {
	for _, p := range s.procs {
		if len(names) > 0 && !slices.Contains(names, p.name) {
			continue
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); log: %s", p.name, p.err, p.log)
		default:
		}
	}
	return nil
}

// Wait waits for the named process to exit (the load generator with a
// --duration), or the context to end.
func (s *Stack) Wait(ctx context.Context, name string) error {
	for _, p := range s.procs {
		if p.name == name {
			select {
			case <-p.done:
				return p.err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return fmt.Errorf("no process %s", name)
}

// Stop stops every process, newest first: SIGTERM to its group, SIGKILL
// after 10 s.
func (s *Stack) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		select {
		case <-p.done:
			continue
		default:
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

func waitReady(ctx context.Context, p *process, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.err)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func httpReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

func tcpReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}
