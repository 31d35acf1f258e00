// Command gpucheck is the driver of scripts/gpu-check, the hardware check of
// otelcol-gpuviz: it runs the collector on the real NVML backend with the
// receiver's sampling clock on and the gpuviz processor in both pipelines,
// exporting to an OTLP/HTTP endpoint of its own; drives scripts/gpu-workload.py
// through its phases and tells per phase whether the metrics show the
// expected signature; then drives scripts/gpu-requests.py, whose requests
// arrive as spans at the collector's OTLP receiver, and checks what the
// processor wrote on them (phase labels, energy) against what the workload
// measured itself (the join).
//
// Exit status: 0 every expectation held, 1 some failed, 2 the check could not
// run (bad flags, the collector or a workload failed, nothing was captured) or
// part of it could not (a Python package missing, no GPM) and nothing failed.
//
//	gpucheck --collector _build/otelcol-gpuviz --workload scripts/gpu-workload.py \
//	    --requests scripts/gpu-requests.py --out _build/gpu-check
//	gpucheck --analyze _build/gpu-check    # analyse a saved run again, offline
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuviz/gpuviz/internal/cliusage"
	"github.com/gpuviz/gpuviz/internal/gpucheck"
	"github.com/gpuviz/gpuviz/internal/procs"
)

// Files of a run, in --out.
const (
	captureFile  = "capture.json"
	spansFile    = "spans.json"
	phasesFile   = "phases.json"
	requestsFile = "requests.json"
	summaryFile  = "summary.txt"
	configFile   = "collector.yaml"
	logFile      = "collector.log"
)

const (
	// collectorWarmup lets the collector start, open NVML and scrape once
	// before the workload's idle phase begins.
	collectorWarmup = 3 * time.Second
	// stopGrace is how long the collector gets to flush and exit on SIGTERM.
	stopGrace = 10 * time.Second
	// workloadSlack is added to the phases' total time before a workload is
	// taken for hung: PyTorch's import, CUDA context creation and per-phase
	// allocations (a 1 GiB pinned buffer among them).
	workloadSlack = 2 * time.Minute
	// requestsLimit bounds the request workload: about 30 s of synthetic
	// requests, then building a ~335M-parameter model (seconds), two warm-up
	// generates and three batches of ~5 s; generous, because a first CUDA
	// and cuBLAS start on a cold machine can take a minute.
	requestsLimit = 6 * time.Minute
	// spanWait bounds the wait for the last spans after the request
	// workload ends (it returns as soon as all are in): the processor holds a
	// span until the GPU data covering its end has arrived (one
	// flush_interval, at most max_wait, 20 s), then for the settle window
	// (5 s), and while the books warm up for at most warmup_wait (45 s) from
	// when its GPU first had to wait.
	spanWait = 75 * time.Second
)

type options struct {
	collector, workload, requests, out, python string
	interval, sampleInterval, flushInterval    time.Duration
	phaseSeconds                               int
	prefillDuty                                float64
}

func main() {
	os.Exit(run())
}

func run() int {
	var opts options
	var analyzeDir string
	cliusage.Describe(flag.CommandLine, `gpucheck is the hardware check of otelcol-gpuviz (scripts/gpu-check): it
runs the collector on the real NVML backend, a PyTorch phase workload and
a request workload, and checks per phase the metrics' signature and, on
the requests' spans, the processor's phases, labels and energy against
what the workload measured (docs/hardware.md).

usage: gpucheck [flags]
       gpucheck --analyze DIR    # analyse a saved run again, offline

Exit status: 0 every expectation held, 1 some failed, 2 the check, or a
part of it, could not run.`)
	flag.StringVar(&opts.collector, "collector", "_build/otelcol-gpuviz", "the otelcol-gpuviz binary")
	flag.StringVar(&opts.workload, "workload", "scripts/gpu-workload.py", "the PyTorch workload script")
	flag.StringVar(&opts.requests, "requests", "scripts/gpu-requests.py", "the request workload script for the join check; empty skips the join check")
	flag.StringVar(&opts.out, "out", "_build/gpu-check", "directory for the collector config and log, the capture, the phases and the summary")
	flag.DurationVar(&opts.interval, "interval", time.Second, "the receiver's collection_interval")
	flag.DurationVar(&opts.sampleInterval, "sample-interval", 250*time.Millisecond, "the receiver's samples.interval (its sampling clock)")
	flag.DurationVar(&opts.flushInterval, "flush-interval", time.Second, "the receiver's samples.flush_interval")
	flag.Float64Var(&opts.prefillDuty, "prefill-duty", 1, "share of each synthetic prefill the matmuls run (below 1 to stay under a power cap)")
	flag.StringVar(&opts.python, "python", "python3", "the Python interpreter with PyTorch")
	flag.IntVar(&opts.phaseSeconds, "phase-seconds", 20, "length of each workload phase in seconds")
	flag.StringVar(&analyzeDir, "analyze", "", "only analyse the capture.json and phases.json saved in `DIR` by an earlier run")
	flag.Parse()

	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gpucheck: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		return 2
	}

	var res result
	var err error
	if analyzeDir != "" {
		res, err = analyzeSaved(analyzeDir)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		res, err = check(ctx, opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		return 2
	}
	if res.joinErr != nil {
		fmt.Fprintln(os.Stderr, "gpucheck: the join check could not run:", res.joinErr)
	}
	return res.exitStatus()
}

