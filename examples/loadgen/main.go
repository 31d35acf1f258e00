// Command loadgen sends, over OTLP (gRPC or HTTP), the spans inference
// servers export for their requests — vLLM, SGLang, HuggingFace TGI, Triton,
// TensorRT-LLM, and GenAI client spans — to exercise the gpuviz processor
// without a model server.
//
// In simulated mode (the default) the requests are those the collector's
// simulated GPUs (backend: simulated) serve: with an engine scenario
// (--scenario steady, mixed, ...) those of internal/infersim's batching
// engines on the node, each engine in its own server family; with
// --scenario sequential, those of nvmlsim's one-request-at-a-time schedule
// per GPU, in the families --families names. --sim-model, --sim-gpus and
// --sim-seed must equal the collector's simulated settings, and both must run
// on one host. --truth writes an engine scenario's ground truth.
//
// In synthetic mode requests arrive at random (Poisson, --rate per second)
// and run with random phase lengths, at most --concurrency at once: for
// pointing at a collector that reads real GPUs.
//
// In flood mode requests end at a fixed rate (--rate per second, evenly
// spaced, no concurrency bound), each 0.5 to 3.5 s long: a steady span rate
// for measuring what the collector costs per span
// (scripts/measure-processor.sh).
//
// See README.md in this directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpuviz/gpuviz/internal/cliusage"
	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

const (
	modeSimulated = "simulated"
	modeSynthetic = "synthetic"
	modeFlood     = "flood"

	// scenarioSequential is nvmlsim's schedule: one request at a time per
	// GPU, no engine.
	scenarioSequential = "sequential"

	defaultGRPCEndpoint = "127.0.0.1:4317"
	defaultHTTPEndpoint = "127.0.0.1:4318"
)

// Loop timing: every tick, the requests that ended up to settle ago are
// emitted (a real server exports a request's spans when it finishes; settle
// keeps the few spans that close just after the request, such as Triton's
// InferRequest or the client's span, out of the future).
const (
	tick   = 200 * time.Millisecond
	settle = 50 * time.Millisecond
	// progressEvery is how often a progress line is logged.
	progressEvery = 30 * time.Second
)

type config struct {
	Endpoint    string
	Protocol    string
	Insecure    bool
	Mode        string
	SimModel    string
	SimGPUs     int
	SimSeed     uint64
	Scenario    string
	Truth       string
	Match       string
	Families    []string
	Duration    time.Duration
	Rate        float64
	Concurrency int
	Service     string
	GPUUUID     string
	// MetricsListen is where the simulated servers' /metrics are served
	// ("": not served).
	MetricsListen string

	set map[string]bool // the flags given on the command line
}

