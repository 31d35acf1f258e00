package main

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/gpucheck"
)

// SYNTHETIC: reports and runs made up here; nothing was recorded on hardware.

func TestExitStatus(t *testing.T) {
	pass := gpucheck.Report{}
	fail := gpucheck.Report{Phases: []gpucheck.PhaseReport{{Name: "idle", Rows: []gpucheck.Row{{Status: gpucheck.Fail}}}}}
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
