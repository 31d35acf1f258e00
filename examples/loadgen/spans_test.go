package main

import (
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// testStart is an arbitrary moment, not on a schedule window's edge.
var testStart = time.Date(2026, 11, 30, 12, 0, 7, 0, time.UTC).UnixNano()

// emitted runs the load generator configured by args over [testStart,
// testStart+span) of its schedule and returns the spans it exported, and the
// requests it emitted.
func emitted(t *testing.T, span time.Duration, args ...string) ([]tracetest.SpanStub, []nvmlsim.Request, *emitter) {
	t.Helper()
	cfg, err := parseFlags(args, io.Discard)
	require.NoError(t, err)
	exp := tracetest.NewInMemoryExporter()
	newProvider := func(res *resource.Resource) *sdktrace.TracerProvider {
		return sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSyncer(sharedExporter{exp}))
	}
	em, src, err := setup(cfg, testStart, newProvider, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	var reqs []nvmlsim.Request
	// In ticks, as the loop asks.
	for from := testStart; from < testStart+int64(span); from += int64(tick) {
		for _, r := range src.Requests(from, from+int64(tick)) {
			em.emit(t.Context(), r)
			reqs = append(reqs, r)
		}
	}
	require.NotEmpty(t, reqs)
	require.NoError(t, em.shutdown(t.Context()))
	return exp.GetSpans(), reqs, em
}

func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}

// vllmAttributes are the attributes of vLLM V1's llm_request and their types.
var vllmAttributes = map[string]attribute.Type{
	"gen_ai.latency.time_in_queue":           attribute.FLOAT64,
	"gen_ai.latency.time_to_first_token":     attribute.FLOAT64,
	"gen_ai.latency.time_in_model_prefill":   attribute.FLOAT64,
	"gen_ai.latency.time_in_model_decode":    attribute.FLOAT64,
	"gen_ai.latency.time_in_model_inference": attribute.FLOAT64,
	"gen_ai.latency.e2e":                     attribute.FLOAT64,
	"gen_ai.usage.prompt_tokens":             attribute.INT64,
	"gen_ai.usage.completion_tokens":         attribute.INT64,
	"gen_ai.request.id":                      attribute.STRING,
	"gen_ai.request.n":                       attribute.INT64,
	"gen_ai.request.temperature":             attribute.FLOAT64,
	"gen_ai.request.top_p":                   attribute.FLOAT64,
	"gen_ai.request.max_tokens":              attribute.INT64,
	"gen_ai.response.finish_reasons":         attribute.STRING,
}

// ns converts seconds back to nanoseconds as the gpuviz processor does.
func ns(s float64) int64 { return int64(math.Round(s * 1e9)) }

