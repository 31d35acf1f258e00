package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/gpucheck"
)

// SYNTHETIC: reports and runs made up here; nothing was recorded on hardware.

// fakeCollectorEnv makes the test binary a stand-in for otelcol-gpuviz:
// it reads the exporter's endpoint from the config gpucheck wrote and
// exports an idle GPU's utilisation there every 200 ms until SIGTERM.
const fakeCollectorEnv = "GPUCHECK_FAKE_COLLECTOR"

func TestMain(m *testing.M) {
	if os.Getenv(fakeCollectorEnv) == "1" {
		os.Exit(fakeCollector(os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

func fakeCollector(configPath string) int {
	config, err := os.ReadFile(configPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ends := regexp.MustCompile(`endpoint: "(http://[^"]+)"`).FindAllStringSubmatch(string(config), -1)
	if len(ends) == 0 {
		fmt.Fprintln(os.Stderr, "no exporter endpoint in", configPath)
		return 1
	}
	url := ends[len(ends)-1][1] + "/v1/metrics"
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	for {
		md := pmetric.NewMetrics()
		m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("hw.gpu.utilization")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(time.Now()))
		dp.SetDoubleValue(0)
		dp.Attributes().PutStr("hw.gpu.task", "general")
		body, _ := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
		if resp, err := http.Post(url, "application/x-protobuf", bytes.NewReader(body)); err == nil {
			resp.Body.Close()
		}
		select {
		case <-term:
			return 0
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// fakeRun is a check against the fake collector, with shell scripts for
// the workloads: the phase workload prints phases and the request
// workload exits 1. The check takes a few seconds (the collector's
// warm-up, the last export's wait).
func fakeRun(t *testing.T, out string) options {
	t.Helper()
	t.Setenv(fakeCollectorEnv, "1")
	dir := t.TempDir()
	// Phases over the last minute, before any point exported: each has no
	// data in its window, and fails.
	workload := filepath.Join(dir, "workload.sh")
	script := "now=$(date +%s)\n"
	for i, name := range gpucheck.ExpectedPhases {
		script += fmt.Sprintf(`echo "{\"phase\": \"%s\", \"start_unix_nano\": $(( (now - %d) * 1000000000 )), \"end_unix_nano\": $(( (now - %d) * 1000000000 ))}"`+"\n",
			name, 100-20*i, 80-20*i)
	}
	require.NoError(t, os.WriteFile(workload, []byte(script), 0o644))
	requests := filepath.Join(dir, "requests.sh")
	require.NoError(t, os.WriteFile(requests, []byte("echo 'no transformers here' >&2\nexit 1\n"), 0o644))
	return options{collector: os.Args[0], workload: workload, requests: requests, out: out, python: "sh",
		interval: time.Second, sampleInterval: 250 * time.Millisecond, flushInterval: time.Second, phaseSeconds: 20, prefillDuty: 1}
}

// The join check's failure to run does not hide the phases' verdict: the
// phases failed, so the check failed (1, not 2, "could not run"), and the
// summary with the phases' table is saved for scripts/hardware-report.
func TestCheckWhoseJoinCouldNotRunStillFailsOnItsPhases(t *testing.T) {
	out := t.TempDir()
	res, err := check(context.Background(), fakeRun(t, out))
	require.NoError(t, err)
	assert.Equal(t, 1, res.exitStatus())
	summary, err := os.ReadFile(filepath.Join(out, summaryFile))
	require.NoError(t, err)
	assert.Contains(t, string(summary), "RESULT: FAIL")
	assert.Contains(t, string(summary), "JOIN: COULD NOT RUN: ")
}

func TestExitStatus(t *testing.T) {
	pass := gpucheck.Report{}
	fail := gpucheck.Report{Phases: []gpucheck.PhaseReport{{Name: "idle", Rows: []gpucheck.Row{{Status: gpucheck.Fail}}}}}
	notChecked := gpucheck.Report{Phases: []gpucheck.PhaseReport{{Name: "matmul", Ran: true, Rows: []gpucheck.Row{{Status: gpucheck.NA}}}}}
	joinPass := &gpucheck.JoinReport{Ticks: []gpucheck.Row{{Status: gpucheck.Pass}}}
	joinFail := &gpucheck.JoinReport{Ticks: []gpucheck.Row{{Status: gpucheck.Fail}}}
	joinSkipped := &gpucheck.JoinReport{Skipped: []gpucheck.Skip{{Part: "hf_generate"}}, Ticks: []gpucheck.Row{{Status: gpucheck.Pass}}}
	for _, tt := range []struct {
		name string
		res  result
		want int
	}{
		{"all held", result{phases: pass, join: joinPass}, 0},
		{"no join check", result{phases: pass}, 0},
		{"a phase failed", result{phases: fail, join: joinPass}, 1},
		{"the join failed", result{phases: pass, join: joinFail}, 1},
		{"part could not run", result{phases: pass, join: joinSkipped}, 2},
		{"a failure outranks a part that could not run", result{phases: fail, join: joinSkipped}, 1},
		// Without the join check (--requests ""), a GPU without GPM: its
		// tensor rows n/a, not held.
		{"a phase's expectation could not be checked", result{phases: notChecked}, 2},
		{"the join could not run", result{phases: pass, joinErr: errors.New("no transformers")}, 2},
		{"a phase failed and the join could not run", result{phases: fail, joinErr: errors.New("no transformers")}, 1},
	} {
		assert.Equal(t, tt.want, tt.res.exitStatus(), tt.name)
	}
}

func TestRunScript(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "w.sh")
	require.NoError(t, os.WriteFile(script, []byte(`echo '{"gpu_uuid": "GPU-x"}'
echo "library noise on stdout"
echo '{"request": {"id": "s0", "kind": "synthetic", "trace_id": "AB", "span_id": "CD", "start_unix_nano": 10, "prefill_start_unix_nano": 10, "first_token_unix_nano": 20, "end_unix_nano": 30}}'
echo "arg: $1 $2"  >&2
exit "${EXIT:-0}"
`), 0o644))

	var run gpucheck.RequestRun
	var refused int
	add := func(line string) error {
		err := run.AddLine(line)
		if err != nil {
			refused++
		}
		return err
	}
	require.NoError(t, runScript(context.Background(), "sh", time.Minute, add, script, "--otlp-endpoint", "http://x"))
	assert.Equal(t, "GPU-x", run.GPUUUID)
	require.Len(t, run.Requests, 1)
	assert.Equal(t, 1, refused, "the noise line is refused, the rest kept")

	t.Setenv("EXIT", "3")
	err := runScript(context.Background(), "sh", time.Minute, add, script)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "failed")

	// A script whose child holds standard output open: killed with it, and
	// promptly, not when the child is done.
	slow := filepath.Join(dir, "slow.sh")
	require.NoError(t, os.WriteFile(slow, []byte("sleep 30 &\nsleep 30\n"), 0o644))
	began := time.Now()
	err = runScript(context.Background(), "sh", 200*time.Millisecond, add, slow)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not finish within")
	assert.Less(t, time.Since(began), 10*time.Second)
}

func TestWaitForSpansReturnsOnceAllArrived(t *testing.T) {
	// The span IDs are compared in lower case, as FromTraces writes them.
	traceHex, spanHex := strings.Repeat("ab", 16), strings.Repeat("cd", 8)
	run := gpucheck.RequestRun{Requests: []gpucheck.Request{{TraceID: strings.ToUpper(traceHex), SpanID: strings.ToUpper(spanHex)}}}
	capture := &gpucheck.Capture{}
	done := make(chan struct{})
	go func() {
		waitForSpans(context.Background(), capture, run)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("returned before the span arrived")
	case <-time.After(700 * time.Millisecond):
	}
	capture.AddTraces(tracesWith(traceHex, spanHex))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("did not return once the span arrived")
	}
}

func TestAnalyzeSaved(t *testing.T) {
	dir := t.TempDir()
	// A run with phases but no requests file: the phase analysis alone.
	require.NoError(t, writeJSON(filepath.Join(dir, captureFile), []gpucheck.Point{}))
	require.NoError(t, writeJSON(filepath.Join(dir, phasesFile), gpucheck.Workload{}))
	res, err := analyzeSaved(dir)
	require.NoError(t, err)
	assert.Nil(t, res.join)
	assert.Equal(t, 1, res.exitStatus(), "no phase ran: failed")

	// With requests and spans saved, the join is analysed too.
	require.NoError(t, writeJSON(filepath.Join(dir, requestsFile), gpucheck.RequestRun{}))
	require.NoError(t, writeJSON(filepath.Join(dir, spansFile), []gpucheck.Span{}))
	res, err = analyzeSaved(dir)
	require.NoError(t, err)
	require.NotNil(t, res.join)
	assert.True(t, strings.Contains(res.table(), "JOIN: FAIL"), res.table())

	// A requests file without its spans is an error, not a silent skip.
	require.NoError(t, os.Remove(filepath.Join(dir, spansFile)))
	_, err = analyzeSaved(dir)
	assert.Error(t, err)
}

// tracesWith is one span with the given lowercase hex IDs.
func tracesWith(traceHex, spanHex string) ptrace.Traces {
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	var tid pcommon.TraceID
	var sid pcommon.SpanID
	copy(tid[:], mustHex(traceHex))
	copy(sid[:], mustHex(spanHex))
	sp.SetTraceID(tid)
	sp.SetSpanID(sid)
	return td
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// Bad flags are refused before the collector or a workload starts: the
// request script refused --prefill-duty outside (0, 1] only after the
// phase workload's minutes on the GPU.
func TestCheckRefusesBadFlagsBeforeStarting(t *testing.T) {
	good := options{collector: filepath.Join(t.TempDir(), "no-collector"), out: t.TempDir(), requests: "scripts/gpu-requests.py",
		interval: time.Second, sampleInterval: 250 * time.Millisecond, flushInterval: time.Second, phaseSeconds: 20, prefillDuty: 1}
	for _, tc := range []struct {
		change func(*options)
		want   string
	}{
		{func(o *options) { o.interval = 0 }, "--interval must be positive"},
		{func(o *options) { o.sampleInterval = 2 * time.Second }, "need 0 < --sample-interval (2s) <= --interval (1s)"},
		{func(o *options) { o.phaseSeconds = 2 }, "--phase-seconds 2 is too short"},
		{func(o *options) { o.prefillDuty = 0 }, "--prefill-duty 0: want a share in (0, 1]"},
		{func(o *options) { o.prefillDuty = 1.5 }, "--prefill-duty 1.5: want a share in (0, 1]"},
	} {
		o := good
		tc.change(&o)
		_, err := check(context.Background(), o)
		assert.ErrorContains(t, err, tc.want)
	}
	// Without the join check the duty is not used.
	o := good
	o.requests, o.prefillDuty = "", 0
	_, err := check(context.Background(), o)
	assert.ErrorContains(t, err, "starting the collector")
}

// A run that stops early leaves no earlier run's files behind to pass for
// its own: scripts/hardware-report pasted the old summary.txt under the new
// exit status, and --analyze joined old spans with a new capture.
func TestCheckRemovesAnEarlierRunsFiles(t *testing.T) {
	out := t.TempDir()
	old := []string{captureFile, spansFile, phasesFile, requestsFile, summaryFile}
	for _, name := range old {
		require.NoError(t, os.WriteFile(filepath.Join(out, name), []byte("from an earlier run\n"), 0o644))
	}
	o := options{collector: filepath.Join(t.TempDir(), "no-collector"), out: out,
		interval: time.Second, sampleInterval: 250 * time.Millisecond, flushInterval: time.Second, phaseSeconds: 20, prefillDuty: 1}
	_, err := check(context.Background(), o)
	require.ErrorContains(t, err, "starting the collector")
	for _, name := range old {
		assert.NoFileExists(t, filepath.Join(out, name))
	}
}
