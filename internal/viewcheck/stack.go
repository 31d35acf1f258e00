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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuviz/gpuviz/internal/procs"
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
	procs *procs.Group
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
	g, err := procs.NewGroup(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	// The processes run in WorkDir: relative paths are the caller's.
	for _, p := range []*string{&cfg.Collector, &cfg.Loadgen} {
		if abs, err := filepath.Abs(*p); err == nil && strings.ContainsRune(*p, os.PathSeparator) {
			*p = abs
		}
	}
	ports, err := procs.FreePorts(2)
	if err != nil {
		return nil, err
	}
	otlp, view := ports[0], ports[1]
	conf := filepath.Join(cfg.WorkDir, "collector.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, collectorConfig, cfg.GPUs, cfg.Scenario, otlp, view, cfg.TraceURLTemplate), 0o644); err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, URL: fmt.Sprintf("http://127.0.0.1:%d/", view), procs: g}
	c, err := g.Spawn("collector", cfg.Collector, "--config", conf)
	if err != nil {
		return nil, err
	}
	if err := procs.WaitReady(ctx, c, s.sourcesReady); err != nil {
		s.Stop()
		return nil, fmt.Errorf("the collector's view did not come up (log: %s): %w", c.Log, err)
	}
	args := []string{"--endpoint", fmt.Sprintf("127.0.0.1:%d", otlp), "--protocol", "grpc", "--mode", "simulated",
		"--sim-model", "h200", "--sim-gpus", fmt.Sprint(cfg.GPUs), "--sim-seed", "1", "--scenario", cfg.Scenario}
	if cfg.Duration > 0 {
		args = append(args, "--duration", cfg.Duration.String())
	}
	if _, err := g.Spawn("loadgen", cfg.Loadgen, args...); err != nil {
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

// sourcesReady is ready once the view lists a source.
func (s *Stack) sourcesReady(ctx context.Context) error {
	src, err := GetSources(ctx, s.URL)
	if err == nil && len(src.Sources) == 0 {
		err = errors.New("no source registered yet")
	}
	return err
}

// Exited reports a process that stopped by itself (the load generator
// ending its --duration is expected).
func (s *Stack) Exited() error {
	return s.procs.Exited(func(p *procs.Proc) bool {
		return !(p.Name == "loadgen" && s.cfg.Duration > 0 && exitedCleanly(p))
	})
}

func exitedCleanly(p *procs.Proc) bool {
	done, err := p.Exited()
	return done && err == nil
}

// Log returns the path of a process's log ("collector", "loadgen").
func (s *Stack) Log(name string) string { return s.procs.Log(name) }

// Stop stops the load generator, then the collector.
func (s *Stack) Stop() { s.procs.Stop() }