func TestVLLMSpansAreShapedLikeVLLMs(t *testing.T) {
	spans, reqs, _ := emitted(t, 2*time.Minute, "--sim-gpus", "4", "--sim-seed", "3")
	require.Len(t, spans, len(reqs))
	model, err := nvmlsim.LookupModel("h200")
	require.NoError(t, err)
	finishes := map[string]int{}
	for _, s := range spans {
		assert.Equal(t, "llm_request", s.Name)
		assert.Equal(t, trace.SpanKindServer, s.SpanKind)
		assert.Equal(t, "vllm.llm_engine", s.InstrumentationScope.Name)
		assert.False(t, s.Parent.IsValid(), "a root span: no incoming traceparent")
		assert.Empty(t, s.Events)

		a := attrs(s.Attributes)
		require.Len(t, a, len(vllmAttributes), "exactly vLLM's attributes")
		for k, typ := range vllmAttributes {
			require.Contains(t, a, k)
			assert.Equal(t, typ, a[k].Type(), k)
		}
		var reasons []string
		require.NoError(t, json.Unmarshal([]byte(a["gen_ai.response.finish_reasons"].AsString()), &reasons))
		require.Len(t, reasons, 1)
		finishes[reasons[0]]++
		if reasons[0] == "length" {
			assert.Equal(t, a["gen_ai.request.max_tokens"].AsInt64(), a["gen_ai.usage.completion_tokens"].AsInt64())
		} else {
			assert.Equal(t, "stop", reasons[0])
			assert.Greater(t, a["gen_ai.request.max_tokens"].AsInt64(), a["gen_ai.usage.completion_tokens"].AsInt64())
		}
		assert.Regexp(t, `^chatcmpl-[0-9a-f]{32}$`, a["gen_ai.request.id"].AsString())
		assert.Equal(t, int64(1), a["gen_ai.request.n"].AsInt64())

		queue := a["gen_ai.latency.time_in_queue"].AsFloat64()
		prefill := a["gen_ai.latency.time_in_model_prefill"].AsFloat64()
		decode := a["gen_ai.latency.time_in_model_decode"].AsFloat64()
		e2e := a["gen_ai.latency.e2e"].AsFloat64()
		assert.InDelta(t, queue+prefill+decode, e2e, 1e-6, "e2e = queue + prefill + decode")
		assert.InDelta(t, prefill+decode, a["gen_ai.latency.time_in_model_inference"].AsFloat64(), 1e-6)
		assert.InDelta(t, queue+prefill, a["gen_ai.latency.time_to_first_token"].AsFloat64(), 1e-6)
		assert.Equal(t, s.StartTime.UnixNano()+ns(e2e), s.EndTime.UnixNano(), "end = start + e2e")

		// The phases lie exactly on the simulated GPU's segments.
		res := attrs(s.Resource.Attributes())
		gpu := int(res["process.pid"].AsInt64()) - int(nvmlsim.SimulatedPID(0))
		require.True(t, gpu >= 0 && gpu < 4, "process.pid names a simulated worker")
		sched := nvmlsim.NewSchedule(model, 3, gpu)
		prefillStart := s.StartTime.UnixNano() + ns(queue)
		p := sched.At(prefillStart)
		assert.Equal(t, nvmlsim.PhasePrefill, p.Phase)
		assert.Equal(t, p.Start, prefillStart)
		assert.Equal(t, p.End, prefillStart+ns(prefill))
		d := sched.At(p.End)
		assert.Equal(t, nvmlsim.PhaseDecode, d.Phase)
		assert.Equal(t, d.Start, p.End)
		assert.Equal(t, d.End, p.End+ns(decode))
		assert.Equal(t, d.End, s.EndTime.UnixNano())
		assert.Equal(t, nvmlsim.PhaseIdle, sched.At(s.StartTime.UnixNano()).Phase, "queued while the GPU idled")
	}
	assert.Positive(t, finishes["stop"])
	assert.Positive(t, finishes["length"])
}

func TestSimulatedModeEmitsEveryRequestOfEveryGPUOnce(t *testing.T) {
	_, reqs, em := emitted(t, 3*time.Minute, "--sim-gpus", "3", "--sim-model", "b200", "--sim-seed", "9")
	model, err := nvmlsim.LookupModel("b200")
	require.NoError(t, err)
	var want []nvmlsim.Request
	for gpu := range 3 {
		want = append(want, nvmlsim.NewSchedule(model, 9, gpu).Requests(testStart, testStart+int64(3*time.Minute))...)
	}
	sortByEnd(want)
	assert.Equal(t, want, reqs)
	assert.Equal(t, int64(len(want)), em.counts[familyVLLM])
	assert.Equal(t, "requests emitted: vllm="+strconv.Itoa(len(want))+" total="+strconv.Itoa(len(want)), em.summary())
}

func TestResourcePerMatchMode(t *testing.T) {
	host := hostname(t)
	for _, tc := range []struct {
		match    string
		pidOfGPU bool
		hwID     bool
	}{
		{matchProcess, true, false},
		{matchAttribute, false, true},
		{matchHost, false, false},
	} {
		t.Run(tc.match, func(t *testing.T) {
			spans, _, em := emitted(t, time.Minute, "--match", tc.match, "--sim-gpus", "8", "--sim-seed", "2", "--service", "my-vllm")
			pids := map[int64]bool{}
			for _, s := range spans {
				res := attrs(s.Resource.Attributes())
				assert.Equal(t, "my-vllm", res["service.name"].AsString())
				assert.Equal(t, host, res["host.name"].AsString())
				require.Equal(t, attribute.INT64, res["process.pid"].Type())
				pid := res["process.pid"].AsInt64()
				pids[pid] = true
				a := attrs(s.Attributes)
				if tc.pidOfGPU {
					gpu := int(pid) - int(nvmlsim.SimulatedPID(0))
					assert.True(t, gpu >= 0 && gpu < 8)
				} else {
					assert.Equal(t, int64(os.Getpid()), pid)
				}
				if tc.hwID {
					require.Contains(t, a, "hw.id")
					assert.Regexp(t, `^GPU-simulated-h200-2-0[0-7]$`, a["hw.id"].AsString())
				} else {
					assert.NotContains(t, a, "hw.id")
				}
			}
			if tc.pidOfGPU {
				assert.Greater(t, len(pids), 4, "one resource per GPU")
				assert.Len(t, em.order, len(pids))
			} else {
				assert.Len(t, pids, 1)
				assert.Len(t, em.order, 1, "one provider")
			}
		})
	}
}