// result is what a check found: the phase report, and the join report when
// the join check ran, or why it could not (joinErr).
type result struct {
	phases  gpucheck.Report
	join    *gpucheck.JoinReport
	joinErr error
}

// exitStatus: a failure says more than a part that could not run.
func (r result) exitStatus() int {
	switch {
	case !r.phases.OK() || (r.join != nil && r.join.Failed() > 0):
		return 1
	case r.phases.Incomplete() || r.joinErr != nil || (r.join != nil && r.join.Incomplete()):
		return 2
	}
	return 0
}

func (r result) table() string {
	t := r.phases.Table()
	switch {
	case r.join != nil:
		t += "\n" + r.join.Table()
	case r.joinErr != nil:
		t += "\nJOIN: COULD NOT RUN: " + r.joinErr.Error() + "\n"
	}
	return t
}

// analyzeSaved analyses a saved run again and prints the tables; the saved
// summary is left as it was, the record of that run. The join is analysed
// when the run saved its requests.
func analyzeSaved(dir string) (result, error) {
	var points []gpucheck.Point
	var wl gpucheck.Workload
	if err := readJSON(filepath.Join(dir, captureFile), &points); err != nil {
		return result{}, err
	}
	if err := readJSON(filepath.Join(dir, phasesFile), &wl); err != nil {
		return result{}, err
	}
	res := result{phases: gpucheck.Analyze(points, wl.Phases, wl.GPUUUID)}
	var run gpucheck.RequestRun
	switch err := readJSON(filepath.Join(dir, requestsFile), &run); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return result{}, err
	default:
		var spans []gpucheck.Span
		if err := readJSON(filepath.Join(dir, spansFile), &spans); err != nil {
			return result{}, err
		}
		join := gpucheck.AnalyzeJoin(spans, points, run)
		res.join = &join
	}
	fmt.Print(res.table())
	return res, nil
}

