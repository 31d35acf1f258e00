package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuviz/gpuviz/internal/stack"
)

// The test binary is also the demo (role demo) and the fakes of the
// stack's programs (role fake): each fake answers 200 on GPUVIZ_FAKE_ADDR,
// when set, and exits 1 after GPUVIZ_FAKE_EXIT, when set.
func TestMain(m *testing.M) {
	switch os.Getenv("GPUVIZ_DEMO_TEST_ROLE") {
	case "demo":
		main()
		os.Exit(0)
	case "fake":
		if addr := os.Getenv("GPUVIZ_FAKE_ADDR"); addr != "" {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			go func() { _ = http.Serve(l, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})) }()
		}
		if d, err := time.ParseDuration(os.Getenv("GPUVIZ_FAKE_EXIT")); err == nil {
			time.Sleep(d)
			os.Exit(1)
		}
		select {}
	}
	os.Exit(m.Run())
}

// fake writes a script that records its pid in dir/pids and its arguments,
// one a line, in dir/name.args, and runs the test
// binary as a fake listening on addr ("" for none) and exiting after exit
// ("" for never).
func fake(t *testing.T, dir, name, addr, exit string) string {
	self, err := os.Executable()
	require.NoError(t, err)
	path := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\necho $$ >> %s/pids\nprintf '%%s\\n' \"$@\" > %s/%s.args\nGPUVIZ_DEMO_TEST_ROLE=fake GPUVIZ_FAKE_ADDR=%s GPUVIZ_FAKE_EXIT=%s exec %s\n",
		dir, dir, name, addr, exit, self)
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

// demo runs the demo with args and returns its exit status and stderr.
func demo(t *testing.T, timeout time.Duration, args ...string) (int, string) {
	self, err := os.Executable()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), "GPUVIZ_DEMO_TEST_ROLE=demo")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "the demo still ran after %v; stderr:\n%s", timeout, stderr.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