// parseFlags reads the command line. Usage and flag errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	var families string
	scenarios := strings.Join(append(infersim.Scenarios(), scenarioSequential), ", ")
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cliusage.Describe(fs, `loadgen sends over OTLP the spans inference servers export for their
requests (vLLM, SGLang, TGI, Triton, TensorRT-LLM, GenAI clients), to
exercise the gpuviz processor without a model server. --mode simulated
sends the requests of the collector's simulated GPUs (--scenario),
synthetic random requests, flood requests ending at a fixed rate. See
examples/loadgen/README.md.

usage: loadgen [flags]`)
	fs.StringVar(&cfg.Endpoint, "endpoint", defaultGRPCEndpoint, "OTLP receiver as host:port (with --protocol http and no --endpoint: "+defaultHTTPEndpoint+")")
	fs.StringVar(&cfg.Protocol, "protocol", "grpc", "OTLP protocol: grpc or http (http posts to /v1/traces)")
	fs.BoolVar(&cfg.Insecure, "insecure", true, "plain-text connection (no TLS)")
	fs.StringVar(&cfg.Mode, "mode", modeSimulated, "simulated (the requests of the collector's simulated GPUs), synthetic (random requests) or flood (requests ending at a fixed rate)")
	fs.StringVar(&cfg.SimModel, "sim-model", "h200", "simulated GPU model: must equal the collector's simulated.model ("+strings.Join(nvmlsim.Models(), ", ")+")")
	fs.IntVar(&cfg.SimGPUs, "sim-gpus", 8, "simulated GPUs: must equal the collector's simulated.gpus")
	fs.Uint64Var(&cfg.SimSeed, "sim-seed", 1, "simulation seed: must equal the collector's simulated.seed")
	fs.StringVar(&cfg.Scenario, "scenario", infersim.DefaultScenario, "simulated mode: the node's workload ("+scenarios+"); an engine scenario decides each engine's server family and GPU hint, sequential is one request at a time per GPU")
	fs.StringVar(&cfg.Truth, "truth", "", "engine scenarios: write the ground truth to this file (JSON lines: header, requests, per-GPU bins)")
	fs.StringVar(&cfg.Match, "match", matchProcess, "--scenario sequential and --mode synthetic: GPU hint on the spans: process (resource process.pid = the simulated worker's), attribute (resource gpu.uuid = the GPU UUID) or host (none)")
	fs.StringVar(&families, "families", infersim.FamilyVLLM, "--scenario sequential and --mode synthetic: comma-separated span families to emit: "+strings.Join(legacyFamilies, ", "))
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to run; 0: until SIGINT or SIGTERM")
	fs.Float64Var(&cfg.Rate, "rate", 5, "synthetic mode: mean arrivals per second (Poisson); flood mode: requests (spans per family) ending per second")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "synthetic mode: most requests in the model at once")
	fs.StringVar(&cfg.Service, "service", "vllm", "--scenario sequential and --mode synthetic: service.name of the vLLM spans (TGI and Triton use their servers' own)")
	fs.StringVar(&cfg.GPUUUID, "gpu-uuid", "", "synthetic mode with --match attribute: the GPU UUID to put on the spans")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "engine scenarios: serve the simulated servers' /metrics (their running-request gauges: vllm:num_requests_running, sglang:num_running_reqs, tgi_batch_current_size, trtllm_num_requests_running) on this host:port, for a prometheus receiver to scrape")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	cfg.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.set[f.Name] = true })
	if !cfg.set["endpoint"] && cfg.Protocol == "http" {
		cfg.Endpoint = defaultHTTPEndpoint
	}
	for f := range strings.SplitSeq(families, ",") {
		if f = strings.ToLower(strings.TrimSpace(f)); f != "" && !slices.Contains(cfg.Families, f) {
			cfg.Families = append(cfg.Families, f)
		}
	}
	return cfg, cfg.validate()
}

func (c *config) validate() error {
	c.Endpoint = strings.TrimSuffix(c.Endpoint, "/")
	for _, scheme := range []string{"http://", "https://", "grpc://"} {
		c.Endpoint = strings.TrimPrefix(c.Endpoint, scheme)
	}
	switch {
	case c.Endpoint == "" || strings.Contains(c.Endpoint, "/"):
		return fmt.Errorf("--endpoint %q: want host:port", c.Endpoint)
	case c.Protocol != "grpc" && c.Protocol != "http":
		return fmt.Errorf("--protocol %q: want grpc or http", c.Protocol)
	case c.Mode != modeSimulated && c.Mode != modeSynthetic && c.Mode != modeFlood:
		return fmt.Errorf("--mode %q: want simulated, synthetic or flood", c.Mode)
	case c.Duration < 0:
		return fmt.Errorf("--duration %v: must not be negative", c.Duration)
	}
	if c.Mode == modeSynthetic || c.Mode == modeFlood {
		for _, f := range []string{"scenario", "truth", "metrics-listen"} {
			if c.set[f] {
				return fmt.Errorf("--%s applies to --mode simulated only", f)
			}
		}
		if c.Mode == modeFlood && c.set["concurrency"] {
			return errors.New("--concurrency applies to --mode synthetic only: flood mode has no bound on requests at once")
		}
		if err := c.validateLegacy(); err != nil {
			return err
		}
		switch {
		case !(c.Rate > 0) || c.Rate > 1e6:
			return fmt.Errorf("--rate %v: want a positive number of requests per second", c.Rate)
		case c.Concurrency < 1:
			return fmt.Errorf("--concurrency %d: want at least 1", c.Concurrency)
		case c.Match == matchAttribute && c.GPUUUID == "":
			return fmt.Errorf("--match attribute in %s mode needs --gpu-uuid (the GPU the requests ran on)", c.Mode)
		case c.Match != matchAttribute && c.set["gpu-uuid"]:
			return fmt.Errorf("--gpu-uuid applies to --match attribute only: with --match %s the spans carry no GPU UUID", c.Match)
		}
		return nil
	}
	for _, f := range []struct{ name, modes string }{{"rate", "synthetic and flood"}, {"concurrency", "synthetic"}, {"gpu-uuid", "synthetic and flood"}} {
		if c.set[f.name] {
			return fmt.Errorf("--%s applies to --mode %s: the simulation decides when requests come and on which GPUs", f.name, f.modes)
		}
	}
	model, err := nvmlsim.LookupModel(c.SimModel)
	if err != nil {
		return fmt.Errorf("--sim-model: %w", err)
	}
	if c.SimGPUs < 1 || c.SimGPUs > nvmlsim.MaxGPUs {
		return fmt.Errorf("--sim-gpus %d: want 1 to %d", c.SimGPUs, nvmlsim.MaxGPUs)
	}
	c.Scenario = strings.ToLower(c.Scenario)
	if c.Scenario == scenarioSequential {
		if c.set["truth"] {
			return errors.New("--truth needs an engine scenario: the sequential schedule has no engines to take the truth of")
		}
		if c.set["metrics-listen"] {
			return errors.New("--metrics-listen needs an engine scenario: the sequential schedule has no engines to count requests")
		}
		return c.validateLegacy()
	}
	if _, err := nvmlsim.NewNode(model.Name, c.Scenario, c.SimGPUs, c.SimSeed); err != nil {
		return fmt.Errorf("--scenario: %w", err)
	}
	for _, f := range []string{"families", "match", "service"} {
		if c.set[f] {
			return fmt.Errorf("--%s applies to --scenario sequential and --mode synthetic: the engines of scenario %s choose their own server family, GPU hint and service name", f, c.Scenario)
		}
	}
	return nil
}