// check runs the whole hardware check and returns its reports, printed and
// saved; an error means the check could not run.
func check(ctx context.Context, opts options) (result, error) {
	if err := opts.validate(); err != nil {
		return result{}, err
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return result{}, err
	}
	// An earlier run's files would pass for this one's: its summary in
	// scripts/hardware-report's report when this run stops before writing
	// one, its spans and requests joined with this run's capture by
	// --analyze when this one saves none.
	for _, name := range []string{captureFile, spansFile, phasesFile, requestsFile, summaryFile} {
		if err := os.Remove(filepath.Join(opts.out, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return result{}, err
		}
	}

	capture := &gpucheck.Capture{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, fmt.Errorf("opening the OTLP/HTTP endpoint: %w", err)
	}
	srv := &http.Server{Handler: capture.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // Serve returns when srv is closed
	defer srv.Close()

	// Below the ephemeral range the workload's own connections draw from:
	// the collector binds it a few seconds later.
	otlpPort, err := procs.FreePorts(1)
	if err != nil {
		return result{}, fmt.Errorf("finding a port for the collector's OTLP receiver: %w", err)
	}
	otlpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(otlpPort[0]))
	configPath := filepath.Join(opts.out, configFile)
	config := gpucheck.CollectorConfig(gpucheck.CollectorOptions{
		Endpoint: "http://" + ln.Addr().String(), OTLPAddr: otlpAddr,
		Interval: opts.interval, SampleInterval: opts.sampleInterval, FlushInterval: opts.flushInterval,
	})
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		return result{}, err
	}
	col, err := startCollector(opts.collector, configPath, filepath.Join(opts.out, logFile))
	if err != nil {
		return result{}, err
	}
	defer col.stop() // on early returns; a no-op once stopped

	select {
	case <-col.done:
		return result{}, col.exitedEarly()
	case <-ctx.Done():
		return result{}, errors.New("interrupted")
	case <-time.After(collectorWarmup):
	}

	wl, wlErr := runWorkload(ctx, opts)
	var run gpucheck.RequestRun
	var runErr error
	if wlErr == nil && opts.requests != "" {
		run, runErr = runRequests(ctx, opts, "http://"+otlpAddr)
		if runErr == nil {
			waitForSpans(ctx, capture, run)
		}
	}

	// The last phase's final scrape is still to be exported.
	select {
	case <-time.After(2 * opts.interval):
	case <-ctx.Done():
	}
	if col.stop() {
		return result{}, col.exitedEarly()
	}

	// Saved whatever happened to the workloads: a partial run is worth a look.
	points := capture.Points()
	if err := writeJSON(filepath.Join(opts.out, captureFile), points); err != nil {
		return result{}, err
	}
	if err := writeJSON(filepath.Join(opts.out, phasesFile), wl); err != nil {
		return result{}, err
	}
	if opts.requests != "" && wlErr == nil {
		if err := writeJSON(filepath.Join(opts.out, spansFile), capture.Spans()); err != nil {
			return result{}, err
		}
		if err := writeJSON(filepath.Join(opts.out, requestsFile), run); err != nil {
			return result{}, err
		}
	}
	switch {
	case wlErr != nil:
		return result{}, wlErr
	case len(points) == 0:
		return result{}, fmt.Errorf("the collector exported no metrics; see %s", col.log)
	}

	// The phases ran: their verdict stands, and is printed and saved, even
	// when the join check could not run.
	res := result{phases: gpucheck.Analyze(points, wl.Phases, wl.GPUUUID)}
	switch {
	case runErr != nil:
		res.joinErr = runErr
	case opts.requests != "":
		join := gpucheck.AnalyzeJoin(capture.Spans(), points, run)
		res.join = &join
	}
	table := res.table()
	fmt.Print(table)
	if err := os.WriteFile(filepath.Join(opts.out, summaryFile), []byte(table), 0o644); err != nil {
		return result{}, err
	}
	fmt.Fprintf(os.Stderr, "gpucheck: capture, spans, phases, requests, collector log and summary are in %s\n", opts.out)
	return res, nil
}

// validate checks the flags before anything starts: the request workload
// would refuse a bad --prefill-duty only after the phase workload's run.
func (o options) validate() error {
	if o.interval <= 0 {
		return fmt.Errorf("--interval must be positive, got %s", o.interval)
	}
	if o.sampleInterval <= 0 || o.sampleInterval > o.interval || o.flushInterval < o.sampleInterval {
		return fmt.Errorf("need 0 < --sample-interval (%s) <= --interval (%s) and --flush-interval (%s) >= --sample-interval",
			o.sampleInterval, o.interval, o.flushInterval)
	}
	// Shorter phases would leave nothing once both edges are trimmed.
	if minimum := 2*gpucheck.EdgeTrim + 2*o.interval; time.Duration(o.phaseSeconds)*time.Second < minimum {
		return fmt.Errorf("--phase-seconds %d is too short: phases lose %s at each edge, so they need at least %s",
			o.phaseSeconds, gpucheck.EdgeTrim, minimum)
	}
	if o.requests != "" && !(o.prefillDuty > 0 && o.prefillDuty <= 1) {
		return fmt.Errorf("--prefill-duty %g: want a share in (0, 1]", o.prefillDuty)
	}
	return nil
}

