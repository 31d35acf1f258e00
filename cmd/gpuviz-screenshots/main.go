// Command gpuviz-screenshots regenerates docs/images/view.png and
// view-requests.png (`make screenshots`): it runs the built collector on a
// simulated batching scenario with the gpuviz_view extension and the load
// generator, opens the page in headless Chromium at 1600×1000, waits for
// data and takes the page, then the page after clicking a request.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuviz/gpuviz/internal/cliusage"
	"github.com/gpuviz/gpuviz/internal/viewcheck"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gpuviz-screenshots:", err)
		os.Exit(1)
	}
}

func run() (err error) {
	cliusage.Describe(flag.CommandLine, `gpuviz-screenshots regenerates docs/images/view.png and view-requests.png
(make screenshots): the built collector on a simulated batching scenario
with the live view and the load generator, taken in headless Chromium at
1600x1000, then again after clicking a request.

usage: gpuviz-screenshots [flags]`)
	collector := flag.String("collector", "_build/otelcol-gpuviz", "the built collector")
	loadgen := flag.String("loadgen", "_build/loadgen", "the built load generator")
	chromium := flag.String("chromium", "/usr/bin/chromium", "Chromium (Debian's package)")
	out := flag.String("out", "docs/images", "where the PNGs go")
	scenario := flag.String("scenario", "steady", "the simulated batching scenario")
	warmup := flag.Duration("warmup", 75*time.Second, "how long the stack runs before the first screenshot")
	rangeS := flag.Int("range", 60, "the page's time range in seconds (60, 300 or 900)")
	gpusN := flag.Int("gpus", 8, "simulated GPUs")
	url := flag.String("url", "", "take the pictures of a view already running at this URL instead of starting one")
	flag.Parse()
	if err := checkFlags(flag.CommandLine, *rangeS, *gpusN, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "gpuviz-screenshots:", err)
		os.Exit(2)
	}

	// Ctrl-C ends the context, so the collector, the load generator and
	// Chromium are stopped: they run in process groups of their own, which
	// the terminal's SIGINT does not reach.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *warmup+5*time.Minute)
	defer cancel()
	start := time.Now()
	base := *url
	if base == "" {
		// Not :=, which would shadow the result the deferred keepLogs reads.
		var work string
		var s *viewcheck.Stack
		if work, err = os.MkdirTemp("", "gpuviz-screenshots-"); err != nil {
			return err
		}
		if s, err = viewcheck.StartStack(ctx, viewcheck.StackConfig{
			WorkDir: work, Collector: *collector, Loadgen: *loadgen, Scenario: *scenario, GPUs: *gpusN,
			TraceURLTemplate: "http://127.0.0.1:16686/trace/{trace_id}",
		}); err != nil {
			return err // it names the collector's log, kept in work
		}
		defer func() { keepLogs(work, s, err) }()
		base = s.URL
		fmt.Printf("collector and load generator running (logs in %s), view at %s\n", work, base)
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	gpus := *gpusN
	if *url != "" {
		src, err := viewcheck.GetSources(ctx, base)
		if err != nil {
			return err
		}
		if len(src.Sources) == 0 || src.Sources[0].GPUs == 0 {
			return fmt.Errorf("%s lists no source with GPUs yet", base)
		}
		gpus = src.Sources[0].GPUs
	}
	b, err := viewcheck.NewBrowser(ctx, *chromium)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Open(fmt.Sprintf("%s#range=%d", base, *rangeS)); err != nil {
		return err
	}
	if _, err := b.WaitFor(*warmup+2*time.Minute, viewcheck.Ready(gpus)); err != nil {
		return err
	}
	if wait := *warmup - time.Since(start); wait > 0 && *url == "" {
		fmt.Printf("waiting %v for the range to fill\n", wait.Round(time.Second))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The pictures are taken into memory and written only once the run
	// has passed its checks: a page that logged an error leaves the
	// committed ones as they are.
	if err := b.HoverChart(0, "util", 0.85); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	view, err := b.Capture()
	if err != nil {
		return err
	}
	clicked, shown, err := b.ClickRequest()
	if err != nil {
		return err
	}
	if clicked == "" || shown != clicked {
		return fmt.Errorf("clicked request %q, the details show %q", clicked, shown)
	}
	time.Sleep(300 * time.Millisecond)
	requests, err := b.Capture()
	if err != nil {
		return err
	}
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		return fmt.Errorf("the page logged errors:\n%s", strings.Join(errs, "\n"))
	}
	if err := writeFiles(*out, map[string][]byte{"view.png": view, "view-requests.png": requests}); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s (trace %s in the details)\n", filepath.Join(*out, "view.png"), filepath.Join(*out, "view-requests.png"), shown)
	return nil
}

// keepLogs reports a process of the stack that stopped by itself, stops
// the stack and removes its work directory (the collector's config and the
// logs) when the run succeeded; after a failure it is kept, and said where.
func keepLogs(work string, s *viewcheck.Stack, err error) {
	exited := s.Exited()
	if exited != nil {
		fmt.Fprintln(os.Stderr, exited)
	}
	s.Stop()
	if err != nil || exited != nil {
		fmt.Fprintf(os.Stderr, "gpuviz-screenshots: the collector's and the load generator's logs are kept in %s\n", work)
		return
	}
	_ = os.RemoveAll(work)
}

// writeFiles writes each file into dir: each goes to a temporary file
// beside it first, and only when all are written are they renamed into
// place, so a full disk replaces none of the old ones and a reader never
// sees half a picture.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmps := map[string]string{}
	defer func() {
		for _, tmp := range tmps {
			_ = os.Remove(tmp) // after the renames, nothing is left to remove
		}
	}()
	for name, data := range files {
		f, err := os.CreateTemp(dir, "."+name+".*")
		if err != nil {
			return err
		}
		tmps[name] = f.Name()
		_, err = f.Write(data)
		if err == nil {
			err = f.Chmod(0o644)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	for name, tmp := range tmps {
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// checkFlags refuses what the page or the stack cannot take: the page
// drew --range 61 as a 61 s window and --range 0 as its 300 s, and the
// stack ran --gpus 0 as 8 GPUs while the tool waited for a page of none.
func checkFlags(fs *flag.FlagSet, rangeS, gpus int, warmup time.Duration) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	case rangeS != 60 && rangeS != 300 && rangeS != 900:
		return fmt.Errorf("--range %d: want 60, 300 or 900 (the page's ranges)", rangeS)
	case gpus < 1:
		return fmt.Errorf("--gpus %d: want at least 1", gpus)
	case warmup < 0:
		return fmt.Errorf("--warmup %v: must not be negative", warmup)
	}
	return nil
}
