package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// testStart is an arbitrary moment, not on a schedule window's edge.
var testStart = time.Date(2026, 11, 30, 12, 0, 7, 0, time.UTC).UnixNano()

// recorder keeps the requests a legacy source serves.
type recorder struct {
	requestSource
	got []nvmlsim.Request
}

func (r *recorder) Requests(from, to int64) []nvmlsim.Request {
	out := r.requestSource.Requests(from, to)
	r.got = append(r.got, out...)
	return out
}

// emitted runs the load generator configured by args over [testStart,
// testStart+span) of its schedule, tick by tick as the loop does, and
// returns the spans it exported, the requests it emitted and the generator.
func emitted(t *testing.T, span time.Duration, args ...string) ([]spanRec, []nvmlsim.Request, *generator) {
	t.Helper()
	cfg, err := parseFlags(args, io.Discard)
	require.NoError(t, err)
	x, got := captureExporter()
	g, err := newGenerator(cfg, testStart, x, hostname(t), log.New(io.Discard, "", 0), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	src := g.src.(*legacySource)
	rec := &recorder{requestSource: src.inner}
	src.inner = rec
	for to := testStart + int64(tick); to <= testStart+int64(span); to += int64(tick) {
		require.NoError(t, g.tick(t.Context(), to))
	}
	require.NotEmpty(t, rec.got)
	require.NoError(t, g.close())
	return got.spans(), rec.got, g
}

// captureExporter is an exporter that keeps what it is given.
func captureExporter() (*exporter, *sink) {
	got := &sink{}
	return &exporter{
		send: func(_ context.Context, req ptraceotlp.ExportRequest) (int64, error) {
			got.add(req.Traces())
			return 0, nil
		},
		close:    func() error { return nil },
		sleep:    sleepCtx,
		attempts: 1, timeout: time.Second,
		errors: &errorLogger{logger: log.New(io.Discard, "", 0), every: time.Second, now: time.Now},
	}, got
}

func attrs(m pcommon.Map) map[string]pcommon.Value {
	out := map[string]pcommon.Value{}
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}

// vllmAttributes are the attributes of vLLM V1's llm_request and their types.
var vllmAttributes = map[string]pcommon.ValueType{
	"gen_ai.latency.time_in_queue":           pcommon.ValueTypeDouble,
	"gen_ai.latency.time_to_first_token":     pcommon.ValueTypeDouble,
	"gen_ai.latency.time_in_model_prefill":   pcommon.ValueTypeDouble,
	"gen_ai.latency.time_in_model_decode":    pcommon.ValueTypeDouble,
	"gen_ai.latency.time_in_model_inference": pcommon.ValueTypeDouble,
	"gen_ai.latency.e2e":                     pcommon.ValueTypeDouble,
	"gen_ai.usage.prompt_tokens":             pcommon.ValueTypeInt,
	"gen_ai.usage.completion_tokens":         pcommon.ValueTypeInt,
	"gen_ai.request.id":                      pcommon.ValueTypeStr,
	"gen_ai.request.n":                       pcommon.ValueTypeInt,
	"gen_ai.request.temperature":             pcommon.ValueTypeDouble,
	"gen_ai.request.top_p":                   pcommon.ValueTypeDouble,
	"gen_ai.request.max_tokens":              pcommon.ValueTypeInt,
	"gen_ai.response.finish_reasons":         pcommon.ValueTypeStr,
}

// ns converts seconds back to nanoseconds as the gpuviz processor does.
func ns(s float64) int64 { return int64(math.Round(s * 1e9)) }

func start(s ptrace.Span) int64 { return int64(s.StartTimestamp()) }
func end(s ptrace.Span) int64   { return int64(s.EndTimestamp()) }

func TestVLLMSpansAreShapedLikeVLLMs(t *testing.T) {
	spans, reqs, _ := emitted(t, 2*time.Minute, "--scenario", "sequential", "--sim-gpus", "4", "--sim-seed", "3")
	require.Len(t, spans, len(reqs))
	model, err := nvmlsim.LookupModel("h200")
	require.NoError(t, err)
	finishes := map[string]int{}
	for _, rec := range spans {
		s := rec.span
		assert.Equal(t, "llm_request", s.Name())
		assert.Equal(t, ptrace.SpanKindServer, s.Kind())
		assert.Equal(t, "vllm.llm_engine", rec.scope)
		assert.True(t, s.ParentSpanID().IsEmpty(), "a root span: no incoming traceparent")
		assert.Zero(t, s.Events().Len())

		a := attrs(s.Attributes())
		require.Len(t, a, len(vllmAttributes), "exactly vLLM's attributes")
		for k, typ := range vllmAttributes {
			require.Contains(t, a, k)
			assert.Equal(t, typ, a[k].Type(), k)
		}
		var reasons []string
		require.NoError(t, json.Unmarshal([]byte(a["gen_ai.response.finish_reasons"].Str()), &reasons))
		require.Len(t, reasons, 1)
		finishes[reasons[0]]++
		if reasons[0] == "length" {
			assert.Equal(t, a["gen_ai.request.max_tokens"].Int(), a["gen_ai.usage.completion_tokens"].Int())
		} else {
			assert.Equal(t, "stop", reasons[0])
			assert.Greater(t, a["gen_ai.request.max_tokens"].Int(), a["gen_ai.usage.completion_tokens"].Int())
		}
		assert.Regexp(t, `^chatcmpl-[0-9a-f]{32}$`, a["gen_ai.request.id"].Str())
		assert.Equal(t, int64(1), a["gen_ai.request.n"].Int())

		queue := a["gen_ai.latency.time_in_queue"].Double()
		prefill := a["gen_ai.latency.time_in_model_prefill"].Double()
		decode := a["gen_ai.latency.time_in_model_decode"].Double()
		e2e := a["gen_ai.latency.e2e"].Double()
		assert.InDelta(t, queue+prefill+decode, e2e, 1e-6, "e2e = queue + prefill + decode")
		assert.InDelta(t, prefill+decode, a["gen_ai.latency.time_in_model_inference"].Double(), 1e-6)
		assert.InDelta(t, queue+prefill, a["gen_ai.latency.time_to_first_token"].Double(), 1e-6)
		assert.Equal(t, start(s)+ns(e2e), end(s), "end = start + e2e")

		// The phases lie exactly on the simulated GPU's segments.
		res := attrs(rec.res.Attributes())
		gpu := int(res["process.pid"].Int()) - int(nvmlsim.SimulatedPID(0))
		require.True(t, gpu >= 0 && gpu < 4, "process.pid names a simulated worker")
		sched := nvmlsim.NewSchedule(model, 3, gpu)
		prefillStart := start(s) + ns(queue)
		p := sched.At(prefillStart)
		assert.Equal(t, nvmlsim.PhasePrefill, p.Phase)
		assert.Equal(t, p.Start, prefillStart)
		assert.Equal(t, p.End, prefillStart+ns(prefill))
		d := sched.At(p.End)
		assert.Equal(t, nvmlsim.PhaseDecode, d.Phase)
		assert.Equal(t, d.Start, p.End)
		assert.Equal(t, d.End, p.End+ns(decode))
		assert.Equal(t, d.End, end(s))
		assert.Equal(t, nvmlsim.PhaseIdle, sched.At(start(s)).Phase, "queued while the GPU idled")
	}
	assert.Positive(t, finishes["stop"])
	assert.Positive(t, finishes["length"])
}

func TestSimulatedModeEmitsEveryRequestOfEveryGPUOnce(t *testing.T) {
	_, reqs, g := emitted(t, 3*time.Minute, "--scenario", "sequential", "--sim-gpus", "3", "--sim-model", "b200", "--sim-seed", "9")
	model, err := nvmlsim.LookupModel("b200")
	require.NoError(t, err)
	var want []nvmlsim.Request
	for gpu := range 3 {
		want = append(want, nvmlsim.NewSchedule(model, 9, gpu).Requests(testStart, testStart+int64(3*time.Minute))...)
	}
	sortByEnd(want)
	assert.Equal(t, want, reqs)
	assert.Equal(t, int64(len(want)), g.counts["vllm"])
	assert.Equal(t, "requests emitted: vllm="+strconv.Itoa(len(want))+" total="+strconv.Itoa(len(want))+" aborted_without_span=0", g.summary())
}

func TestResourcePerMatchMode(t *testing.T) {
	host := hostname(t)
	for _, tc := range []struct {
		match     string
		pidOfGPU  bool
		gpuUUID   bool
		resources func(gpus int) bool
	}{
		{matchProcess, true, false, func(n int) bool { return n > 4 }},
		{matchAttribute, false, true, func(n int) bool { return n > 4 }},
		{matchHost, false, false, func(n int) bool { return n == 1 }},
	} {
		t.Run(tc.match, func(t *testing.T) {
			spans, _, _ := emitted(t, time.Minute, "--scenario", "sequential", "--match", tc.match, "--sim-gpus", "8", "--sim-seed", "2", "--service", "my-vllm")
			resources := map[string]bool{}
			for _, rec := range spans {
				res := attrs(rec.res.Attributes())
				assert.Equal(t, "my-vllm", res["service.name"].Str())
				assert.Equal(t, host, res["host.name"].Str())
				require.Equal(t, pcommon.ValueTypeInt, res["process.pid"].Type())
				pid := res["process.pid"].Int()
				if tc.pidOfGPU {
					gpu := int(pid) - int(nvmlsim.SimulatedPID(0))
					assert.True(t, gpu >= 0 && gpu < 8)
				} else {
					assert.Equal(t, int64(os.Getpid()), pid)
				}
				key := strconv.FormatInt(pid, 10)
				uuid, hint := res[inferspans.GPUUUIDKey]
				assert.Equal(t, tc.gpuUUID, hint)
				if hint {
					assert.Regexp(t, `^GPU-simulated-h200-2-0[0-7]$`, uuid.Str())
					key += "/" + uuid.Str()
				}
				assert.NotContains(t, attrs(rec.span.Attributes()), "hw.id", "the hint is on the resource")
				resources[key] = true
			}
			assert.True(t, tc.resources(len(resources)), "%d resources", len(resources))
		})
	}
}

func TestAttributeModeNamesTheRequestsGPU(t *testing.T) {
	spans, _, _ := emitted(t, time.Minute, "--scenario", "sequential", "--match", "attribute", "--sim-gpus", "4", "--sim-seed", "5", "--sim-model", "H100")
	model, err := nvmlsim.LookupModel("h100")
	require.NoError(t, err)
	for _, rec := range spans {
		id := attrs(rec.res.Attributes())[inferspans.GPUUUIDKey].Str()
		gpu, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
		require.NoError(t, err)
		assert.Equal(t, nvmlsim.SimulatedUUID("h100", 5, gpu), id)
		// The span's prefill is a prefill of that GPU.
		prefillStart := start(rec.span) + ns(attrs(rec.span.Attributes())["gen_ai.latency.time_in_queue"].Double())
		seg := nvmlsim.NewSchedule(model, 5, gpu).At(prefillStart)
		assert.Equal(t, nvmlsim.PhasePrefill, seg.Phase)
		assert.Equal(t, seg.Start, prefillStart)
	}
}

// parseRust reads a Rust Debug duration exactly (test side).
func parseRust(t *testing.T, s string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		mult   int64
	}{{"ms", 1e6}, {"µs", 1e3}, {"ns", 1}, {"s", 1e9}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		whole, frac, _ := strings.Cut(num, ".")
		w, err := strconv.ParseInt(whole, 10, 64)
		require.NoError(t, err, s)
		v := w * u.mult
		scale := u.mult
		for _, c := range frac {
			scale /= 10
			require.Positive(t, scale, "no digits below a nanosecond: %s", s)
			v += int64(c-'0') * scale
		}
		return v
	}
	t.Fatalf("not a Rust duration: %q", s)
	return 0
}