// waitForSpans returns once every request's span is in the capture, or
// after spanWait: the processor holds spans until the GPU data covering them
// has arrived. Missing spans are the analysis's to report.
func waitForSpans(ctx context.Context, capture *gpucheck.Capture, run gpucheck.RequestRun) {
	deadline := time.Now().Add(spanWait)
	for {
		have := map[string]bool{}
		for _, s := range capture.Spans() {
			have[s.TraceID+"/"+s.SpanID] = true
		}
		missing := 0
		for _, q := range run.Requests {
			if !have[strings.ToLower(q.TraceID)+"/"+strings.ToLower(q.SpanID)] {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			if missing > 0 {
				fmt.Fprintf(os.Stderr, "gpucheck: %d of %d request spans had not arrived after %s\n", missing, len(run.Requests), spanWait)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// collector is the running otelcol-gpuviz.
type collector struct {
	cmd     *exec.Cmd
	log     string
	done    chan struct{} // closed when the process has exited
	waitErr error         // how it exited, once done is closed
	stopped bool
}

func startCollector(bin, configPath, logPath string) (*collector, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", configPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting the collector (run make build first?): %w", err)
	}
	c := &collector{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	fmt.Fprintf(os.Stderr, "gpucheck: collector started (pid %d), log in %s\n", cmd.Process.Pid, logPath)
	return c, nil
}

// stop ends the collector: SIGTERM, so that it flushes its exporter, then a
// kill after stopGrace. It reports whether the collector had already exited
// on its own, which means the capture stops early.
func (c *collector) stop() (exitedEarly bool) {
	if c.stopped {
		return false
	}
	c.stopped = true
	select {
	case <-c.done:
		return true
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(stopGrace):
		fmt.Fprintf(os.Stderr, "gpucheck: the collector did not exit %s after SIGTERM; killing it\n", stopGrace)
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	return false
}

// exitedEarly describes a collector that exited before it was stopped, with
// the end of its log, where the reason is (NVML not found, no permission, a
// bad config).
func (c *collector) exitedEarly() error {
	<-c.done
	return fmt.Errorf("the collector exited before the check ended (%v); %s ends with:\n%s", c.waitErr, c.log, tail(c.log, 20))
}

// runWorkload runs the phase workload to its end and returns what it
// reported.
func runWorkload(ctx context.Context, opts options) (gpucheck.Workload, error) {
	var wl gpucheck.Workload
	phases := len(gpucheck.ExpectedPhases)
	limit := time.Duration(phases*opts.phaseSeconds)*time.Second + workloadSlack
	fmt.Fprintf(os.Stderr, "gpucheck: running %s: %d phases of %d s\n", opts.workload, phases, opts.phaseSeconds)
	err := runScript(ctx, opts.python, limit, func(line string) error {
		n := len(wl.Phases)
		if err := wl.AddLine(line); err != nil {
			return err
		}
		if len(wl.Phases) > n {
			p := wl.Phases[n]
			fmt.Fprintf(os.Stderr, "gpucheck: phase %s done (%.1f s)\n", p.Name, float64(p.End-p.Start)/1e9)
		}
		return nil
	}, opts.workload, "--phase-seconds", strconv.Itoa(opts.phaseSeconds))
	if err == nil && len(wl.Phases) == 0 {
		err = errors.New("the workload reported no phases")
	}
	return wl, err
}

// runRequests runs the request workload, which sends its spans to the
// collector's OTLP receiver at otlpEndpoint, and returns what it reported.
func runRequests(ctx context.Context, opts options, otlpEndpoint string) (gpucheck.RequestRun, error) {
	var run gpucheck.RequestRun
	fmt.Fprintf(os.Stderr, "gpucheck: running %s: synthetic requests, then transformers generate batches\n", opts.requests)
	err := runScript(ctx, opts.python, requestsLimit, func(line string) error {
		if err := run.AddLine(line); err != nil {
			return err
		}
		if n := len(run.Skipped); n > 0 && strings.Contains(line, `"skipped"`) {
			fmt.Fprintf(os.Stderr, "gpucheck: skipped %s: %s\n", run.Skipped[n-1].Part, run.Skipped[n-1].Reason)
		}
		return nil
	}, opts.requests, "--otlp-endpoint", otlpEndpoint,
		"--prefill-duty", strconv.FormatFloat(opts.prefillDuty, 'g', -1, 64))
	if err == nil && len(run.Requests) == 0 {
		err = errors.New("the request workload reported no requests")
	}
	return run, err
}

// runScript runs a Python script to its end within limit, feeding each line
// of its standard output to addLine (lines it refuses are reported and
// skipped: libraries sometimes print to stdout). Its standard error goes to
// ours.
func runScript(ctx context.Context, python string, limit time.Duration, addLine func(string) error, script string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{script}, args...)...)
	cmd.Stderr = os.Stderr
	// Its own process group, killed whole: a child it started (the power
	// poller) would otherwise keep standard output open after a kill, and
	// the read below would wait for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", script, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4<<20) // a request line is a few hundred bytes; room to spare
	for sc.Scan() {
		if err := addLine(sc.Text()); err != nil {
			fmt.Fprintln(os.Stderr, "gpucheck: ignored:", err)
		}
	}
	scanErr := sc.Err()
	if err := cmd.Wait(); err != nil {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return fmt.Errorf("%s did not finish within %s and was killed", script, limit)
		case errors.Is(ctx.Err(), context.Canceled):
			return fmt.Errorf("interrupted; %s was killed", script)
		}
		return fmt.Errorf("%s failed: %w", script, err)
	}
	if scanErr != nil {
		return fmt.Errorf("reading the output of %s: %w", script, scanErr)
	}
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// tail is the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
