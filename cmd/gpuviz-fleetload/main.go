// Command gpuviz-fleetload offers a gateway the GPU metrics of a fleet: it
// runs the gpuviz receiver in-process on one simulated server and sends
// every batch it emits once per simulated host, with that host's name, over
// OTLP/gRPC — what N node agents routing to one gateway replica send it —
// and, with --spans-per-host, each host's vLLM llm_request spans
// (internal/otlpsend) — so that a gateway's memory and CPU per host can be
// measured without N processes (scripts/measure-gateway.sh).
//
//	gpuviz-fleetload --hosts 128 --endpoint 127.0.0.1:4317 --duration 2m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gpuviz/gpuviz/internal/cliusage"
	"github.com/gpuviz/gpuviz/internal/otlpsend"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"
)

type options struct {
	endpoint string
	hosts    int
	gpus     int
	interval time.Duration
	duration time.Duration
	prefix   string
	spans    float64 // per host per second
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("gpuviz-fleetload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cliusage.Describe(fs, `gpuviz-fleetload offers a gateway the GPU metrics of a fleet over OTLP/gRPC:
the gpuviz receiver runs in-process on one simulated server and each batch
goes out once per simulated host, under that host's name; with
--spans-per-host, each host's vLLM spans too. A gateway's cost per host,
without N agents (scripts/measure-gateway.sh).

usage: gpuviz-fleetload [flags]`)
	fs.StringVar(&o.endpoint, "endpoint", "127.0.0.1:4317", "the gateway's OTLP/gRPC receiver, host:port (plaintext)")
	fs.IntVar(&o.hosts, "hosts", 128, "simulated hosts")
	fs.IntVar(&o.gpus, "gpus", 8, "GPUs per host (simulated H200)")
	fs.DurationVar(&o.interval, "interval", 10*time.Second, "the receiver's collection_interval (the agents')")
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long to send")
	fs.StringVar(&o.prefix, "prefix", "gpu-node-", "host names are the prefix and a number")
	fs.Float64Var(&o.spans, "spans-per-host", 0, "vLLM spans per second per host, with no GPU hint (matched to all of the host's GPUs)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.hosts < 1 || o.gpus < 1 || o.interval <= 0 || o.duration <= 0:
		return o, errors.New("--hosts, --gpus, --interval and --duration must be positive")
	case !(o.spans >= 0 && o.spans*float64(o.hosts) <= otlpsend.MaxRate): // NaN too
		return o, fmt.Errorf("--spans-per-host %g: want a number of spans per second from 0 to %g over all --hosts", o.spans, otlpsend.MaxRate)
	}
	if _, err := receiverConfig(o); err != nil {
		return o, fmt.Errorf("--interval %s, --gpus %d: the receiver's config: %w", o.interval, o.gpus, err)
	}
	return o, nil
}

// receiverConfig is the agents' gpuviz receiver config, validated as the
// collector would.
func receiverConfig(o options) (*gpuvizreceiver.Config, error) {
	cfg := gpuvizreceiver.NewFactory().CreateDefaultConfig().(*gpuvizreceiver.Config)
	conf := confmap.NewFromStringMap(map[string]any{
		"collection_interval": o.interval.String(),
		"backend":             "simulated",
		"simulated":           map[string]any{"model": "h200", "gpus": o.gpus, "seed": 1},
	})
	if err := conf.Unmarshal(cfg); err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

// fanout sends each batch once per host, renamed.
type fanout struct {
	client           pmetricotlp.GRPCClient
	hosts            []string
	points, failures atomic.Int64
}

func (f *fanout) consume(ctx context.Context, md pmetric.Metrics) error {
	for _, host := range f.hosts {
		out := pmetric.NewMetrics()
		md.CopyTo(out)
		rms := out.ResourceMetrics()
		for i := range rms.Len() {
			rms.At(i).Resource().Attributes().PutStr("host.name", host)
		}
		// The receiver hands on its last batch as it shuts down, when its
		// context may be cancelled: that batch is sent all the same.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := f.client.Export(sctx, pmetricotlp.NewExportRequestFromMetrics(out))
		cancel()
		if err != nil {
			f.failures.Add(1)
			continue
		}
		f.points.Add(int64(out.DataPointCount()))
	}
	return nil
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	conn, err := grpc.NewClient(o.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	f := &fanout{client: pmetricotlp.NewGRPCClient(conn)}
	for i := range o.hosts {
		f.hosts = append(f.hosts, fmt.Sprintf("%s%03d", o.prefix, i))
	}
	cfg, err := receiverConfig(o)
	if err != nil {
		return err
	}
	factory := gpuvizreceiver.NewFactory()
	next, err := consumer.NewMetrics(f.consume)
	if err != nil {
		return err
	}
	rcv, err := factory.CreateMetrics(ctx, receivertest.NewNopSettings(factory.Type()), cfg, next)
	if err != nil {
		return err
	}
	if err := rcv.Start(ctx, componenttest.NewNopHost()); err != nil {
		return err
	}
	start := time.Now()
	spans := make(chan spanResult, 1)
	if o.spans > 0 {
		go func() { spans <- sendSpans(ctx, o, f.hosts) }()
	} else {
		spans <- spanResult{}
	}
	select {
	case <-ctx.Done():
	case <-time.After(o.duration):
	}
	if err := rcv.Shutdown(context.Background()); err != nil {
		return err
	}
	sr := <-spans
	el := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "%d hosts x %d GPUs for %.0f s: %d points sent (%.0f/s), %d exports failed; %d spans accepted of %d offered\n",
		o.hosts, o.gpus, el, f.points.Load(), float64(f.points.Load())/el, f.failures.Load(), sr.res.Accepted, sr.res.Offered)
	switch {
	case sr.err != nil:
		return sr.err
	case f.failures.Load() > 0:
		return fmt.Errorf("%d exports failed", f.failures.Load())
	case sr.res.Accepted < sr.res.Offered:
		return fmt.Errorf("%d spans not accepted", sr.res.Offered-sr.res.Accepted)
	}
	return nil
}

type spanResult struct {
	res otlpsend.Result
	err error
}

// sendSpans offers every host's spans, 10 to a request, round robin.
func sendSpans(ctx context.Context, o options, hosts []string) spanResult {
	var payloads []*otlpsend.Payload
	for i, h := range hosts {
		p, err := otlpsend.VLLM(h, 1, 10, o.spans, uint64(i))
		if err != nil {
			return spanResult{err: err}
		}
		payloads = append(payloads, p...)
	}
	res, err := otlpsend.Run(ctx, otlpsend.Config{
		Endpoint: o.endpoint, Rate: o.spans * float64(len(hosts)), Duration: o.duration,
		MaxInFlight: 64, Timeout: 10 * time.Second,
	}, payloads)
	return spanResult{res, err}
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuviz-fleetload:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpuviz-fleetload:", err)
		os.Exit(1)
	}
}
