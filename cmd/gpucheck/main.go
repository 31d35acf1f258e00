// Command gpucheck is the driver of scripts/gpu-check, the hardware check of
// otelcol-gpuviz: it runs the collector on the real NVML backend, exporting to
// an OTLP/HTTP endpoint of its own, drives scripts/gpu-workload.py through its
// phases, and tells per phase whether the metrics show the expected signature.
//
// Exit status: 0 every expectation held, 1 some failed, 2 the check could not
// run (bad flags, the collector or the workload failed, nothing was captured).
//
//	gpucheck --collector _build/otelcol-gpuviz --workload scripts/gpu-workload.py --out _build/gpu-check
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

	"github.com/gpuviz/gpuviz/internal/gpucheck"
)

// Files of a run, in --out.
const (
	captureFile = "capture.json"
	phasesFile  = "phases.json"
	summaryFile = "summary.txt"
	configFile  = "collector.yaml"
	logFile     = "collector.log"
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
)

type options struct {
	collector, workload, out, python string
	interval                         time.Duration
	phaseSeconds                     int
}

func main() {
	os.Exit(run())
}

func run() int {
	var opts options
	var analyzeDir string
	flag.StringVar(&opts.collector, "collector", "_build/otelcol-gpuviz", "the otelcol-gpuviz binary")
	flag.StringVar(&opts.workload, "workload", "scripts/gpu-workload.py", "the PyTorch workload script")
	flag.StringVar(&opts.out, "out", "_build/gpu-check", "directory for the collector config and log, the capture, the phases and the summary")
	flag.DurationVar(&opts.interval, "interval", time.Second, "the receiver's collection_interval")
	flag.StringVar(&opts.python, "python", "python3", "the Python interpreter with PyTorch")
	flag.IntVar(&opts.phaseSeconds, "phase-seconds", 20, "length of each workload phase in seconds")
	flag.StringVar(&analyzeDir, "analyze", "", "only analyse the capture.json and phases.json saved in `DIR` by an earlier run")
	flag.Parse()

	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gpucheck: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		return 2
	}

	var rep gpucheck.Report
	var err error
	if analyzeDir != "" {
		rep, err = analyzeSaved(analyzeDir)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		rep, err = check(ctx, opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		return 2
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// analyzeSaved analyses a saved run again and prints the table; the saved
// summary is left as it was, the record of that run.
func analyzeSaved(dir string) (gpucheck.Report, error) {
	var points []gpucheck.Point
	var wl gpucheck.Workload
	if err := readJSON(filepath.Join(dir, captureFile), &points); err != nil {
		return gpucheck.Report{}, err
	}
	if err := readJSON(filepath.Join(dir, phasesFile), &wl); err != nil {
		return gpucheck.Report{}, err
	}
	rep := gpucheck.Analyze(points, wl.Phases, wl.GPUUUID)
	fmt.Print(rep.Table())
	return rep, nil
}

// check runs the whole hardware check and returns its report, printed and
// saved; an error means the check could not run.
func check(ctx context.Context, opts options) (gpucheck.Report, error) {
	if opts.interval <= 0 {
		return gpucheck.Report{}, fmt.Errorf("--interval must be positive, got %s", opts.interval)
	}
	// Shorter phases would leave nothing once both edges are trimmed.
	if minimum := 2*gpucheck.EdgeTrim + 2*opts.interval; time.Duration(opts.phaseSeconds)*time.Second < minimum {
		return gpucheck.Report{}, fmt.Errorf("--phase-seconds %d is too short: phases lose %s at each edge, so they need at least %s",
			opts.phaseSeconds, gpucheck.EdgeTrim, minimum)
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return gpucheck.Report{}, err
	}

	capture := &gpucheck.Capture{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return gpucheck.Report{}, fmt.Errorf("opening the OTLP/HTTP endpoint: %w", err)
	}
	srv := &http.Server{Handler: capture.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // Serve returns when srv is closed
	defer srv.Close()

	configPath := filepath.Join(opts.out, configFile)
	if err := os.WriteFile(configPath, gpucheck.CollectorConfig("http://"+ln.Addr().String(), opts.interval), 0o644); err != nil {
		return gpucheck.Report{}, err
	}
	col, err := startCollector(opts.collector, configPath, filepath.Join(opts.out, logFile))
	if err != nil {
		return gpucheck.Report{}, err
	}
	defer col.stop() // on early returns; a no-op once stopped

	select {
	case <-col.done:
		return gpucheck.Report{}, col.exitedEarly()
	case <-ctx.Done():
		return gpucheck.Report{}, errors.New("interrupted")
	case <-time.After(collectorWarmup):
	}

	wl, wlErr := runWorkload(ctx, opts)

	// The last phase's final scrape is still to be exported.
	select {
	case <-time.After(2 * opts.interval):
	case <-ctx.Done():
	}
	if col.stop() {
		return gpucheck.Report{}, col.exitedEarly()
	}

	// Saved whatever happened to the workload: a partial run is worth a look.
	points := capture.Points()
	if err := writeJSON(filepath.Join(opts.out, captureFile), points); err != nil {
		return gpucheck.Report{}, err
	}
	if err := writeJSON(filepath.Join(opts.out, phasesFile), wl); err != nil {
		return gpucheck.Report{}, err
	}
	if wlErr != nil {
		return gpucheck.Report{}, wlErr
	}
	if len(points) == 0 {
		return gpucheck.Report{}, fmt.Errorf("the collector exported no metrics; see %s", col.log)
	}

	rep := gpucheck.Analyze(points, wl.Phases, wl.GPUUUID)
	table := rep.Table()
	fmt.Print(table)
	if err := os.WriteFile(filepath.Join(opts.out, summaryFile), []byte(table), 0o644); err != nil {
		return gpucheck.Report{}, err
	}
	fmt.Fprintf(os.Stderr, "gpucheck: capture, phases, collector log and summary are in %s\n", opts.out)
	return rep, nil
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

// runWorkload runs the workload to its end and returns what it reported. Its
// standard error goes to ours; its standard output is its report.
func runWorkload(ctx context.Context, opts options) (gpucheck.Workload, error) {
	var wl gpucheck.Workload
	phases := len(gpucheck.ExpectedPhases)
	limit := time.Duration(phases*opts.phaseSeconds)*time.Second + workloadSlack
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, opts.python, opts.workload, "--phase-seconds", strconv.Itoa(opts.phaseSeconds))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return wl, err
	}
	fmt.Fprintf(os.Stderr, "gpucheck: running %s: %d phases of %d s\n", opts.workload, phases, opts.phaseSeconds)
	if err := cmd.Start(); err != nil {
		return wl, fmt.Errorf("starting the workload: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		n := len(wl.Phases)
		if err := wl.AddLine(sc.Text()); err != nil {
			fmt.Fprintln(os.Stderr, "gpucheck: ignored:", err)
			continue
		}
		if len(wl.Phases) > n {
			p := wl.Phases[n]
			fmt.Fprintf(os.Stderr, "gpucheck: phase %s done (%.1f s)\n", p.Name, float64(p.End-p.Start)/1e9)
		}
	}
	scanErr := sc.Err()
	if err := cmd.Wait(); err != nil {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return wl, fmt.Errorf("the workload did not finish within %s and was killed", limit)
		case errors.Is(ctx.Err(), context.Canceled):
			return wl, errors.New("interrupted; the workload was killed")
		}
		return wl, fmt.Errorf("the workload failed: %w", err)
	}
	if scanErr != nil {
		return wl, fmt.Errorf("reading the workload's output: %w", scanErr)
	}
	if len(wl.Phases) == 0 {
		return wl, errors.New("the workload reported no phases")
	}
	return wl, nil
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
