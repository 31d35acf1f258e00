package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
)

// otlpTypes are the OTLP value types of the SDK's attribute types.
var otlpTypes = map[attribute.Type]pcommon.ValueType{
	attribute.FLOAT64: pcommon.ValueTypeDouble,
	attribute.INT64:   pcommon.ValueTypeInt,
	attribute.STRING:  pcommon.ValueTypeStr,
}

func TestFlagDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, config{
		Endpoint: "127.0.0.1:4317", Protocol: "grpc", Insecure: true, Mode: "simulated",
		SimModel: "h200", SimGPUs: 8, SimSeed: 1, Match: "process", Families: []string{"vllm"},
		Rate: 5, Concurrency: 16, Service: "vllm",
	}, cfg)

	cfg, err = parseFlags([]string{"--protocol", "http"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:4318", cfg.Endpoint, "OTLP/HTTP's port when no endpoint is given")
	cfg, err = parseFlags([]string{"--protocol=http", "--endpoint=http://collector:9999/", "--insecure=false", "--families", "tgi, triton,tgi", "--duration", "30s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "collector:9999", cfg.Endpoint)
	assert.False(t, cfg.Insecure)
	assert.Equal(t, []string{"tgi", "triton"}, cfg.Families)
	assert.Equal(t, 30*time.Second, cfg.Duration)
}

func TestFlagErrors(t *testing.T) {
	for args, want := range map[string]string{
		"--protocol udp":                     `--protocol "udp"`,
		"--mode replay":                      `--mode "replay"`,
		"--match pid":                        `--match "pid"`,
		"--families vllm,sglang":             `unknown family "sglang"`,
		"--families ,":                       "name at least one",
		"--sim-model h300":                   `unknown simulated GPU model "h300"`,
		"--sim-gpus 0":                       "--sim-gpus 0: want 1 to 64",
		"--sim-gpus 65":                      "--sim-gpus 65",
		"--duration -1s":                     "must not be negative",
		"--mode synthetic --rate 0":          "--rate 0",
		"--mode synthetic --concurrency 0":   "--concurrency 0",
		"--mode synthetic --match attribute": "needs --gpu-uuid",
		"--endpoint http://host:1/v1/traces": "want host:port",
		"--service=":                         "--service must not be empty",
		"extra":                              "unexpected arguments: extra",
		"--sim-seed -1":                      "invalid value",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		assert.ErrorContains(t, err, want, args)
	}
	// Synthetic mode does not look at the simulation's flags.
	_, err := parseFlags([]string{"--mode", "synthetic", "--sim-gpus", "0"}, io.Discard)
	assert.NoError(t, err)
}

// sink collects what OTLP exports bring.
type sink struct {
	mu     sync.Mutex
	traces []ptrace.Traces
}

func (s *sink) add(td ptrace.Traces) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.traces = append(s.traces, td)
}

// spans flattens what arrived: each span with its resource and scope.
func (s *sink) spans() (out []struct {
	res   pcommon.Resource
	scope string
	span  ptrace.Span
},
) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, td := range s.traces {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					out = append(out, struct {
						res   pcommon.Resource
						scope string
						span  ptrace.Span
					}{rs.Resource(), ss.Scope().Name(), sp})
				}
			}
		}
	}
	return out
}

type grpcSink struct {
	ptraceotlp.UnimplementedGRPCServer
	*sink
}

func (g *grpcSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	td := ptrace.NewTraces()
	req.Traces().CopyTo(td)
	g.add(td)
	return ptraceotlp.NewExportResponse(), nil
}

// TestRunExportsOverOTLP runs the whole program briefly against an OTLP/HTTP
// and an OTLP/gRPC receiver and checks what arrives on the wire.
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
		runBriefly(t, got, "--protocol", "http", "--endpoint", endpoint, "--sim-gpus", "64", "--match", "attribute")
	})
	t.Run("grpc", func(t *testing.T) {
		t.Parallel()
		got := &sink{}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		gs := grpc.NewServer()
		ptraceotlp.RegisterGRPCServer(gs, &grpcSink{sink: got})
		go func() { _ = gs.Serve(lis) }()
		defer gs.Stop()
		runBriefly(t, got, "--endpoint", lis.Addr().String(), "--sim-gpus", "64", "--families", "vllm,tgi,triton")
	})
}

var summaryRE = regexp.MustCompile(`^requests emitted:((?: [a-z]+=\d+)+) total=(\d+)\n$`)

func runBriefly(t *testing.T, got *sink, args ...string) {
	t.Helper()
	cfg, err := parseFlags(append(args, "--duration", "1200ms"), io.Discard)
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	start := time.Now()
	require.NoError(t, run(t.Context(), cfg, &stdout, log.New(&stderr, "", 0)))
	assert.Less(t, time.Since(start), 4*time.Second)
	assert.Contains(t, stderr.String(), "following 64 simulated h200 GPUs, seed 1")

	m := summaryRE.FindStringSubmatch(stdout.String())
	require.NotNil(t, m, "one summary line: %q", stdout.String())
	counts := map[string]int{}
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		counts[k], _ = strconv.Atoi(v)
	}
	total, _ := strconv.Atoi(m[2])
	require.Positive(t, total)

	host := hostname(t)
	seen := map[string]int{}
	for _, s := range got.spans() {
		hostAttr, _ := s.res.Attributes().Get("host.name")
		assert.Equal(t, host, hostAttr.Str())
		pid, _ := s.res.Attributes().Get("process.pid")
		assert.Equal(t, pcommon.ValueTypeInt, pid.Type())
		switch s.span.Name() {
		case "llm_request":
			seen[familyVLLM]++
			assert.Equal(t, "vllm.llm_engine", s.scope)
			assert.Equal(t, ptrace.SpanKindServer, s.span.Kind())
			a := s.span.Attributes()
			for k, typ := range vllmAttributes {
				v, ok := a.Get(k)
				require.True(t, ok, k)
				assert.Equal(t, otlpTypes[typ], v.Type(), k)
			}
			if v, ok := a.Get("hw.id"); ok {
				assert.Regexp(t, `^GPU-simulated-h200-1-\d\d$`, v.Str())
			}
		case "chat_completions":
			seen[familyTGI]++
			v, _ := s.span.Attributes().Get("inference_time")
			assert.Equal(t, pcommon.ValueTypeStr, v.Type())
		case "compute":
			seen[familyTriton]++
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