func TestAttributeModeNamesTheRequestsGPU(t *testing.T) {
	spans, _, _ := emitted(t, time.Minute, "--match", "attribute", "--sim-gpus", "4", "--sim-seed", "5", "--sim-model", "H100")
	model, err := nvmlsim.LookupModel("h100")
	require.NoError(t, err)
	for _, s := range spans {
		a := attrs(s.Attributes)
		id := a["hw.id"].AsString()
		gpu, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
		require.NoError(t, err)
		assert.Equal(t, nvmlsim.SimulatedUUID("h100", 5, gpu), id)
		// The span's prefill is a prefill of that GPU.
		prefillStart := s.StartTime.UnixNano() + ns(a["gen_ai.latency.time_in_queue"].AsFloat64())
		seg := nvmlsim.NewSchedule(model, 5, gpu).At(prefillStart)
		assert.Equal(t, nvmlsim.PhasePrefill, seg.Phase)
		assert.Equal(t, seg.Start, prefillStart)
	}
}

func TestRustDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                  "0ns",
		12:                                 "12ns",
		999:                                "999ns",
		time.Microsecond:                   "1µs",
		850 * time.Microsecond:             "850µs",
		1500:                               "1.5µs",
		1_234_567:                          "1.234567ms",
		time.Millisecond:                   "1ms",
		1_000_001:                          "1.000001ms",
		999_999_999:                        "999.999999ms",
		time.Second:                        "1s",
		2500 * time.Millisecond:            "2.5s",
		time.Second + 1:                    "1.000000001s",
		3*time.Minute + 7*time.Millisecond: "180.007s",
		-time.Second:                       "0ns",
	} {
		assert.Equal(t, want, rustDuration(d), "%d", int64(d))
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
	spans, reqs, _ := emitted(t, time.Minute, "--families", "tgi", "--sim-gpus", "2")
	require.Len(t, spans, 2*len(reqs))
	servers := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		if s.Name == "POST /v1/chat/completions" {
			servers[s.SpanContext.SpanID()] = s
		}
	}
	byPrefill := map[int64]nvmlsim.Request{}
	for _, r := range reqs {
		byPrefill[r.PrefillStart] = r
	}
	handlers := 0
	for _, s := range spans {
		res := attrs(s.Resource.Attributes())
		assert.Equal(t, "text-generation-inference.router", res["service.name"].AsString())
		assert.Equal(t, "opentelemetry-otlp", s.InstrumentationScope.Name)
		if s.Name != "chat_completions" {
			assert.Equal(t, trace.SpanKindServer, s.SpanKind)
			continue
		}
		handlers++
		assert.Equal(t, trace.SpanKindInternal, s.SpanKind)
		parent, ok := servers[s.Parent.SpanID()]
		require.True(t, ok, "the handler runs under the HTTP server span")
		assert.True(t, !parent.StartTime.After(s.StartTime) && !parent.EndTime.Before(s.EndTime))

		a := attrs(s.Attributes)
		for _, k := range []string{"total_time", "validation_time", "queue_time", "inference_time", "time_per_token", "seed", "code.namespace", "code.filepath", "thread.name"} {
			require.Contains(t, a, k)
			assert.Equal(t, attribute.STRING, a[k].Type(), k)
		}
		for _, k := range []string{"code.lineno", "thread.id", "busy_ns", "idle_ns"} {
			assert.Equal(t, attribute.INT64, a[k].Type(), k)
		}
		assert.Regexp(t, `^Some\(\d+\)$`, a["seed"].AsString())
		for _, k := range []string{"total_time", "validation_time", "queue_time", "inference_time", "time_per_token"} {
			assert.Regexp(t, `^\d+(\.\d*[1-9])?(s|ms|µs|ns)$`, a[k].AsString(), k)
		}
		start := s.StartTime.UnixNano()
		validation := parseRust(t, a["validation_time"].AsString())
		queue := parseRust(t, a["queue_time"].AsString())
		inference := parseRust(t, a["inference_time"].AsString())
		prefillStart := start + validation + queue
		r, ok := byPrefill[prefillStart]
		require.True(t, ok, "validation and queue end exactly at a prefill's start")
		assert.Equal(t, r.Arrival, start)
		assert.Equal(t, r.End, prefillStart+inference, "inference runs to the decode's end")
		assert.Equal(t, r.End, s.EndTime.UnixNano())
		assert.Equal(t, r.End-start, parseRust(t, a["total_time"].AsString()))
		assert.Equal(t, inference/r.OutputTokens, parseRust(t, a["time_per_token"].AsString()))
		assert.Positive(t, validation)
	}
	assert.Equal(t, len(reqs), handlers)
}