func TestTGISpansAreShapedLikeTGIs(t *testing.T) {
	spans, reqs, _ := emitted(t, time.Minute, "--scenario", "sequential", "--families", "tgi", "--sim-gpus", "2")
	require.Len(t, spans, 2*len(reqs))
	servers := map[pcommon.SpanID]ptrace.Span{}
	for _, rec := range spans {
		if rec.span.Name() == "POST /v1/chat/completions" {
			servers[rec.span.SpanID()] = rec.span
		}
	}
	byPrefill := map[int64]nvmlsim.Request{}
	for _, r := range reqs {
		byPrefill[r.PrefillStart] = r
	}
	handlers := 0
	for _, rec := range spans {
		s := rec.span
		assert.Equal(t, "text-generation-inference.router", attrs(rec.res.Attributes())["service.name"].Str())
		assert.Equal(t, "opentelemetry-otlp", rec.scope)
		if s.Name() != "chat_completions" {
			assert.Equal(t, ptrace.SpanKindServer, s.Kind())
			continue
		}
		handlers++
		assert.Equal(t, ptrace.SpanKindInternal, s.Kind())
		parent, ok := servers[s.ParentSpanID()]
		require.True(t, ok, "the handler runs under the HTTP server span")
		assert.True(t, start(parent) <= start(s) && end(parent) >= end(s))

		a := attrs(s.Attributes())
		for _, k := range []string{"total_time", "validation_time", "queue_time", "inference_time", "time_per_token", "seed", "code.namespace", "code.filepath", "thread.name"} {
			require.Contains(t, a, k)
			assert.Equal(t, pcommon.ValueTypeStr, a[k].Type(), k)
		}
		for _, k := range []string{"code.lineno", "thread.id", "busy_ns", "idle_ns"} {
			assert.Equal(t, pcommon.ValueTypeInt, a[k].Type(), k)
		}
		assert.Regexp(t, `^Some\(\d+\)$`, a["seed"].Str())
		for _, k := range []string{"total_time", "validation_time", "queue_time", "inference_time", "time_per_token"} {
			assert.Regexp(t, `^\d+(\.\d*[1-9])?(s|ms|µs|ns)$`, a[k].Str(), k)
		}
		validation := parseRust(t, a["validation_time"].Str())
		queue := parseRust(t, a["queue_time"].Str())
		inference := parseRust(t, a["inference_time"].Str())
		prefillStart := start(s) + validation + queue
		r, ok := byPrefill[prefillStart]
		require.True(t, ok, "validation and queue end exactly at a prefill's start")
		assert.Equal(t, r.Arrival, start(s))
		assert.Equal(t, r.End, prefillStart+inference, "inference runs to the decode's end")
		assert.Equal(t, r.End, end(s))
		assert.Equal(t, r.End-start(s), parseRust(t, a["total_time"].Str()))
		assert.Equal(t, inference/r.OutputTokens, parseRust(t, a["time_per_token"].Str()))
		assert.Positive(t, validation)
	}
	assert.Equal(t, len(reqs), handlers)
}

