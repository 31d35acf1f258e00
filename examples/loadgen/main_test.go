package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

func TestFlagDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	cfg.set = nil
	assert.Equal(t, config{
		Endpoint: "127.0.0.1:4317", Protocol: "grpc", Insecure: true, Mode: "simulated",
		SimModel: "h200", SimGPUs: 8, SimSeed: 1, Scenario: "steady", Match: "process", Families: []string{"vllm"},
		Rate: 5, Concurrency: 16, Service: "vllm",
	}, cfg)

	cfg, err = parseFlags([]string{"--protocol", "http"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:4318", cfg.Endpoint, "OTLP/HTTP's port when no endpoint is given")
	cfg, err = parseFlags([]string{"--protocol=http", "--endpoint=http://collector:9999/", "--insecure=false", "--scenario=Sequential", "--families", "tgi, triton,tgi", "--duration", "30s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "collector:9999", cfg.Endpoint)
	assert.False(t, cfg.Insecure)
	assert.Equal(t, "sequential", cfg.Scenario)
	assert.Equal(t, []string{"tgi", "triton"}, cfg.Families)
	assert.Equal(t, 30*time.Second, cfg.Duration)
	cfg, err = parseFlags([]string{"--scenario", "mixed", "--truth", "/tmp/t.jsonl"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/tmp/t.jsonl", cfg.Truth)
}

func TestHelpSaysWhatItDoes(t *testing.T) {
	var out strings.Builder
	_, err := parseFlags([]string{"-h"}, &out)
	assert.ErrorIs(t, err, flag.ErrHelp)
	assert.True(t, strings.HasPrefix(out.String(), "loadgen sends over OTLP the spans inference servers export"), out.String())
	assert.Contains(t, out.String(), "-metrics-listen string")
}

func TestFlagErrors(t *testing.T) {
	for args, want := range map[string]string{
		"--protocol udp":    `--protocol "udp"`,
		"--mode replay":     `--mode "replay"`,
		"--scenario replay": `--scenario: unknown scenario "replay": use one of bursty,`,
		"--scenario mixed --sim-model a100 --sim-gpus 1": "does not fit on 1 a100 GPU(s)",
		"--families tgi":                             "--families applies to --scenario sequential and --mode synthetic: the engines of scenario steady choose",
		"--scenario mixed --match host":              "--match applies to --scenario sequential",
		"--scenario mixed --service x":               "--service applies to --scenario sequential",
		"--scenario sequential --truth t.jsonl":      "--truth needs an engine scenario",
		"--mode synthetic --scenario steady":         "--scenario applies to --mode simulated only",
		"--mode synthetic --truth t.jsonl":           "--truth applies to --mode simulated only",
		"--mode flood --metrics-listen :18000":       "--metrics-listen applies to --mode simulated only",
		"--scenario sequential --metrics-listen :1":  "--metrics-listen needs an engine scenario",
		"--scenario sequential --match pid":          `--match "pid"`,
		"--scenario sequential --families vllm,trt":  `unknown family "trt"`,
		"--scenario sequential --families ,":         "name at least one",
		"--scenario sequential --service=":           "--service must not be empty",
		"--sim-model h300":                           `unknown simulated GPU model "h300"`,
		"--sim-gpus 0":                               "--sim-gpus 0: want 1 to 64",
		"--sim-gpus 65":                              "--sim-gpus 65",
		"--duration -1s":                             "must not be negative",
		"--mode synthetic --rate 0":                  "--rate 0",
		"--mode synthetic --concurrency 0":           "--concurrency 0",
		"--mode synthetic --match attribute":         "needs --gpu-uuid",
		"--mode synthetic --gpu-uuid GPU-1":          "--gpu-uuid applies to --match attribute only",
		"--mode flood --match host --gpu-uuid GPU-1": "--gpu-uuid applies to --match attribute only",
		"--mode synthetic --families sglang":         `unknown family "sglang"`,
		"--endpoint http://host:1/v1/traces":         "want host:port",
		"extra":                                      "unexpected arguments: extra",
		"--sim-seed -1":                              "invalid value",
		// The simulation decides when its requests come and on which GPU.
		"--rate 100":                             "--rate applies to --mode synthetic and flood: the simulation decides when requests come",
		"--scenario sequential --concurrency 4":  "--concurrency applies to --mode synthetic: the simulation",
		"--scenario sequential --gpu-uuid GPU-1": "--gpu-uuid applies to --mode synthetic and flood: the simulation",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		assert.ErrorContains(t, err, want, args)
	}
	// Synthetic mode does not look at the simulation's flags.
	_, err := parseFlags([]string{"--mode", "synthetic", "--sim-gpus", "0"}, io.Discard)
	assert.NoError(t, err)
	// --gpu-uuid is refused beside the other matches only.
	for _, mode := range []string{"synthetic", "flood"} {
		cfg, err := parseFlags([]string{"--mode", mode, "--match", "attribute", "--gpu-uuid", "GPU-1"}, io.Discard)
		if assert.NoError(t, err, mode) {
			assert.Equal(t, "GPU-1", cfg.GPUUUID, mode)
		}
	}
}

// sink collects what OTLP exports bring.
type sink struct {
	mu     sync.Mutex
	traces []ptrace.Traces
}

func (s *sink) add(td ptrace.Traces) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := ptrace.NewTraces()
	td.CopyTo(c)
	s.traces = append(s.traces, c)
}

// spanRec is a span that arrived, with its resource and scope.
type spanRec struct {
	res   pcommon.Resource
	scope string
	span  ptrace.Span
}

func (s *sink) spans() (out []spanRec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, td := range s.traces {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					out = append(out, spanRec{rs.Resource(), ss.Scope().Name(), sp})
				}
			}
		}
	}
	return out
}

// grpcSink is an OTLP/gRPC receiver that fails its first `failures` exports
// with code.
type grpcSink struct {
	ptraceotlp.UnimplementedGRPCServer
	*sink
	failures atomic.Int32
	code     codes.Code
	calls    atomic.Int32
}

func (g *grpcSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	g.calls.Add(1)
	if g.failures.Add(-1) >= 0 {
		return ptraceotlp.NewExportResponse(), status.Error(g.code, "not now")
	}
	g.add(req.Traces())
	return ptraceotlp.NewExportResponse(), nil
}

// serveGRPC starts an OTLP/gRPC receiver and returns it and its address.
func serveGRPC(t *testing.T) (*grpcSink, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &grpcSink{sink: &sink{}}
	gs := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(gs, g)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return g, lis.Addr().String()
}

func quiet() *errorLogger {
	return &errorLogger{logger: log.New(io.Discard, "", 0), every: time.Minute, now: time.Now}
}

// TestRunExportsOverOTLP runs the whole program briefly on the sequential
// schedule against an OTLP/HTTP and an OTLP/gRPC receiver and checks what
// arrives on the wire.
func TestRunExportsOverOTLP(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		got := &sink{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
				http.Error(w, "unexpected "+r.URL.Path, http.StatusNotFound)
				return
			}
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			req := ptraceotlp.NewExportRequest()
			if err := req.UnmarshalProto(body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			got.add(req.Traces())
			resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(resp)
		}))
		defer srv.Close()
		endpoint := strings.TrimPrefix(srv.URL, "http://")
		runBriefly(t, got, "--protocol", "http", "--endpoint", endpoint, "--scenario", "sequential", "--sim-gpus", "64", "--match", "attribute")
	})
	t.Run("grpc", func(t *testing.T) {
		t.Parallel()
		g, addr := serveGRPC(t)
		runBriefly(t, g.sink, "--endpoint", addr, "--scenario", "sequential", "--sim-gpus", "64", "--families", "vllm,tgi,triton")
	})
}

