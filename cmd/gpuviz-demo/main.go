// Command gpuviz-demo runs the demo stack on loopback — Jaeger, Prometheus,
// otelcol-gpuviz on simulated GPUs (even where real ones are present) and the load
// generator — prints where to look, and stops everything on Ctrl-C.
// `make demo` builds what it needs and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/gpuviz/gpuviz/internal/cliusage"
	"github.com/gpuviz/gpuviz/internal/stack"
)

// viewURL is the live view, as examples/e2e/collector.yaml configures
// gpuviz_view.
const viewURL = "http://127.0.0.1:8787"

func main() {
	var cfg stack.Config
	cliusage.Describe(flag.CommandLine, `gpuviz-demo runs the demo stack on loopback (Jaeger, Prometheus,
otelcol-gpuviz on simulated GPUs, even where real ones are present, and the load
generator), prints where to look, and stops everything on Ctrl-C. make demo
builds what it needs and runs it.

usage: gpuviz-demo --jaeger BIN [flags]`)
	flag.StringVar(&cfg.Root, "root", ".", "the repository root")
	flag.StringVar(&cfg.Collector, "collector", "_build/otelcol-gpuviz", "otelcol-gpuviz binary")
	flag.StringVar(&cfg.Loadgen, "loadgen", "_build/loadgen", "load generator binary")
	flag.StringVar(&cfg.Jaeger, "jaeger", "", "jaeger binary (scripts/jaeger.sh prints it)")
	flag.StringVar(&cfg.Prometheus, "prometheus", "prometheus", "prometheus binary")
	flag.StringVar(&cfg.WorkDir, "workdir", "_build/demo", "logs and Prometheus data")
	flag.Parse()
	switch {
	case flag.NArg() > 0:
		usageError("unexpected argument %q (flags only)", flag.Arg(0))
	case cfg.Jaeger == "":
		// make demo passes "$(scripts/jaeger.sh)", empty when the script failed.
		usageError("--jaeger: a Jaeger v2 binary is required (scripts/jaeger.sh builds one and prints its path)")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		log.Fatal(err)
	}
	cfg.Root = root
	for _, p := range []*string{&cfg.Collector, &cfg.Loadgen, &cfg.WorkDir} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
	// SIGHUP too: a closed terminal signals the demo alone, each process
	// of the stack being in a process group of its own.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	s, err := stack.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf(`gpuviz demo running (logs in %s). Ctrl-C stops everything.

  The live view of the simulated GPUs and requests:
    %s/
  GPU graphs in Prometheus' own UI:
    %s/graph?g0.expr=rate(gpuviz_gpu_bottleneck_time_seconds_total[1m])&g0.tab=0
  The exemplars linking them to traces (Debian's Prometheus UI does not draw them; Grafana does):
    curl -s "%s/api/v1/query_exemplars?query=gpuviz_request_energy_joules_bucket&start=$(($(date +%%s)-600))&end=$(date +%%s)"
  Enriched inference traces, through Jaeger's API (a Jaeger built from its Go module serves no full UI):
    curl -s '%s/api/traces?service=vllm&limit=5' | python3 -m json.tool | grep -E '"(operationName|key)"|gpuviz'
  A trace from an exemplar: curl -s %s/api/traces/<trace_id>
  For the Grafana and Jaeger UIs, use examples/docker-compose.
`, cfg.WorkDir, viewURL, stack.PrometheusURL, stack.PrometheusURL, stack.JaegerQuery, stack.JaegerQuery)
	select {
	case <-ctx.Done():
		s.Stop()
	case <-exited(s):
		// A process stopping leaves the demo showing nothing: stop the
		// rest and say it failed.
		err := s.Exited()
		s.Stop()
		log.Fatalf("stopping: %v", err)
	}
}

// exited closes when a process of the stack stops by itself: any of them,
// since the view, the traces and the graphs each need all four.
func exited(s *stack.Stack) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	for _, name := range []string{"jaeger", "prometheus", "collector", "loadgen"} {
		go func() {
			_ = s.Wait(context.Background(), name)
			once.Do(func() { close(ch) })
		}()
	}
	return ch
}

// usageError says what is wrong with the command line and exits 2.
func usageError(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gpuviz-demo: "+format+"\n", args...)
	os.Exit(2)
}
