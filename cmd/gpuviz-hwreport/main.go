// Command gpuviz-hwreport makes the measurements of scripts/hardware-report
// on a machine with NVIDIA GPUs, one subcommand each, and renders the report:
//
//	gpuviz-hwreport latency    --out DIR/latency.json        # per-call latency of the receiver's NVML calls
//	gpuviz-hwreport cpu-tick   --out DIR/cpu-tick.json ...   # the sampling clock's CPU cost, A B A B
//	gpuviz-hwreport cpu-pynvml --out DIR/cpu-pynvml.json ... # a pynvml loop against the receiver, A B A B
//	gpuviz-hwreport render     --dir DIR ...                 # DIR/report.md from what the others saved
//
// Exit status: 0 measured; 1 a measurement went wrong (a variant's process
// died or did nothing); 2 it could not run (no NVML, no pynvml, bad flags).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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

// errCouldNotRun marks a measurement that could not run at all (exit 2).
var errCouldNotRun = errors.New("could not run")

// usage says what the command does and its subcommands.
const usage = `usage: gpuviz-hwreport latency|cpu-tick|cpu-pynvml|render [flags]

Makes the measurements of scripts/hardware-report on a machine with NVIDIA
GPUs and renders the report (docs/hardware.md):
  latency     per-call latency of the receiver's NVML calls
  cpu-tick    the sampling clock's CPU cost, A B A B
  cpu-pynvml  a pynvml loop against the receiver, A B A B
  render      DIR/report.md from what the others saved
gpuviz-hwreport SUBCOMMAND -h lists a subcommand's flags.`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the subcommand args name and returns the exit status.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var err error
	switch cmd, args := args[0], args[1:]; cmd {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stderr, usage)
		return 0
	case "latency":
		err = latencyCmd(args)
	case "cpu-tick":
		err = cpuTickCmd(ctx, args)
	case "cpu-pynvml":
		err = cpuPynvmlCmd(ctx, args)
	case "render":
		err = renderCmd(args)
	default:
		err = fmt.Errorf("%w: unknown subcommand %q (-h lists them)", errCouldNotRun, cmd)
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp): // the flag set printed the help
		return 0
	case errors.Is(err, errCouldNotRun):
		fmt.Fprintln(stderr, "gpuviz-hwreport:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "gpuviz-hwreport:", err)
		return 1
	}
}

func parse(fs *flag.FlagSet, args []string) error {
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return err
	case err != nil:
		return fmt.Errorf("%w: %v", errCouldNotRun, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errCouldNotRun, fs.Args())
	}
	return nil
}

func latencyCmd(args []string) error {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	out := fs.String("out", "_build/hardware-report/latency.json", "where to write the results")
	calls := fs.Int("calls", 200, "calls of each NVML function per GPU")
	libPath := fs.String("library-path", "", "the NVML library (default libnvidia-ml.so.1 from the loader's path)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := removeEarlier(*out); err != nil {
		return err
	}
	if *calls < 1 {
		return fmt.Errorf("%w: --calls %d: want at least 1", errCouldNotRun, *calls)
	}
	res, err := measureLatency(*libPath, *calls)
	if err != nil {
		return fmt.Errorf("%w: %v", errCouldNotRun, err)
	}
	for _, g := range res {
		for _, c := range g.Calls {
			fmt.Printf("GPU %d  %-40s %-11s p50 %8.1f µs  p99 %8.1f µs  max %8.1f µs  %s\n", g.Index, c.Call, c.Source, c.P50us, c.P99us, c.MaxUs, c.Note)
		}
	}
	return writeJSON(*out, res)
}

// cpuFlags are the flags both CPU comparisons share.
type cpuFlags struct {
	out, collector, logs string
	window, warmup       time.Duration
	rounds, gpus         int
}

func (c *cpuFlags) register(fs *flag.FlagSet, name string, window time.Duration) {
	fs.StringVar(&c.out, "out", "_build/hardware-report/"+name+".json", "where to write the results")
	fs.StringVar(&c.collector, "collector", "_build/otelcol-gpuviz", "the otelcol-gpuviz binary")
	fs.StringVar(&c.logs, "logs", "_build/hardware-report/"+name, "directory for configs and logs of each run")
	fs.DurationVar(&c.window, "window", window, "CPU time is measured over this window of each run")
	fs.DurationVar(&c.warmup, "warmup", 4*time.Second, "time a process runs before its window opens (start-up is not measured)")
	fs.IntVar(&c.rounds, "rounds", 2, "rounds of A B A B")
	fs.IntVar(&c.gpus, "gpus", 1, "GPUs on the machine, to report per GPU")
}

func (c *cpuFlags) check() error {
	if err := removeEarlier(c.out); err != nil {
		return err
	}
	if c.window <= 0 || c.warmup < 0 || c.rounds < 1 || c.gpus < 1 {
		return fmt.Errorf("%w: need --window > 0, --warmup >= 0, --rounds >= 1, --gpus >= 1", errCouldNotRun)
	}
	return os.MkdirAll(c.logs, 0o755)
}

func cpuTickCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cpu-tick", flag.ContinueOnError)
	var c cpuFlags
	c.register(fs, "cpu-tick", 12*time.Second)
	interval := fs.Duration("interval", 10*time.Second, "collection_interval (the receiver's default), the same in every variant")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	variants := []struct {
		name string
		tick time.Duration
	}{
		{"samples off", 0}, {"tick 250ms", 250 * time.Millisecond},
		{"tick 125ms", 125 * time.Millisecond}, {"tick 100ms", 100 * time.Millisecond},
	}
	cmp := gpucheck.CPUComparison{Name: "tick", Window: c.window, GPUs: c.gpus, Commands: map[string]string{}}
	runners := map[string]runner{}
	for i, v := range variants {
		cfg, err := gpucheck.CostConfig(gpucheck.CostOptions{Interval: *interval, SampleInterval: v.tick, FlushInterval: time.Second})
		if err != nil {
			return err
		}
		path := filepath.Join(c.logs, fmt.Sprintf("collector-%d.yaml", i))
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			return err
		}
		cmp.Variants = append(cmp.Variants, v.name)
		argv := []string{c.collector, "--config", path}
		cmp.Commands[v.name] = strings.Join(argv, " ")
		runners[v.name] = runner{argv: argv, evidence: exportsLogged}
	}
	return runComparison(ctx, c, &cmp, runners)
}

func cpuPynvmlCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cpu-pynvml", flag.ContinueOnError)
	var c cpuFlags
	c.register(fs, "cpu-pynvml", 15*time.Second)
	interval := fs.Duration("interval", time.Second, "the polling interval, the same for both")
	python := fs.String("python", "python3", "the Python interpreter with pynvml")
	baseline := fs.String("baseline", "scripts/pynvml-baseline.py", "the pynvml loop")
	metadata := fs.String("metadata", "receiver/gpuvizreceiver/metadata.yaml", "the receiver's metadata.yaml, for the metrics to turn off")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	cmp := gpucheck.CPUComparison{Name: "pynvml", Variants: []string{"pynvml", "gpuviz"}, Window: c.window, GPUs: c.gpus,
		Commands: map[string]string{}}
	if out, err := exec.CommandContext(ctx, *python, "-c", "import pynvml").CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		cmp.Skipped = fmt.Sprintf("%s cannot import pynvml (pip package nvidia-ml-py): %s", *python, lines[len(lines)-1])
		if werr := writeJSON(c.out, cmp); werr != nil {
			return werr
		}
		return fmt.Errorf("%w: %s", errCouldNotRun, cmp.Skipped)
	}
	data, err := os.ReadFile(*metadata)
	if err != nil {
		return fmt.Errorf("%w: %v", errCouldNotRun, err)
	}
	all, err := gpucheck.MetricNames(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errCouldNotRun, *metadata, err)
	}
	cfg, err := gpucheck.CostConfig(gpucheck.CostOptions{Interval: *interval, Only: gpucheck.PollingMetrics, All: all})
	if err != nil {
		return fmt.Errorf("%w: %v", errCouldNotRun, err)
	}
	path := filepath.Join(c.logs, "collector.yaml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		return err
	}
	py := []string{*python, *baseline, "--interval", strconv.FormatFloat(interval.Seconds(), 'g', -1, 64)}
	col := []string{c.collector, "--config", path}
	cmp.Commands["pynvml"], cmp.Commands["gpuviz"] = strings.Join(py, " "), strings.Join(col, " ")
	return runComparison(ctx, c, &cmp, map[string]runner{
		"pynvml": {argv: py, evidence: pollsReported},
		"gpuviz": {argv: col, evidence: exportsLogged},
	})
}

// runComparison runs the variants A B A B, saves the results and prints
// the report's section for them.
func runComparison(ctx context.Context, c cpuFlags, cmp *gpucheck.CPUComparison, runners map[string]runner) error {
	var failed []string
	for i, name := range gpucheck.Order(cmp.Variants, c.rounds) {
		round := i/len(cmp.Variants) + 1
		logPath := filepath.Join(c.logs, fmt.Sprintf("run-%02d.log", i))
		fmt.Fprintf(os.Stderr, "gpuviz-hwreport: %s round %d: %s (window %s, log %s)\n", cmp.Name, round, name, c.window, logPath)
		run := runners[name].measure(ctx, c.warmup, c.window, logPath)
		run.Variant, run.Round = name, round
		if run.Error == "" && run.Evidence == 0 {
			run.Error = "did no work in the window (see its log)"
		}
		if run.Error != "" {
			failed = append(failed, fmt.Sprintf("%s round %d: %s", name, round, run.Error))
		}
		fmt.Fprintf(os.Stderr, "gpuviz-hwreport:   %.3f%% of one core (%d ticks in %.1f s) %s\n", run.Percent, run.Ticks, run.Wall.Seconds(), run.Error)
		cmp.Runs = append(cmp.Runs, run)
		if ctx.Err() != nil {
			return fmt.Errorf("%w: interrupted", errCouldNotRun)
		}
	}
	if err := writeJSON(c.out, cmp); err != nil {
		return err
	}
	fmt.Print(gpucheck.ComparisonMarkdown(cmp, c.gpus, cmp.Name == "tick"))
	if len(failed) > 0 {
		return errors.New("some runs failed: " + strings.Join(failed, "; "))
	}
	return nil
}