func TestTritonSpansAreShapedLikeTritons(t *testing.T) {
	spans, reqs, _ := emitted(t, time.Minute, "--scenario", "sequential", "--families", "triton", "--sim-gpus", "2")
	require.Len(t, spans, 3*len(reqs))
	byTrace := map[pcommon.TraceID][]spanRec{}
	for _, rec := range spans {
		byTrace[rec.span.TraceID()] = append(byTrace[rec.span.TraceID()], rec)
		assert.Equal(t, ptrace.SpanKindServer, rec.span.Kind(), rec.span.Name())
		assert.Equal(t, "triton-server", rec.scope)
		assert.Equal(t, "triton-inference-server", attrs(rec.res.Attributes())["service.name"].Str())
	}
	require.Len(t, byTrace, len(reqs))
	byPrefill := map[int64]nvmlsim.Request{}
	for _, r := range reqs {
		byPrefill[r.PrefillStart] = r
	}
	order := []string{"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"}
	traceIDs := map[int64]bool{}
	for _, group := range byTrace {
		named := map[string]ptrace.Span{}
		for _, rec := range group {
			named[rec.span.Name()] = rec.span
		}
		root, model, compute := named["InferRequest"], named["tensorrt_llm"], named["compute"]
		require.Equal(t, "InferRequest", root.Name())
		require.Equal(t, "tensorrt_llm", model.Name())
		require.Equal(t, "compute", compute.Name())
		assert.True(t, root.ParentSpanID().IsEmpty())
		assert.Equal(t, root.SpanID(), model.ParentSpanID())
		assert.Equal(t, model.SpanID(), compute.ParentSpanID())

		a := attrs(model.Attributes())
		assert.Equal(t, "tensorrt_llm", a["triton.model_name"].Str())
		assert.Equal(t, pcommon.ValueTypeInt, a["triton.model_version"].Type())
		assert.Equal(t, pcommon.ValueTypeInt, a["triton.trace_id"].Type())
		assert.Equal(t, pcommon.ValueTypeInt, a["triton.trace_parent_id"].Type())
		assert.Equal(t, pcommon.ValueTypeStr, a["triton.request_id"].Type())
		assert.False(t, traceIDs[a["triton.trace_id"].Int()], "Triton trace ids are unique")
		traceIDs[a["triton.trace_id"].Int()] = true
		assert.Zero(t, compute.Attributes().Len(), "Triton's compute span has no attributes")

		events := map[string]int64{}
		var names []string
		for _, s := range []ptrace.Span{model, compute} {
			for _, e := range s.Events().All() {
				events[e.Name()] = int64(e.Timestamp())
				names = append(names, e.Name())
				assert.False(t, int64(e.Timestamp()) < start(s) || int64(e.Timestamp()) > end(s), "%s inside %s", e.Name(), s.Name())
			}
		}
		assert.ElementsMatch(t, order, names)
		for i := 1; i < len(order); i++ {
			assert.LessOrEqual(t, events[order[i-1]], events[order[i]], "%s before %s", order[i-1], order[i])
		}
		var rootEvents []string
		for _, e := range root.Events().All() {
			rootEvents = append(rootEvents, e.Name())
		}
		assert.Equal(t, []string{"HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"}, rootEvents)

		r, ok := byPrefill[events["COMPUTE_START"]]
		require.True(t, ok, "compute starts exactly at a prefill's start")
		assert.Equal(t, r.PrefillStart, start(compute))
		assert.Equal(t, r.End, end(compute))
		assert.Equal(t, r.End, events["COMPUTE_END"])
		assert.Equal(t, r.Arrival, events["REQUEST_START"])
		assert.Equal(t, r.Arrival, start(model))
	}
}

func TestFamiliesShareTheSchedule(t *testing.T) {
	spans, reqs, g := emitted(t, 3*time.Minute, "--scenario", "sequential", "--families", "vllm,tgi,triton", "--sim-gpus", "4")
	var total int64
	for _, f := range legacyFamilies {
		assert.Positive(t, g.counts[f], f)
		total += g.counts[f]
	}
	assert.Equal(t, int64(len(reqs)), total, "each request in one family")
	want := g.counts["vllm"] + 2*g.counts["tgi"] + 3*g.counts["triton"]
	assert.Len(t, spans, int(want))
	assert.True(t, strings.HasPrefix(g.summary(), "requests emitted: vllm="))
	// One server per (family, GPU) in process mode.
	assert.LessOrEqual(t, len(g.src.(*legacySource).servers), 3*4)
}
