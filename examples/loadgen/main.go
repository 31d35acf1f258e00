// Command loadgen emits inference request spans shaped exactly like those of
// real inference servers — vLLM V1's llm_request, HuggingFace TGI's
// chat_completions handler, Triton's model and compute spans — over OTLP
// (gRPC or HTTP), to exercise the gpuviz processor without a model server.
//
// In simulated mode (the default) the requests are those of the simulated
// GPUs the collector's gpuviz receiver reads with backend: simulated: GPU i
// follows nvmlsim.NewSchedule(model, seed, i), a pure function of wall-clock
// time, and every request's prefill and decode coincide with that GPU's
// prefill and decode segments. --sim-model, --sim-gpus and --sim-seed must
// equal the collector's simulated settings, and both must run on one host.
//
// In synthetic mode requests arrive at random (Poisson, --rate per second)
// and run with random phase lengths, at most --concurrency at once: for
// pointing at a collector that reads real GPUs.
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
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

const (
	modeSimulated = "simulated"
	modeSynthetic = "synthetic"

	defaultGRPCEndpoint = "127.0.0.1:4317"
	defaultHTTPEndpoint = "127.0.0.1:4318"
)

// Loop timing: every tick, the requests that ended up to settle ago are
// emitted (a real server exports a request's span when it finishes; settle
// keeps the few spans that close just after the request, such as Triton's
// InferRequest, out of the future).
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
	Match       string
	Families    []string
	Duration    time.Duration
	Rate        float64
	Concurrency int
	Service     string
	GPUUUID     string
}

// parseFlags reads the command line. Usage and flag errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	var families string
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Endpoint, "endpoint", defaultGRPCEndpoint, "OTLP receiver as host:port (with --protocol http and no --endpoint: "+defaultHTTPEndpoint+")")
	fs.StringVar(&cfg.Protocol, "protocol", "grpc", "OTLP protocol: grpc or http (http posts to /v1/traces)")
	fs.BoolVar(&cfg.Insecure, "insecure", true, "plain-text connection (no TLS)")
	fs.StringVar(&cfg.Mode, "mode", modeSimulated, "simulated (the requests of the collector's simulated GPUs) or synthetic (random requests)")
	fs.StringVar(&cfg.SimModel, "sim-model", "h200", "simulated GPU model: must equal the collector's simulated.model ("+strings.Join(nvmlsim.Models(), ", ")+")")
	fs.IntVar(&cfg.SimGPUs, "sim-gpus", 8, "simulated GPUs: must equal the collector's simulated.gpus")
	fs.Uint64Var(&cfg.SimSeed, "sim-seed", 1, "simulation seed: must equal the collector's simulated.seed")
	fs.StringVar(&cfg.Match, "match", matchProcess, "GPU hint on the spans: process (resource process.pid = the simulated worker's), attribute (span attribute hw.id = the GPU UUID) or host (none)")
	fs.StringVar(&families, "families", familyVLLM, "comma-separated span families to emit: vllm, tgi, triton")
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to run; 0: until SIGINT or SIGTERM")
	fs.Float64Var(&cfg.Rate, "rate", 5, "synthetic mode: mean arrivals per second (Poisson)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "synthetic mode: most requests in the model at once")
	fs.StringVar(&cfg.Service, "service", "vllm", "service.name of the vLLM spans (TGI and Triton use their servers' own)")
	fs.StringVar(&cfg.GPUUUID, "gpu-uuid", "", "synthetic mode with --match attribute: the hw.id (GPU UUID) to put on the spans")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	endpointSet := false
	fs.Visit(func(f *flag.Flag) { endpointSet = endpointSet || f.Name == "endpoint" })
	if !endpointSet && cfg.Protocol == "http" {
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
	case c.Mode != modeSimulated && c.Mode != modeSynthetic:
		return fmt.Errorf("--mode %q: want simulated or synthetic", c.Mode)
	case c.Match != matchProcess && c.Match != matchAttribute && c.Match != matchHost:
		return fmt.Errorf("--match %q: want process, attribute or host", c.Match)
	case len(c.Families) == 0:
		return errors.New("--families: name at least one of vllm, tgi, triton")
	case c.Duration < 0:
		return fmt.Errorf("--duration %v: must not be negative", c.Duration)
	case c.Service == "":
		return errors.New("--service must not be empty")
	}
	for _, f := range c.Families {
		if !slices.Contains(allFamilies, f) {
			return fmt.Errorf("--families: unknown family %q: use vllm, tgi, triton", f)
		}
	}
	if c.Mode == modeSimulated {
		if _, err := nvmlsim.LookupModel(c.SimModel); err != nil {
			return fmt.Errorf("--sim-model: %w", err)
		}
		if c.SimGPUs < 1 || c.SimGPUs > nvmlsim.MaxGPUs {
			return fmt.Errorf("--sim-gpus %d: want 1 to %d", c.SimGPUs, nvmlsim.MaxGPUs)
		}
		return nil
	}
	switch {
	case !(c.Rate > 0) || c.Rate > 1e6:
		return fmt.Errorf("--rate %v: want a positive number of requests per second", c.Rate)
	case c.Concurrency < 1:
		return fmt.Errorf("--concurrency %d: want at least 1", c.Concurrency)
	case c.Match == matchAttribute && c.GPUUUID == "":
		return errors.New("--match attribute in synthetic mode needs --gpu-uuid (the GPU the requests ran on)")
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

// run emits spans until ctx ends or --duration passes, then flushes, shuts
// down and prints the per-family counts to stdout.
func run(ctx context.Context, cfg config, stdout io.Writer, logger *log.Logger) error {
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return err
	}
	otel.SetErrorHandler(&errorLogger{logger: logger, every: 10 * time.Second})
	shared := sharedExporter{exp}
	newProvider := func(res *resource.Resource) *sdktrace.TracerProvider {
		return sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithBatcher(shared, sdktrace.WithBatchTimeout(time.Second)),
		)
	}
	start := time.Now().UnixNano() - int64(settle)
	em, src, err := setup(cfg, start, newProvider, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x10adc0de)))
	if err != nil {
		return err
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	logger.Printf("mode %s, families %s, match %s: sending OTLP/%s to %s as host %q", cfg.Mode, strings.Join(cfg.Families, ","), cfg.Match, cfg.Protocol, cfg.Endpoint, em.host)
	if cfg.Mode == modeSimulated {
		logger.Printf("following %d simulated %s GPUs, seed %d: the collector's gpuviz receiver needs simulated: {model: %s, gpus: %d, seed: %d}", cfg.SimGPUs, cfg.SimModel, cfg.SimSeed, cfg.SimModel, cfg.SimGPUs, cfg.SimSeed)
	}
	loop(ctx, src, em, start, time.Now, logger)

	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := []error{em.shutdown(flushCtx), exp.Shutdown(flushCtx)}
	if d, ok := src.(*syntheticSource); ok && d.dropped > 0 {
		logger.Printf("%d arrivals turned away: more than %d requests were waiting (raise --concurrency or lower --rate)", d.dropped, d.maxWaiting)
	}
	fmt.Fprintln(stdout, em.summary())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("flushing spans: %w", err)
	}
	return nil
}