// runner is how one variant is started and how its log shows that it
// worked.
type runner struct {
	argv     []string
	evidence func(log []byte) int
}

// stopGrace is how long a process gets to exit after SIGTERM: the pynvml
// loop ends its current sleep (one interval) first.
const stopGrace = 10 * time.Second

// measure runs the variant, waits warmup, counts its CPU time over window
// from /proc/<pid>/stat, then stops it.
func (r runner) measure(ctx context.Context, warmup, window time.Duration, logPath string) gpucheck.CPURun {
	var run gpucheck.CPURun
	logf, err := os.Create(logPath)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer logf.Close()
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // stopped as a group, never left running
	if err := cmd.Start(); err != nil {
		run.Error = "start: " + err.Error()
		return run
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	wait := func(d time.Duration) string {
		select {
		case err := <-done:
			done <- err // for stop
			return fmt.Sprintf("exited early (%v)", err)
		case <-ctx.Done():
			return "interrupted"
		case <-time.After(d):
			return ""
		}
	}
	statPath := fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)
	read := func() (int64, error) {
		data, err := os.ReadFile(statPath)
		if err != nil {
			return 0, err
		}
		return gpucheck.ParseProcStat(string(data))
	}
	if run.Error = wait(warmup); run.Error == "" {
		t0, err0 := read()
		w0 := time.Now()
		if run.Error = wait(window); run.Error == "" {
			t1, err1 := read()
			run.Wall = time.Since(w0)
			if err := errors.Join(err0, err1); err != nil {
				run.Error = err.Error()
			} else {
				run.Ticks = t1 - t0
				run.Percent = gpucheck.CPUPercent(run.Ticks, run.Wall)
			}
		}
	}
	stop()
	if data, err := os.ReadFile(logPath); err == nil {
		run.Evidence = r.evidence(data)
	}
	return run
}

// exportsLogged counts the exports the debug exporter logged (basic
// verbosity: one line per export, with its data point count).
func exportsLogged(log []byte) int {
	return strings.Count(string(log), `"data points"`)
}

// pollsReported is the poll count the pynvml loop printed when it stopped.
func pollsReported(log []byte) int {
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var msg struct {
			Polls int `json:"polls"`
		}
		if json.Unmarshal([]byte(lines[i]), &msg) == nil && msg.Polls > 0 {
			return msg.Polls
		}
	}
	return 0
}

func renderCmd(args []string) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	dir := fs.String("dir", "_build/hardware-report", "the report's directory: reads latency.json, cpu-tick.json, cpu-pynvml.json, writes report.md")
	var info gpucheck.ReportInfo
	fs.StringVar(&info.Date, "date", time.Now().UTC().Format("2006-01-02"), "date of the measurements (YYYY-MM-DD)")
	fs.StringVar(&info.GPUName, "gpu-name", "unknown GPU", "GPU model, from nvidia-smi")
	fs.StringVar(&info.Driver, "driver", "unknown", "driver version, from nvidia-smi")
	fs.StringVar(&info.CUDA, "cuda", "unknown", "CUDA version, from nvidia-smi")
	fs.IntVar(&info.GPUs, "gpus", 1, "GPUs on the machine")
	fs.IntVar(&info.GPUCheckStatus, "gpu-check-status", -1, "scripts/gpu-check's exit status (-1: not run)")
	summary := fs.String("gpu-check-summary", "", "scripts/gpu-check's summary.txt")
	commands := fs.String("commands", "", "the commands of each section, as section=command lines in this file")
	if err := parse(fs, args); err != nil {
		return err
	}
	var latency []gpucheck.GPULatency
	var tick, pynvml *gpucheck.CPUComparison
	if err := readOptional(filepath.Join(*dir, "latency.json"), &latency); err != nil {
		return err
	}
	for name, dst := range map[string]**gpucheck.CPUComparison{"cpu-tick.json": &tick, "cpu-pynvml.json": &pynvml} {
		var c gpucheck.CPUComparison
		path := filepath.Join(*dir, name)
		if err := readOptional(path, &c); err != nil {
			return err
		}
		if _, err := os.Stat(path); err == nil {
			*dst = &c
		}
	}
	if *summary != "" {
		if data, err := os.ReadFile(*summary); err == nil {
			info.GPUCheckSummary = string(data)
		}
	}
	info.Commands = map[string]string{}
	if *commands != "" {
		data, err := os.ReadFile(*commands)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				info.Commands[k] = v
			}
		}
	}
	md := gpucheck.Markdown(info, latency, tick, pynvml)
	path := filepath.Join(*dir, "report.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "gpuviz-hwreport: wrote", path)
	return nil
}

// removeEarlier removes an earlier run's results at path before a
// measurement starts: render reads whatever is there, and a run that cannot
// measure (no NVML, bad flags) must not leave the last one's figures to be
// reported as its own.
func removeEarlier(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// readOptional reads path's JSON into v; a missing file is not an error
// (that part did not run).
func readOptional(path string, v any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