func TestTritonSpansAreShapedLikeTritons(t *testing.T) {
	spans, reqs, _ := emitted(t, time.Minute, "--families", "triton", "--sim-gpus", "2")
	require.Len(t, spans, 3*len(reqs))
	byTrace := map[trace.TraceID][]tracetest.SpanStub{}
	for _, s := range spans {
		byTrace[s.SpanContext.TraceID()] = append(byTrace[s.SpanContext.TraceID()], s)
		assert.Equal(t, trace.SpanKindServer, s.SpanKind, s.Name)
		assert.Equal(t, "triton-server", s.InstrumentationScope.Name)
		assert.Equal(t, "triton-inference-server", attrs(s.Resource.Attributes())["service.name"].AsString())
	}
	require.Len(t, byTrace, len(reqs))
	byPrefill := map[int64]nvmlsim.Request{}
	for _, r := range reqs {
		byPrefill[r.PrefillStart] = r
	}
	order := []string{"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"}
	traceIDs := map[int64]bool{}
	for _, group := range byTrace {
		named := map[string]tracetest.SpanStub{}
		for _, s := range group {
			named[s.Name] = s
		}
		root, model, compute := named["InferRequest"], named["tensorrt_llm"], named["compute"]
		require.Equal(t, "InferRequest", root.Name)
		require.Equal(t, "tensorrt_llm", model.Name)
		require.Equal(t, "compute", compute.Name)
		assert.False(t, root.Parent.IsValid())
		assert.Equal(t, root.SpanContext.SpanID(), model.Parent.SpanID())
		assert.Equal(t, model.SpanContext.SpanID(), compute.Parent.SpanID())

		a := attrs(model.Attributes)
		assert.Equal(t, "tensorrt_llm", a["triton.model_name"].AsString())
		assert.Equal(t, attribute.INT64, a["triton.model_version"].Type())
		assert.Equal(t, attribute.INT64, a["triton.trace_id"].Type())
		assert.Equal(t, attribute.INT64, a["triton.trace_parent_id"].Type())
		assert.Equal(t, attribute.STRING, a["triton.request_id"].Type())
		assert.False(t, traceIDs[a["triton.trace_id"].AsInt64()], "Triton trace ids are unique")
		traceIDs[a["triton.trace_id"].AsInt64()] = true
		assert.Empty(t, compute.Attributes, "Triton's compute span has no attributes")

		events := map[string]int64{}
		var names []string
		for _, s := range []tracetest.SpanStub{model, compute} {
			for _, e := range s.Events {
				events[e.Name] = e.Time.UnixNano()
				names = append(names, e.Name)
				assert.False(t, e.Time.Before(s.StartTime) || e.Time.After(s.EndTime), "%s inside %s", e.Name, s.Name)
			}
		}
		assert.ElementsMatch(t, order, names)
		for i := 1; i < len(order); i++ {
			assert.LessOrEqual(t, events[order[i-1]], events[order[i]], "%s before %s", order[i-1], order[i])
		}
		var rootEvents []string
		for _, e := range root.Events {
			rootEvents = append(rootEvents, e.Name)
		}
		assert.Equal(t, []string{"HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"}, rootEvents)

		r, ok := byPrefill[events["COMPUTE_START"]]
		require.True(t, ok, "compute starts exactly at a prefill's start")
		assert.Equal(t, r.PrefillStart, compute.StartTime.UnixNano())
		assert.Equal(t, r.End, compute.EndTime.UnixNano())
		assert.Equal(t, r.End, events["COMPUTE_END"])
		assert.Equal(t, r.Arrival, events["REQUEST_START"])
		assert.Equal(t, r.Arrival, model.StartTime.UnixNano())
	}
}

func TestFamiliesShareTheSchedule(t *testing.T) {
	spans, reqs, em := emitted(t, 3*time.Minute, "--families", "vllm,tgi,triton", "--sim-gpus", "4")
	var total int64
	for _, f := range allFamilies {
		assert.Positive(t, em.counts[f], f)
		total += em.counts[f]
	}
	assert.Equal(t, int64(len(reqs)), total, "each request in one family")
	want := em.counts[familyVLLM] + 2*em.counts[familyTGI] + 3*em.counts[familyTriton]
	assert.Len(t, spans, int(want))
	assert.True(t, strings.HasPrefix(em.summary(), "requests emitted: vllm="))
	// One provider per (family, GPU) in process mode.
	assert.LessOrEqual(t, len(em.order), 3*4)
	assert.True(t, slices.ContainsFunc(spans, func(s tracetest.SpanStub) bool { return s.Name == "chat_completions" }))
}