// untilClearOfWindowEdge is how long to wait from now for a run of d to lie
// at least 2 s from the edges of the sequential schedule's windows (wall
// clock minutes). No request crosses an edge: every GPU ends its window idle
// and starts the next with at least 0.9 s before any request can end, so a
// brief run across an edge may rightly emit nothing (about 2% of starts).
func untilClearOfWindowEdge(now time.Time, d time.Duration) time.Duration {
	const margin = 2 * time.Second
	w := int64(nvmlsim.Window)
	off := time.Duration(now.UnixNano() % w)
	if off >= margin && off+d+margin <= nvmlsim.Window {
		return 0
	}
	if off < margin {
		return margin - off
	}
	return nvmlsim.Window - off + margin
}

var summaryRE = regexp.MustCompile(`^requests emitted:((?: [a-z]+=\d+)+) total=(\d+) aborted_without_span=(\d+)\n$`)

// parseSummary reads the exit line's counts.
func parseSummary(t *testing.T, line string) (counts map[string]int, total, noSpan int) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(line)
	require.NotNil(t, m, "one summary line: %q", line)
	counts = map[string]int{}
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		counts[k], _ = strconv.Atoi(v)
	}
	total, _ = strconv.Atoi(m[2])
	noSpan, _ = strconv.Atoi(m[3])
	return counts, total, noSpan
}

