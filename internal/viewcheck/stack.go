// Package viewcheck drives the gpuviz_view page in a real browser: it runs
// the built collector on simulated GPUs with the view enabled and the load
// generator feeding it, opens the page in headless Chromium (Debian's
// package, through the DevTools protocol with chromedp), reads what the page
// drew from its DOM hooks, clicks a request and takes screenshots. The e2e
// browser test (e2e/view_test.go) and `make screenshots`
// (cmd/gpuviz-screenshots) share it, so the pictures in the README are of
// the page the test checks.
package viewcheck // import "github.com/gpuviz/gpuviz/internal/viewcheck"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// StackConfig says what to run.
type StackConfig struct {
	WorkDir   string // the collector's config and every process's log go here
	Collector string // otelcol-gpuviz
	Loadgen   string // examples/loadgen, built
	// Scenario is the simulated node's batching scenario (default steady);
	// the collector and the load generator both follow it.
	Scenario string
	GPUs     int           // simulated GPUs (default 8)
	Duration time.Duration // how long the load generator runs (0: until Stop)
	// TraceURLTemplate is the view's trace_url_template.
	TraceURLTemplate string
}

// Stack is a running collector and load generator.
type Stack struct {
	cfg   StackConfig
	URL   string // the view, e.g. http://127.0.0.1:41234/
	procs []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

const collectorConfig = `# Written by internal/viewcheck: simulated GPUs, OTLP in, the gpuviz
# processor in both pipelines and the gpuviz_view extension on loopback.
receivers:
  gpuviz:
    collection_interval: 1s
    backend: simulated
    simulated:
      model: h200
      gpus: %[1]d
      seed: 1
      scenario: %[2]s
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[3]d
processors:
  gpuviz:
    max_wait: 10s
  batch:
    timeout: 1s
exporters:
  debug:
    verbosity: basic
extensions:
  gpuviz_view:
    endpoint: 127.0.0.1:%[4]d
    trace_url_template: %[5]q
service:
  extensions: [gpuviz_view]
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [gpuviz]
      processors: [gpuviz, batch]
      exporters: [debug]
    traces:
      receivers: [otlp]
      processors: [gpuviz, batch]
      exporters: [debug]
`

// StartStack starts the collector on free loopback ports, waits until its
// view lists a source, then starts the load generator.
func StartStack(ctx context.Context, cfg StackConfig) (*Stack, error) {
	if cfg.Scenario == "" {
		cfg.Scenario = "steady"
	}
	if cfg.GPUs == 0 {
		cfg.GPUs = 8
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	// The processes run in WorkDir: relative paths are the caller's.
	for _, p := range []*string{&cfg.Collector, &cfg.Loadgen} {
		if abs, err := filepath.Abs(*p); err == nil && strings.ContainsRune(*p, os.PathSeparator) {
			*p = abs
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	otlp, view := ports[0], ports[1]
	conf := filepath.Join(cfg.WorkDir, "collector.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, collectorConfig, cfg.GPUs, cfg.Scenario, otlp, view, cfg.TraceURLTemplate), 0o644); err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, URL: fmt.Sprintf("http://127.0.0.1:%d/", view)}
	c, err := s.spawn("collector", cfg.Collector, "--config", conf)
	if err != nil {
		return nil, err
	}
	if err := s.waitSources(ctx, c); err != nil {
		s.Stop()
		return nil, fmt.Errorf("the collector's view did not come up (log: %s): %w", c.log, err)
	}
	args := []string{"--endpoint", fmt.Sprintf("127.0.0.1:%d", otlp), "--protocol", "grpc", "--mode", "simulated",
		"--sim-model", "h200", "--sim-gpus", fmt.Sprint(cfg.GPUs), "--sim-seed", "1", "--scenario", cfg.Scenario}
	if cfg.Duration > 0 {
		args = append(args, "--duration", cfg.Duration.String())
	}
	if _, err := s.spawn("loadgen", cfg.Loadgen, args...); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Sources is /api/v1/sources.
type Sources struct {
	Sources []struct {
		ID        string `json:"id"`
		Simulated bool   `json:"simulated"`
		GPUs      int    `json:"gpus"`
	} `json:"sources"`
	TraceURLTemplate string `json:"trace_url_template"`
}

// GetSources reads the view's sources.
func GetSources(ctx context.Context, base string) (Sources, error) {
	var s Sources
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"api/v1/sources", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("/api/v1/sources: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func (s *Stack) waitSources(ctx context.Context, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for {
		src, err := GetSources(ctx, s.URL)
		if err == nil && len(src.Sources) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("no source registered yet")
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.err)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *Stack) spawn(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(s.cfg.WorkDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.cfg.WorkDir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	return p, nil
}

// Exited reports a process that stopped by itself.
func (s *Stack) Exited() error {
	for _, p := range s.procs {
		select {
		case <-p.done:
			if p.name == "loadgen" && p.err == nil && s.cfg.Duration > 0 {
				continue // it ran its --duration
			}
			return fmt.Errorf("%s exited (%v); log: %s", p.name, p.err, p.log)
		default:
		}
	}
	return nil
}

// Log returns the path of a process's log ("collector", "loadgen").
func (s *Stack) Log(name string) string { return filepath.Join(s.cfg.WorkDir, name+".log") }

// Stop stops the load generator, then the collector: SIGTERM to the
// process group, SIGKILL after 10 s.
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

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