// setup builds the emitter and the request source of cfg, starting at start
// (Unix ns).
func setup(cfg config, start int64, newProvider func(*resource.Resource) *sdktrace.TracerProvider, rng *rand.Rand) (*emitter, source, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, nil, fmt.Errorf("host name: %w", err)
	}
	em := &emitter{
		families:    cfg.Families,
		match:       cfg.Match,
		service:     cfg.Service,
		host:        host,
		ownPID:      os.Getpid(),
		newProvider: newProvider,
	}
	if cfg.Mode == modeSynthetic {
		uuid := cfg.GPUUUID
		em.gpuID = func(nvmlsim.Request) string { return uuid }
		return em, newSyntheticSource(start, cfg.Rate, cfg.Concurrency, defaultShape, rng), nil
	}
	model, err := nvmlsim.LookupModel(cfg.SimModel)
	if err != nil {
		return nil, nil, err
	}
	em.gpuID = func(r nvmlsim.Request) string { return nvmlsim.SimulatedUUID(model.Name, cfg.SimSeed, r.GPU) }
	return em, newSimulatedSource(model, cfg.SimSeed, cfg.SimGPUs), nil
}

// loop emits, every tick until ctx ends, the requests that ended since the
// last tick (up to settle ago), with the schedule's own timestamps.
func loop(ctx context.Context, src source, em *emitter, last int64, now func() time.Time, logger *log.Logger) {
	t := time.NewTicker(tick)
	defer t.Stop()
	nextProgress := now().Add(progressEvery)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		to := now().UnixNano() - int64(settle)
		if to <= last {
			continue
		}
		for _, r := range src.Requests(last, to) {
			em.emit(context.Background(), r)
		}
		last = to
		if n := now(); n.After(nextProgress) {
			logger.Print(em.summary())
			nextProgress = n.Add(progressEvery)
		}
	}
}

func newExporter(ctx context.Context, cfg config) (sdktrace.SpanExporter, error) {
	if cfg.Protocol == "http" {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(cfg.Endpoint), otlptracehttp.WithURLPath("/v1/traces")}
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint)}
	if cfg.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}

// sharedExporter lets every TracerProvider export through one exporter (one
// connection): a provider's shutdown leaves it open; run shuts it down last.
type sharedExporter struct{ sdktrace.SpanExporter }

func (sharedExporter) Shutdown(context.Context) error { return nil }

// errorLogger logs the SDK's errors (failed exports), at most one every
// `every`, counting the rest.
type errorLogger struct {
	logger     *log.Logger
	every      time.Duration
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (h *errorLogger) Handle(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < h.every {
		h.suppressed++
		return
	}
	if h.suppressed > 0 {
		h.logger.Printf("%v (and %d more errors in the last %v)", err, h.suppressed, now.Sub(h.last).Round(time.Second))
	} else {
		h.logger.Print(err)
	}
	h.last, h.suppressed = now, 0
}