// validateLegacy checks the flags of the sequential scenario and synthetic
// mode.
func (c *config) validateLegacy() error {
	switch {
	case c.Match != matchProcess && c.Match != matchAttribute && c.Match != matchHost:
		return fmt.Errorf("--match %q: want process, attribute or host", c.Match)
	case len(c.Families) == 0:
		return errors.New("--families: name at least one of " + strings.Join(legacyFamilies, ", "))
	case c.Service == "":
		return errors.New("--service must not be empty")
	}
	for _, f := range c.Families {
		if !slices.Contains(legacyFamilies, f) {
			return fmt.Errorf("--families: unknown family %q: use %s", f, strings.Join(legacyFamilies, ", "))
		}
	}
	return nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(os.Stderr, "loadgen: ", log.LstdFlags)
	if err := run(ctx, cfg, os.Stdout, logger); err != nil {
		logger.Print(err)
		os.Exit(1)
	}
}

// run emits spans until ctx ends or --duration passes, then emits what
// finished since the last tick, closes and prints the per-family counts to
// stdout.
func run(ctx context.Context, cfg config, stdout io.Writer, logger *log.Logger) error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("host name: %w", err)
	}
	exp, err := newExporter(cfg, &errorLogger{logger: logger, every: 10 * time.Second, now: time.Now})
	if err != nil {
		return err
	}
	start := time.Now().UnixNano() - int64(settle)
	g, err := newGenerator(cfg, start, exp, host, logger, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x10adc0de)))
	if err != nil {
		return errors.Join(err, exp.close())
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	logger.Printf("mode %s, families %s: sending %s as host %q", cfg.Mode, strings.Join(g.families, ","), exp.describe, host)
	if cfg.Mode == modeSimulated {
		logger.Printf("following %d simulated %s GPUs, seed %d, scenario %s: the collector's gpuviz receiver needs simulated: {model: %s, gpus: %d, seed: %d}", cfg.SimGPUs, cfg.SimModel, cfg.SimSeed, cfg.Scenario, cfg.SimModel, cfg.SimGPUs, cfg.SimSeed)
	}
	if cfg.MetricsListen != "" {
		stopServing, err := serveRunning(cfg.MetricsListen, g.node, logger)
		if err != nil {
			return errors.Join(err, exp.close())
		}
		defer stopServing()
	}
	t := time.NewTicker(tick)
	err = g.loop(ctx, t.C)
	t.Stop()
	if err == nil {
		err = g.tick(ctx, time.Now().UnixNano()-int64(settle))
	}
	err = errors.Join(err, g.close())
	logger.Print(exp.summary())
	if s := g.synthetic; s != nil && s.dropped > 0 {
		logger.Printf("%d arrivals turned away: more than %d requests were waiting (raise --concurrency or lower --rate)", s.dropped, s.maxWaiting)
	}
	fmt.Fprintln(stdout, g.summary())
	return err
}
