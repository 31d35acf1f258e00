package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/gpucheck"
)

// SYNTHETIC: shell loops stand in for the collector and the pynvml loop.

func TestMeasureCountsCPUOfABusyProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	dir := t.TempDir()
	busy := runner{argv: []string{"sh", "-c", `echo '"data points"'; while :; do :; done`}, evidence: exportsLogged}
	spun := busy.measure(context.Background(), 100*time.Millisecond, time.Second, filepath.Join(dir, "busy.log"))
	require.Empty(t, spun.Error)
	assert.Equal(t, 1, spun.Evidence)
	assert.GreaterOrEqual(t, spun.Wall, time.Second, "measured over the whole window")

	idle := runner{argv: []string{"sleep", "30"}, evidence: exportsLogged}
	began := time.Now()
	slept := idle.measure(context.Background(), 0, 500*time.Millisecond, filepath.Join(dir, "idle.log"))
	require.Empty(t, slept.Error)
	assert.Zero(t, slept.Evidence, "no export logged")
	assert.Less(t, time.Since(began), 5*time.Second, "stopped with SIGTERM, not waited for")
	// A shell spinning against one sleeping: how much of a core it gets
	// depends on the machine's load, so only the order is asserted.
	assert.Greater(t, spun.Percent, slept.Percent, "spinning %+v, sleeping %+v", spun, slept)
	assert.Positive(t, spun.Percent, "%+v", spun)

	early := runner{argv: []string{"sh", "-c", "exit 3"}, evidence: exportsLogged}
	run := early.measure(context.Background(), time.Second, time.Second, filepath.Join(dir, "early.log"))
	assert.Contains(t, run.Error, "exited early")
}

func TestEvidence(t *testing.T) {
	log := "2026-12-01T00:00:00Z info Metrics {\"resource metrics\": 1, \"metrics\": 9, \"data points\": 20}\n" +
		"2026-12-01T00:00:01Z info Metrics {\"resource metrics\": 1, \"metrics\": 9, \"data points\": 20}\n"
	assert.Equal(t, 2, exportsLogged([]byte(log)))
	assert.Equal(t, 42, pollsReported([]byte("noise\n{\"polls\": 42, \"errors\": 0, \"mean_loop_ms\": 1.5}\n")))
	assert.Zero(t, pollsReported([]byte("Traceback ...\n")))
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeJSON(filepath.Join(dir, "latency.json"), []gpucheck.GPULatency{{Index: 0, Name: "NVIDIA H200",
		Calls: []gpucheck.LatencyStats{{Call: "GpmSampleGet", Source: "wall", N: 200, P50us: 30}}}}))
	require.NoError(t, writeJSON(filepath.Join(dir, "cpu-pynvml.json"), gpucheck.CPUComparison{Skipped: "pynvml is not installed"}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "commands.txt"), []byte("latency=gpuviz-hwreport latency --calls 200\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "summary.txt"), []byte("RESULT: PASS\n"), 0o644))
	require.NoError(t, renderCmd([]string{"--dir", dir, "--date", "2026-12-01", "--gpu-name", "NVIDIA H200", "--driver", "570.1",
		"--cuda", "12.8", "--gpus", "1", "--gpu-check-status", "0", "--gpu-check-summary", filepath.Join(dir, "summary.txt"),
		"--commands", filepath.Join(dir, "commands.txt")}))
	data, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	md := string(data)
	for _, want := range []string{
		"### 2026-12-01 — NVIDIA H200",
		"| GpmSampleGet | wall | 200 | 0 | 30.0 |",
		"Command: `gpuviz-hwreport latency --calls 200`",
		"could not run: pynvml is not installed",
		"exit status 0: PASS",
	} {
		assert.Contains(t, md, want)
	}
	// The tick comparison did not run: said, not invented.
	assert.Equal(t, 1, strings.Count(md, "not measured (see the report's log)"))

	assert.Error(t, renderCmd([]string{"--dir", dir, "stray"}))
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, 0, "usage: gpuviz-hwreport latency|cpu-tick|cpu-pynvml|render [flags]"},
		{nil, 2, "usage: gpuviz-hwreport"},
		{[]string{"bogus"}, 2, `could not run: unknown subcommand "bogus"`},
		// Help is not a failure to run.
		{[]string{"latency", "-h"}, 0, ""},
		// Checked before NVML starts: on a GPU, 0 calls wrote a table of
		// zeros ("not supported on this GPU") and -5 panicked.
		{[]string{"latency", "--calls", "0"}, 2, "could not run: --calls 0: want at least 1"},
		{[]string{"latency", "--calls", "-5"}, 2, "could not run: --calls -5: want at least 1"},
		{[]string{"render", "--dir", t.TempDir(), "stray"}, 2, `unexpected arguments ["stray"]`},
	} {
		var stderr strings.Builder
		code := run(context.Background(), tc.args, &stderr)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, stderr.String())
		assert.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		assert.NotContains(t, stderr.String(), "help requested", "%v", tc.args)
	}
}

// A measurement that cannot run leaves no earlier run's results for render
// to report as its own: hardware-report on a host whose NVML failed to load
// pasted the last run's latency table.
func TestAMeasurementThatCannotRunRemovesTheEarlierResults(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file string
		args []string
	}{
		{"latency.json", []string{"latency", "--library-path", filepath.Join(dir, "no-libnvidia-ml.so.1")}},
		{"cpu-tick.json", []string{"cpu-tick", "--rounds", "0", "--logs", filepath.Join(dir, "logs")}},
		{"cpu-pynvml.json", []string{"cpu-pynvml", "--window", "0", "--logs", filepath.Join(dir, "logs")}},
	} {
		out := filepath.Join(dir, tc.file)
		require.NoError(t, os.WriteFile(out, []byte("{}\n"), 0o644))
		var stderr strings.Builder
		code := run(context.Background(), append(tc.args, "--out", out), &stderr)
		assert.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		assert.NoFileExists(t, out, "%v", tc.args)
	}
}
