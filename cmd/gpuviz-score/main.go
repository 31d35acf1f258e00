// Command gpuviz-score scores a run of the gpuviz collector against the
// ground truth of the simulation it ran on: the truth file the load
// generator wrote and the spans the collector exported, read from a file
// (OTLP JSON, one batch per line, as the contrib file exporter writes) or
// from Jaeger's API v3. See internal/score for what is measured.
//
//	gpuviz-score --truth truth.jsonl (--spans spans.jsonl | --jaeger http://127.0.0.1:16686) [--baseline-interval 10s] [--format text|markdown|json]
//
// Exit status: 0 scored, 1 an input could not be read or scored, 2 bad
// flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/cliusage"
	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/score"
)

const about = `gpuviz-score scores a run of the collector on simulated GPUs against the
load generator's ground truth (loadgen --truth): energy error against a
naive baseline, bottleneck label agreement, coverage and conservation
(docs/accuracy.md).

usage: gpuviz-score --truth FILE (--spans FILE | --jaeger URL) [flags]

Exit status: 0 scored, 1 an input could not be read or scored, 2 bad flags.`

// formats renders a report for --format.
var formats = map[string]func(score.Report) (string, error){
	"text": func(r score.Report) (string, error) { return r.Text(), nil },
	"markdown": func(r score.Report) (string, error) {
		return score.MarkdownHeader() + r.MarkdownRow() + "\n" + r.MarkdownSection(), nil
	},
	"json": func(r score.Report) (string, error) {
		b, err := json.MarshalIndent(r, "", "  ")
		return string(b) + "\n", err
	},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpuviz-score", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cliusage.Describe(fs, about)
	truthPath := fs.String("truth", "", "the load generator's truth `file` (JSON lines)")
	spansPath := fs.String("spans", "", "the file exporter's output `file` (OTLP JSON, one batch per line)")
	jaeger := fs.String("jaeger", "", "or Jaeger's query `URL` (API v3): the traces of the truth's time window")
	interval := fs.Duration("baseline-interval", score.DefaultBaselineInterval, "how often the naive baseline reads the energy counters")
	names := slices.Sorted(maps.Keys(formats))
	format := fs.String("format", "text", "output: "+strings.Join(names, ", "))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	render, ok := formats[*format]
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "gpuviz-score: unexpected arguments %q\n", fs.Args())
		return 2
	case *truthPath == "" || (*spansPath == "") == (*jaeger == ""):
		fmt.Fprintln(stderr, "gpuviz-score: --truth and one of --spans or --jaeger are required")
		return 2
	case !ok:
		fmt.Fprintf(stderr, "gpuviz-score: --format %q: use one of %s\n", *format, strings.Join(names, ", "))
		return 2
	case *interval <= 0: // score.Options would read 0 as the default
		fmt.Fprintf(stderr, "gpuviz-score: --baseline-interval %s: must be positive (a multiple of the truth's bin width)\n", *interval)
		return 2
	case *jaeger != "" && !isHTTPURL(*jaeger):
		fmt.Fprintf(stderr, "gpuviz-score: --jaeger %q: want an http:// or https:// URL with a host, e.g. http://127.0.0.1:16686\n", *jaeger)
		return 2
	}
	rep, err := scoreRun(*truthPath, *spansPath, *jaeger, score.Options{BaselineInterval: *interval})
	if err == nil {
		var out string
		if out, err = render(rep); err == nil {
			_, err = io.WriteString(stdout, out)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpuviz-score:", err)
		return 1
	}
	return 0
}

// isHTTPURL: a URL an HTTP client can reach, not a bare host:port (which
// parses with the host as its scheme).
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// jaegerTimeout bounds reading a run's traces from Jaeger.
const jaegerTimeout = 2 * time.Minute

func scoreRun(truthPath, spansPath, jaeger string, opts score.Options) (score.Report, error) {
	truth, err := readFile(truthPath, infersim.ReadTruth)
	if err != nil {
		return score.Report{}, err
	}
	var traces []ptrace.Traces
	source := spansPath
	if spansPath != "" {
		traces, err = readFile(spansPath, score.ReadTraces)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), jaegerTimeout)
		defer cancel()
		from, to := score.TraceWindow(truth)
		source = fmt.Sprintf("Jaeger at %s between %s and %s", jaeger, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		traces, err = score.FetchJaeger(ctx, http.DefaultClient, strings.TrimSuffix(jaeger, "/"), from, to)
	}
	if err != nil {
		return score.Report{}, err
	}
	rep, err := score.Score(truth, traces, opts)
	// Without a single request's span every number would be an empty
	// sample's (0 in JSON): the wrong file or window, not a score.
	if c := rep.Coverage; err == nil && c.WithSpan == 0 {
		err = fmt.Errorf("nothing to score: no span of the truth's %d requests in %s", c.Requests, source)
		if c.UnknownTraces > 0 {
			err = fmt.Errorf("%w (%d traces of other requests)", err, c.UnknownTraces)
		}
	}
	return rep, err
}

// readFile reads path with read, naming the file in any error.
func readFile[T any](path string, read func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err // names the file already
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
