package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/score"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

// writeRun writes a truth file of one request on one GPU, true energy 10 J,
// and a spans file whose enriched span says 12 J: a 20% error.
func writeRun(t *testing.T) (truthPath, spansPath string) {
	t.Helper()
	dir := t.TempDir()
	tid := pcommon.TraceID{1, 2, 3}
	sid := pcommon.SpanID{4, 5, 6}
	lines := []infersim.TruthLine{
		{Header: &infersim.TruthHeader{Scenario: "steady", Seed: 3, GPUModel: "H200", GPUIDs: []string{"GPU-0"}, BinWidthNS: int64(infersim.BinWidth),
			Engines: []infersim.TruthEngine{{Name: "vllm-0", Family: infersim.FamilyVLLM, Match: infersim.MatchHost, GPUs: []int{0}}}}},
		{Request: &infersim.TruthRequest{TraceID: tid.String(), SpanID: sid.String(), GPUs: []int{0}, Arrival: t0, Scheduled: t0,
			FirstToken: t0 + 100e6, Finished: t0 + 200e6, Finish: infersim.FinishStop, Energy: 10, PrefillEnergy: 4, DecodeEnergy: 6}},
		{Bin: &infersim.TruthBin{GPU: 0, Start: t0, Label: infersim.LabelComputeBound, Energy: 4}},
		{Bin: &infersim.TruthBin{GPU: 0, Start: t0 + 100e6, Label: infersim.LabelMemoryBound, Energy: 6}},
	}
	var truth bytes.Buffer
	enc := json.NewEncoder(&truth)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	td := ptrace.NewTraces()
	s := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetTraceID(tid)
	s.SetSpanID(sid)
	s.SetName("llm_request")
	s.SetStartTimestamp(pcommon.Timestamp(t0))
	s.SetEndTimestamp(pcommon.Timestamp(t0 + 200e6))
	s.Attributes().PutStr("gpuviz.request.family", "vllm")
	s.Attributes().PutDouble("gpuviz.energy", 12)
	s.Attributes().PutStr("gpuviz.bottleneck", infersim.LabelMemoryBound)
	spans, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	truthPath, spansPath = filepath.Join(dir, "truth.jsonl"), filepath.Join(dir, "spans.jsonl")
	write(t, truthPath, truth.Bytes())
	write(t, spansPath, append(spans, '\n'))
	return truthPath, spansPath
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestScoresARun(t *testing.T) {
	truth, spans := writeRun(t)
	for _, tc := range []struct {
		format string
		want   []string
	}{
		{"text", []string{"gpuviz request            20.0% / 20.0% / 20.0%  20.0%", "100.0% (1/1) enriched"}},
		// The span is memory_bound over a window half compute-bound.
		{"markdown", []string{"| steady | 100.0% (1/1) | 20.0% / 20.0% / 20.0% |", "### steady (seed 3, H200)", "| request | 1 | 0.2 | 50.0% |"}},
	} {
		code, out, errOut := runCLI("--truth", truth, "--spans", spans, "--format", tc.format, "--baseline-interval", "100ms")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.format, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s output lacks %q:\n%s", tc.format, w, out)
			}
		}
	}

	code, out, errOut := runCLI("--truth", truth, "--spans", spans, "--format", "json")
	if code != 0 {
		t.Fatalf("json: exit %d: %s", code, errOut)
	}
	var rep score.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// The baseline gives the only span all 10 J: exact.
	if rep.Energy.Request.Median != 0.2 || rep.Baseline.Request.Max != 0 || rep.BaselineIntervalS != 10 {
		t.Errorf("json: gpuviz median %g, baseline max %g, interval %g s; want 0.2, 0, 10",
			rep.Energy.Request.Median, rep.Baseline.Request.Max, rep.BaselineIntervalS)
	}
}

func TestHelpSaysWhatItDoes(t *testing.T) {
	code, out, errOut := runCLI("-h")
	if code != 0 || out != "" || !strings.HasPrefix(errOut, "gpuviz-score scores a run") ||
		!strings.Contains(errOut, "usage: gpuviz-score --truth FILE (--spans FILE | --jaeger URL)") || !strings.Contains(errOut, "-baseline-interval duration") {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}

func TestBadInput(t *testing.T) {
	truth, spans := writeRun(t)
	dir := t.TempDir()
	badSpans := filepath.Join(dir, "bad-spans.jsonl")
	good, err := os.ReadFile(spans)
	if err != nil {
		t.Fatal(err)
	}
	write(t, badSpans, append(good, "{not json\n"...))
	badTruth := filepath.Join(dir, "bad-truth.jsonl")
	write(t, badTruth, []byte(`{"request": {}}`+"\n"))
	noSpans := filepath.Join(dir, "no-spans.jsonl")
	write(t, noSpans, nil)
	// Another run's spans: none of them in a trace of this truth.
	otherRun := filepath.Join(dir, "other-run.jsonl")
	write(t, otherRun, bytes.ReplaceAll(good, []byte(`"traceId":"01020300`), []byte(`"traceId":"09090900`)))

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad spans line", []string{"--truth", truth, "--spans", badSpans}, 1, badSpans + ": spans line 2: "},
		{"truth without header", []string{"--truth", badTruth, "--spans", spans}, 1, badTruth + ": truth line 1: the header must come first"},
		{"missing file", []string{"--truth", filepath.Join(dir, "nope"), "--spans", spans}, 1, "nope: no such file"},
		{"no spans", []string{"--truth", truth, "--spans", noSpans, "--format", "json"}, 1, "nothing to score: no span of the truth's 1 requests in " + noSpans},
		{"another run's spans", []string{"--truth", truth, "--spans", otherRun}, 1, "nothing to score: no span of the truth's 1 requests in " + otherRun + " (1 traces of other requests)"},
		{"interval off the bins", []string{"--truth", truth, "--spans", spans, "--baseline-interval", "150ms"}, 1, "not a positive multiple"},
		{"zero interval", []string{"--truth", truth, "--spans", spans, "--baseline-interval", "0s"}, 2, "--baseline-interval 0s: must be positive"},
		{"negative interval", []string{"--truth", truth, "--spans", spans, "--baseline-interval", "-10s"}, 2, "--baseline-interval -10s: must be positive"},
		{"jaeger without scheme", []string{"--truth", truth, "--jaeger", "127.0.0.1:16686"}, 2, `--jaeger "127.0.0.1:16686": want an http:// or https:// URL`},
		{"jaeger without host", []string{"--truth", truth, "--jaeger", "http://"}, 2, `--jaeger "http://": want an http:// or https:// URL`},
		{"no spans flag", []string{"--truth", truth}, 2, "--truth and one of --spans or --jaeger are required"},
		{"unknown format", []string{"--truth", truth, "--spans", spans, "--format", "html"}, 2, `"html": use one of json, markdown, text`},
		{"stray argument", []string{"--truth", truth, "--spans", spans, "extra"}, 2, "unexpected arguments"},
		{"unknown flag", []string{"--seed", "1"}, 2, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d, stderr containing %q, no output", code, errOut, out, tc.code, tc.want)
			}
		})
	}
}