func runBriefly(t *testing.T, got *sink, args ...string) {
	t.Helper()
	const duration = 1200 * time.Millisecond
	cfg, err := parseFlags(append(args, "--duration", duration.String()), io.Discard)
	require.NoError(t, err)
	time.Sleep(untilClearOfWindowEdge(time.Now(), duration))
	var stdout, stderr bytes.Buffer
	start := time.Now()
	require.NoError(t, run(t.Context(), cfg, &stdout, log.New(&stderr, "", 0)))
	assert.Less(t, time.Since(start), 4*time.Second)
	assert.Contains(t, stderr.String(), "following 64 simulated h200 GPUs, seed 1, scenario sequential")
	assert.Contains(t, stderr.String(), "0 spans dropped")

	counts, total, noSpan := parseSummary(t, stdout.String())
	require.Positive(t, total)
	assert.Zero(t, noSpan)

	host := hostname(t)
	seen := map[string]int{}
	for _, s := range got.spans() {
		res := attrs(s.res.Attributes())
		assert.Equal(t, host, res["host.name"].Str())
		assert.Equal(t, pcommon.ValueTypeInt, res["process.pid"].Type())
		switch s.span.Name() {
		case "llm_request":
			seen["vllm"]++
			assert.Equal(t, "vllm.llm_engine", s.scope)
			assert.Equal(t, ptrace.SpanKindServer, s.span.Kind())
			a := attrs(s.span.Attributes())
			for k, typ := range vllmAttributes {
				require.Contains(t, a, k)
				assert.Equal(t, typ, a[k].Type(), k)
			}
			if v, ok := res["gpu.uuid"]; ok {
				assert.Regexp(t, `^GPU-simulated-h200-1-\d\d$`, v.Str())
			}
		case "chat_completions":
			seen["tgi"]++
			assert.Equal(t, pcommon.ValueTypeStr, attrs(s.span.Attributes())["inference_time"].Type())
		case "compute":
			seen["triton"]++
			assert.Equal(t, 4, s.span.Events().Len())
		}
	}
	for f, n := range counts {
		assert.Equal(t, n, seen[f], "every %s request arrived", f)
	}
	assert.Equal(t, cfg.Families, keysInOrder(counts, cfg.Families))
}

