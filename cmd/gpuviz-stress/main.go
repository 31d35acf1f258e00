// Command gpuviz-stress offers an OTLP/gRPC receiver vLLM llm_request spans
// at a fixed rate from pre-encoded requests (internal/otlpsend), so that
// an overloaded collector, not this sender, sets what gets through, and
// reports per outcome how many spans the collector accepted and refused
// (by gRPC code: memory_limiter's backpressure is ResourceExhausted or
// Unavailable). Exit status: 0 sent, some accepted; 1 none accepted, or the
// run failed; 2 bad flags.
//
//	gpuviz-stress --rate 20000 --duration 60s --endpoint 127.0.0.1:4317 --json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/gpuviz/gpuviz/internal/cliusage"
	"github.com/gpuviz/gpuviz/internal/otlpsend"
)

type options struct {
	cfg      otlpsend.Config
	batch    int
	payloads int
	host     string
	json     bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("gpuviz-stress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cliusage.Describe(fs, `gpuviz-stress offers an OTLP/gRPC receiver vLLM llm_request spans at a fixed
rate, from pre-encoded requests, and counts how many the collector accepted
and refused, by gRPC code (scripts/measure-overload.sh).

usage: gpuviz-stress [flags]

Exit status: 0 sent, and the collector accepted some of it; 1 it accepted
none (nothing listening is refused as backpressure is), or the run failed;
2 bad flags.`)
	fs.StringVar(&o.cfg.Endpoint, "endpoint", "127.0.0.1:4317", "OTLP/gRPC receiver, host:port (plaintext)")
	fs.Float64Var(&o.cfg.Rate, "rate", 20000, "spans per second offered")
	fs.DurationVar(&o.cfg.Duration, "duration", 60*time.Second, "how long to send")
	fs.IntVar(&o.batch, "batch", 100, "spans per request")
	fs.IntVar(&o.cfg.MaxInFlight, "max-in-flight", 32, "requests awaiting an answer at most; one due while all are out is not sent (counted unsent)")
	fs.DurationVar(&o.cfg.Timeout, "timeout", 5*time.Second, "per attempt")
	fs.BoolVar(&o.cfg.Retry, "retry", false, "resend requests refused with a retryable code until accepted or the run ends (default: a refusal is final, and counted)")
	fs.DurationVar(&o.cfg.RetryBackoff, "retry-backoff", 100*time.Millisecond, "with --retry, the wait before a resend")
	fs.IntVar(&o.payloads, "payloads", 16, "distinct requests encoded ahead, sent round robin")
	fs.StringVar(&o.host, "host", "", "host.name on the spans (default: this host's, which the gpuviz processor matches to every GPU of its receiver)")
	fs.BoolVar(&o.json, "json", false, "print the summary as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case !(o.cfg.Rate > 0 && o.cfg.Rate <= otlpsend.MaxRate): // NaN too
		return o, fmt.Errorf("--rate %g: want a positive number of spans per second, at most %g", o.cfg.Rate, otlpsend.MaxRate)
	case o.cfg.Duration <= 0 || o.batch <= 0 || o.payloads <= 0 || o.cfg.MaxInFlight <= 0 || o.cfg.Timeout <= 0:
		return o, errors.New("--duration, --batch, --payloads, --max-in-flight and --timeout must be positive")
	case o.cfg.RetryBackoff < 0:
		return o, fmt.Errorf("--retry-backoff %s: must not be negative", o.cfg.RetryBackoff)
	}
	if o.host == "" {
		h, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("host name: %w", err)
		}
		o.host = h
	}
	return o, nil
}

// summary is what --json prints: the sender's counts and its shape.
type summary struct {
	Endpoint       string  `json:"endpoint"`
	Rate           float64 `json:"rate"`
	Batch          int     `json:"batch"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	otlpsend.Result
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	payloads, err := otlpsend.VLLM(o.host, o.payloads, o.batch, o.cfg.Rate, uint64(time.Now().UnixNano()))
	if err != nil {
		return err
	}
	res, err := otlpsend.Run(ctx, o.cfg, payloads)
	if err != nil {
		return err
	}
	if err := printSummary(stdout, o, res); err != nil {
		return err
	}
	if res.Offered > 0 && res.Accepted == 0 {
		// An unreachable endpoint answers Unavailable as backpressure does;
		// a run in which nothing at all got through is a failure either way.
		return fmt.Errorf("none of %d spans offered was accepted by %s: is an OTLP/gRPC receiver listening there?", res.Offered, o.cfg.Endpoint)
	}
	return nil
}

func printSummary(stdout io.Writer, o options, res otlpsend.Result) error {
	s := summary{Endpoint: o.cfg.Endpoint, Rate: o.cfg.Rate, Batch: o.batch, ElapsedSeconds: res.Elapsed.Seconds(), Result: res}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(stdout, "offered %d spans in %.1f s (%.0f/s) to %s: accepted %d, rejected %d, refused %d, unsent %d; %d requests, %d retries\n",
		res.Offered, s.ElapsedSeconds, float64(res.Offered)/s.ElapsedSeconds, o.cfg.Endpoint,
		res.Accepted, res.Rejected, res.RefusedTotal(), res.Unsent, res.Requests, res.Retries)
	codes := make([]string, 0, len(res.Refused))
	for c := range res.Refused {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		fmt.Fprintf(stdout, "  refused %s: %d spans\n", c, res.Refused[c])
	}
	return nil
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuviz-stress:", err)
		os.Exit(2)
	}
	// SIGINT or SIGTERM ends the sending early; the summary still prints.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpuviz-stress:", err)
		os.Exit(1)
	}
}