// A process of the stack that stops by itself leaves the demo showing
// nothing: the demo stops the rest and says so with a failing status,
// whichever process it was.
func TestAProcessStoppingStopsTheDemoWithAFailure(t *testing.T) {
	freePorts(t)
	for _, dies := range []string{"collector", "loadgen"} {
		t.Run(dies, func(t *testing.T) {
			dir := t.TempDir()
			t.Cleanup(func() { // whatever the test's outcome
				for _, pid := range running(t, dir) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			exit := map[string]string{dies: "2s"}
			code, stderr := demo(t, 40*time.Second, "--root", "../..", "--workdir", filepath.Join(dir, "work"),
				"--jaeger", fake(t, dir, "jaeger", "127.0.0.1:16686", exit["jaeger"]),
				"--prometheus", fake(t, dir, "prometheus", "127.0.0.1:19090", exit["prometheus"]),
				"--collector", fake(t, dir, "collector", "127.0.0.1:14317", exit["collector"]),
				"--loadgen", fake(t, dir, "loadgen", "", exit["loadgen"]))
			assert.NotEqual(t, 0, code, stderr)
			assert.Contains(t, stderr, dies+" exited", stderr)
			assert.Empty(t, running(t, dir), "fakes still running after the demo stopped")
		})
	}
}

// freePorts skips the test when one of the stack's fixed ports is taken.
func freePorts(t *testing.T) {
	for _, p := range stack.Ports {
		addr := fmt.Sprintf("127.0.0.1:%d", p.Port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the demo's fixed port %s is taken: %v", addr, err)
		}
		l.Close()
	}
}

// fakeStack returns the demo's flags for fakes of the four programs in dir
// that never exit, and kills whatever of them still runs when the test ends.
func fakeStack(t *testing.T, dir string) []string {
	t.Cleanup(func() { // whatever the test's outcome
		for _, pid := range running(t, dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return []string{"--root", "../..", "--workdir", filepath.Join(dir, "work"),
		"--jaeger", fake(t, dir, "jaeger", "127.0.0.1:16686", ""),
		"--prometheus", fake(t, dir, "prometheus", "127.0.0.1:19090", ""),
		"--collector", fake(t, dir, "collector", "127.0.0.1:14317", ""),
		"--loadgen", fake(t, dir, "loadgen", "", "")}
}

// startDemo starts this test binary as the demo over fakeStack's stand-ins
// in dir, its standard error to stderr (when not nil), and returns it with
// its standard output.
func startDemo(t *testing.T, dir string, stderr io.Writer) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, fakeStack(t, dir)...)
	cmd.Env = append(os.Environ(), "GPUVIZ_DEMO_TEST_ROLE=demo")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	return cmd, stdout
}

// A terminal that closes sends SIGHUP to the demo, not to the stack's
// processes (each in a process group of its own): the demo died of it and
// left the four running on its fixed ports, where the next demo found them.
func TestHangupStopsTheStack(t *testing.T) {
	freePorts(t)
	dir := t.TempDir()
	var stderr strings.Builder
	cmd, stdout := startDemo(t, dir, &stderr)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// Up once it says where to look.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, stderr.String())
	require.Contains(t, line, "gpuviz demo running")
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	require.NotEmpty(t, running(t, dir), "jaeger, prometheus and the collector answered")

	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	_ = cmd.Wait()
	assert.Empty(t, running(t, dir), "the stack still runs after the demo ended; stderr:\n%s", stderr.String())
}

// A port of the stack already taken (here Prometheus', by a leftover that
// answers its readiness check) is named before anything starts: the
// demo said only that prometheus exited, pointing at its log, sometimes
// after printing that it was running.
func TestAPortInUseIsNamedBeforeAnythingStarts(t *testing.T) {
	freePorts(t)
	l, err := net.Listen("tcp", "127.0.0.1:19090")
	require.NoError(t, err)
	defer l.Close()
	go func() { _ = http.Serve(l, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})) }()
	dir := t.TempDir()
	code, stderr := demo(t, 40*time.Second, fakeStack(t, dir)...)
	assert.NotEqual(t, 0, code, stderr)
	assert.Contains(t, stderr, "127.0.0.1:19090 (prometheus)", stderr)
	assert.Contains(t, stderr, "in use", stderr)
	_, err = os.Stat(filepath.Join(dir, "pids"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a fake was started")
}

// The load generator sends the spans of the simulated node's engine, naming
// its simulated GPUs: the collector simulates that node even where real
// GPUs are present. With backend auto it read the real ones, and every
// simulated request was matched to all of them by host (their UUIDs named
// none), under gpuviz.backend nvml.
func TestTheCollectorSimulatesTheNodeTheLoadGeneratorFollows(t *testing.T) {
	freePorts(t)
	dir := t.TempDir()
	cmd, stdout := startDemo(t, dir, nil)
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	_, err := bufio.NewReader(stdout).ReadString('\n') // running
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	b, err := os.ReadFile(filepath.Join(dir, "collector.args"))
	require.NoError(t, err)
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	backend := ""
	for i, a := range args {
		switch {
		case a == "--config" && i+1 < len(args):
			var c struct {
				Receivers struct {
					Gpuviz struct{ Backend string }
				}
			}
			y, err := os.ReadFile(args[i+1])
			require.NoError(t, err)
			require.NoError(t, yaml.Unmarshal(y, &c))
			backend = c.Receivers.Gpuviz.Backend
		case strings.HasPrefix(a, "--set=receivers::gpuviz::backend="):
			backend = strings.TrimPrefix(a, "--set=receivers::gpuviz::backend=")
		}
	}
	assert.Equal(t, "simulated", backend, "the collector's arguments: %q", args)
}

// Prometheus keeps exemplars in its storage's WAL and replays them at
// start; Jaeger keeps traces in memory. A demo run again within the
// printed query's 10 minutes served the last run's exemplars, naming
// traces the new Jaeger never held: each run starts on empty storage.
func TestEachRunStartsPrometheusOnEmptyStorage(t *testing.T) {
	freePorts(t)
	dir := t.TempDir()
	args := fakeStack(t, dir)
	stale := filepath.Join(dir, "work", "prometheus-data", "wal", "00000000")
	require.NoError(t, os.MkdirAll(filepath.Dir(stale), 0o755))
	require.NoError(t, os.WriteFile(stale, []byte("the last run's samples and exemplars"), 0o644))
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), "GPUVIZ_DEMO_TEST_ROLE=demo")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	_, err = bufio.NewReader(stdout).ReadString('\n') // running
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	_, err = os.Stat(stale)
	assert.ErrorIs(t, err, os.ErrNotExist, "the last run's Prometheus storage")
}

// running returns the fakes' pids in dir/pids that are still running.
func running(t *testing.T, dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		if syscall.Kill(pid, 0) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// make demo passes --jaeger "$(scripts/jaeger.sh)": when the script fails
// the flag is empty, and the demo said only "starting jaeger (): exec: no
// command". A stray argument was ignored.
func TestJaegerIsRequiredAndFlagsOnly(t *testing.T) {
	for _, args := range [][]string{{}, {"--jaeger", ""}, {"--jaeger", "/bin/true", "stray"}} {
		code, stderr := demo(t, 20*time.Second, append([]string{"--workdir", t.TempDir()}, args...)...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
		if len(args) == 3 {
			assert.Contains(t, stderr, `"stray"`)
		} else {
			assert.Contains(t, stderr, "--jaeger")
		}
	}
}