func keysInOrder(m map[string]int, order []string) []string {
	var out []string
	for _, k := range order {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// engineRun runs the engine scenario of args over [from, from+ticks*tick)
// on a fake clock against an OTLP/gRPC receiver, writing the truth, and
// returns what arrived, the truth, the generator and the node it followed.
func engineRun(t *testing.T, from int64, ticks int, args ...string) (*grpcSink, *infersim.Truth, *generator, *infersim.Node) {
	t.Helper()
	g, addr := serveGRPC(t)
	path := filepath.Join(t.TempDir(), "truth.jsonl")
	cfg, err := parseFlags(append(args, "--endpoint", addr, "--truth", path), io.Discard)
	require.NoError(t, err)
	x, err := newExporter(cfg, quiet())
	require.NoError(t, err)
	gen, err := newGenerator(cfg, from, x, "gpu-node-1", log.New(io.Discard, "", 0), nil)
	require.NoError(t, err)
	clock := make(chan time.Time)
	go func() {
		defer close(clock)
		for i := 1; i <= ticks; i++ {
			clock <- time.Unix(0, from+int64(settle)+int64(i)*int64(tick))
		}
	}()
	require.NoError(t, gen.loop(t.Context(), clock))
	require.NoError(t, gen.close())
	assert.Zero(t, x.dropped)

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	truth, err := infersim.ReadTruth(f)
	require.NoError(t, err)

	model, err := nvmlsim.LookupModel(cfg.SimModel)
	require.NoError(t, err)
	sc, err := infersim.LookupScenario(cfg.Scenario, cfg.SimGPUs, model.Hardware())
	require.NoError(t, err)
	return g, truth, gen, infersim.NewNode(model.Hardware(), sc, cfg.SimSeed)
}

// TestEngineScenarioEndToEnd runs the mixed scenario (vLLM with client
// spans, SGLang, TGI, TensorRT-LLM) for 20 simulated seconds and checks that
// every request's spans arrived in its own trace, and that the truth file
// has the node's header, requests and bins.
func TestEngineScenarioEndToEnd(t *testing.T) {
	const ticks = 100
	got, truth, gen, node := engineRun(t, testStart, ticks, "--scenario", "mixed", "--sim-seed", "4")
	to := testStart + ticks*int64(tick)
	want := node.Finished(testStart, to)
	require.NotEmpty(t, want)

	byID := map[pcommon.SpanID]spanRec{}
	traces := map[pcommon.TraceID]int{}
	for _, s := range got.spans() {
		byID[s.span.SpanID()] = s
		traces[s.span.TraceID()]++
	}
	families := map[string]int{}
	for _, r := range want {
		e := node.Scenario().Engines[r.Engine]
		s, ok := byID[r.SpanID()]
		require.True(t, ok, "%s request %d: its request span arrived", e.Name, r.Seq)
		assert.Equal(t, pcommon.TraceID(r.TraceID()), s.span.TraceID())
		families[e.Family]++
		if e.ClientSpans {
			assert.False(t, s.span.ParentSpanID().IsEmpty(), "%s: under the client's span", e.Name)
		}
	}
	assert.Len(t, traces, len(want), "one trace per request, nothing else")
	for f, n := range families {
		assert.Equal(t, int64(n), gen.counts[f], f)
	}
	assert.Len(t, families, 4)

	// The truth: the header describes the node, the requests are the node's
	// and the bins every GPU's, whole, from the first to the last that ended.
	h := truth.Header
	var uuids []string
	for i := range 8 {
		uuids = append(uuids, nvmlsim.SimulatedUUID("h200", 4, i))
	}
	assert.Equal(t, node.Header(4, uuids, "gpu-node-1"), h)
	assert.Equal(t, "mixed", h.Scenario)
	assert.Equal(t, uint64(4), h.Seed)
	assert.Equal(t, "h200", h.GPUModel)
	assert.Equal(t, "gpu-node-1", h.Host)
	assert.Equal(t, int64(infersim.BinWidth), h.BinWidthNS)
	require.Len(t, h.GPUIDs, 8)
	assert.Equal(t, nvmlsim.SimulatedUUID("h200", 4, 7), h.GPUIDs[7])
	require.Len(t, h.Engines, len(node.Scenario().Engines))
	for i, e := range node.Scenario().Engines {
		assert.Equal(t, infersim.TruthEngine{Name: e.Name, Family: e.Family, Match: e.Match, LLM: e.LLM.Name, GPUs: e.GPUs}, h.Engines[i])
	}
	require.Len(t, truth.Requests, len(want))
	for i, r := range want {
		assert.Equal(t, r.ToTruth(), truth.Requests[i])
	}
	width := int64(infersim.BinWidth)
	var wantBins []infersim.TruthBin
	for gpu := range 8 {
		for _, b := range node.Bins(gpu, (testStart+width-1)/width*width, to/width*width) {
			wantBins = append(wantBins, b.ToTruth())
		}
	}
	order := func(a, b infersim.TruthBin) int {
		if a.Start != b.Start {
			return int(a.Start - b.Start)
		}
		return a.GPU - b.GPU
	}
	slices.SortFunc(wantBins, order)
	gotBins := slices.Clone(truth.Bins)
	slices.SortFunc(gotBins, order)
	assert.Equal(t, wantBins, gotBins)
	assert.Len(t, gotBins, 8*int(ticks*int64(tick)/width))
}

// TestAbortedAtTheEpisodesEnd runs long_context (vLLM, whose KV cache fills)
// over the end of an episode, where what is still in the engines is
// aborted: in the truth with their energy, without a span.
func TestAbortedAtTheEpisodesEnd(t *testing.T) {
	episodeEnd := time.Date(2026, 11, 30, 12, 10, 0, 0, time.UTC).UnixNano()
	from := episodeEnd - int64(2*time.Second) + int64(37*time.Millisecond) + 123
	got, truth, gen, node := engineRun(t, from, 15, "--scenario", "long_context", "--sim-seed", "2")
	aborted := 0
	for _, r := range node.Finished(from, from+15*int64(tick)) {
		if r.Finish == infersim.FinishAbort {
			aborted++
			assert.Equal(t, episodeEnd-1, r.Finished, "aborted in the episode's last nanosecond")
		}
	}
	require.Positive(t, aborted)
	assert.Equal(t, int64(aborted), gen.noSpan)
	inTruth, withEnergy := 0, 0
	for _, r := range truth.Requests {
		if r.Finish == infersim.FinishAbort {
			inTruth++
			if r.Scheduled != 0 {
				assert.Positive(t, r.Energy, "an aborted request that ran drew energy")
				withEnergy++
			}
		}
	}
	assert.Equal(t, aborted, inTruth)
	assert.Positive(t, withEnergy)
	assert.Equal(t, len(truth.Requests)-aborted, len(got.spans()))
	assert.True(t, strings.HasSuffix(gen.summary(), " aborted_without_span="+strconv.Itoa(aborted)))
}

func TestExportRetries(t *testing.T) {
	td := ptrace.NewTraces()
	td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("x")
	fast := func(x *exporter) *exporter {
		x.backoff, x.timeout = time.Millisecond, 500*time.Millisecond
		return x
	}
	grpcExporter := func(t *testing.T, addr string) *exporter {
		cfg, err := parseFlags([]string{"--endpoint", addr}, io.Discard)
		require.NoError(t, err)
		x, err := newExporter(cfg, quiet())
		require.NoError(t, err)
		t.Cleanup(func() { _ = x.close() })
		return fast(x)
	}

	t.Run("grpc unavailable, then accepted", func(t *testing.T) {
		g, addr := serveGRPC(t)
		g.code = codes.Unavailable
		g.failures.Store(2)
		x := grpcExporter(t, addr)
		x.export(t.Context(), td)
		assert.Equal(t, int64(2), x.retries)
		assert.Equal(t, int64(1), x.spans)
		assert.Zero(t, x.dropped)
		assert.Len(t, g.spans(), 1)
	})
	t.Run("grpc invalid argument is not retried", func(t *testing.T) {
		g, addr := serveGRPC(t)
		g.code = codes.InvalidArgument
		g.failures.Store(1)
		x := grpcExporter(t, addr)
		x.export(t.Context(), td)
		assert.Equal(t, int32(1), g.calls.Load())
		assert.Equal(t, int64(1), x.dropped)
		assert.Equal(t, int64(1), x.failed)
	})
	t.Run("grpc nobody listening: bounded", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		x := grpcExporter(t, addr)
		start := time.Now()
		x.export(t.Context(), td)
		assert.Less(t, time.Since(start), time.Duration(x.attempts)*(x.timeout+exportMaxBackoff))
		assert.Equal(t, int64(x.attempts-1), x.retries)
		assert.Equal(t, int64(1), x.dropped)
	})
	t.Run("http", func(t *testing.T) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch calls.Add(1) {
			case 1:
				http.Error(w, "busy", http.StatusServiceUnavailable)
			case 2:
				w.WriteHeader(http.StatusOK)
			default:
				http.Error(w, "bad", http.StatusBadRequest)
			}
		}))
		defer srv.Close()
		cfg, err := parseFlags([]string{"--protocol", "http", "--endpoint", strings.TrimPrefix(srv.URL, "http://")}, io.Discard)
		require.NoError(t, err)
		x, err := newExporter(cfg, quiet())
		require.NoError(t, err)
		fast(x)
		x.export(t.Context(), td)
		assert.Equal(t, int64(1), x.retries, "503 is retried")
		assert.Equal(t, int64(1), x.spans)
		x.export(t.Context(), td)
		assert.Equal(t, int64(1), x.retries, "400 is not")
		assert.Equal(t, int64(1), x.dropped)
	})
	t.Run("a cancelled context stops the retries", func(t *testing.T) {
		g, addr := serveGRPC(t)
		g.code = codes.Unavailable
		g.failures.Store(100)
		x := grpcExporter(t, addr)
		x.backoff = time.Hour
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		x.export(ctx, td)
		assert.Equal(t, int64(1), x.dropped)
	})
}

func TestErrorLoggerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	l := &errorLogger{logger: log.New(&buf, "", 0), every: 10 * time.Second, now: func() time.Time { return now }}
	l.Handle(io.EOF)
	l.Handle(io.EOF)
	now = now.Add(11 * time.Second)
	l.Handle(io.ErrUnexpectedEOF)
	assert.Equal(t, "EOF\nunexpected EOF (and 1 more errors in the last 11s)\n", buf.String())
}

func TestUntilClearOfWindowEdge(t *testing.T) {
	minute := time.Unix(1_790_000_040, 0) // on a window edge
	d := 1200 * time.Millisecond
	for _, tc := range []struct {
		name string
		now  time.Time
		want time.Duration
	}{
		{"on the edge", minute, 2 * time.Second},
		{"just after it", minute.Add(500 * time.Millisecond), 1500 * time.Millisecond},
		{"clear", minute.Add(2 * time.Second), 0},
		{"last clear start", minute.Add(time.Minute - 2*time.Second - d), 0},
		{"would end too near the next", minute.Add(time.Minute - 2*time.Second), 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, untilClearOfWindowEdge(tc.now, d))
		})
	}
}
