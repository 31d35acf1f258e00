package inference

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Fixtures built the way the servers build their spans (names, keys, value
// types); see /work/shared/reference/semconv-and-spans.md and each family's
// file for the sources.

var (
	t0  = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(10 * time.Minute)
)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ts(t time.Time) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t) }

type fixture struct {
	span ptrace.Span
	res  pcommon.Resource
}

func newFixture(name string, kind ptrace.SpanKind, start, end time.Time) fixture {
	s := ptrace.NewSpan()
	s.SetName(name)
	s.SetKind(kind)
	s.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	s.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
	s.SetStartTimestamp(ts(start))
	s.SetEndTimestamp(ts(end))
	return fixture{span: s, res: pcommon.NewResource()}
}

func (f fixture) event(name string, t time.Time) fixture {
	e := f.span.Events().AppendEmpty()
	e.SetName(name)
	e.SetTimestamp(ts(t))
	return f
}

// pythonResource is what the OpenTelemetry Python SDK sends by default, plus
// the process and host detectors' attributes.
func pythonResource(res pcommon.Resource, service string) {
	a := res.Attributes()
	a.PutStr("telemetry.sdk.language", "python")
	a.PutStr("telemetry.sdk.name", "opentelemetry")
	a.PutStr("telemetry.sdk.version", "1.33.1")
	a.PutStr("service.name", service)
	a.PutInt("process.pid", 4242)
	a.PutStr("host.name", "gpu-node-7")
}

// vllmV1 is vLLM V1's llm_request span (OutputProcessor.do_tracing): start =
// arrival, ended when the output processor handled the last token.
func vllmV1() fixture {
	f := newFixture("llm_request", ptrace.SpanKindServer, at(0), at(2*time.Second+300*time.Microsecond))
	pythonResource(f.res, "vllm")
	a := f.span.Attributes()
	a.PutDouble("gen_ai.latency.time_to_first_token", 0.153)
	a.PutDouble("gen_ai.latency.e2e", 2.0003)
	a.PutDouble("gen_ai.latency.time_in_queue", 0.05)
	a.PutInt("gen_ai.usage.prompt_tokens", 512)
	a.PutInt("gen_ai.usage.completion_tokens", 128)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.1)
	a.PutDouble("gen_ai.latency.time_in_model_decode", 1.8)
	a.PutDouble("gen_ai.latency.time_in_model_inference", 1.9)
	a.PutStr("gen_ai.request.id", "cmpl-5f0e7c3a9b1d4e2f8a6c")
	a.PutDouble("gen_ai.request.top_p", 0.95)
	a.PutInt("gen_ai.request.max_tokens", 256)
	a.PutDouble("gen_ai.request.temperature", 0.7)
	a.PutInt("gen_ai.request.n", 1)
	return f
}

// vllmV0 is the older engine's llm_request: the model, finish reasons as a
// JSON string, scheduler/forward/execute latencies, no prefill/decode split.
func vllmV0() fixture {
	f := newFixture("llm_request", ptrace.SpanKindServer, at(0), at(900*time.Millisecond))
	pythonResource(f.res, "vllm")
	a := f.span.Attributes()
	a.PutStr("gen_ai.response.model", "meta-llama/Llama-3.1-8B-Instruct")
	a.PutStr("gen_ai.request.id", "cmpl-0123")
	a.PutDouble("gen_ai.request.temperature", 0.0)
	a.PutDouble("gen_ai.request.top_p", 1.0)
	a.PutInt("gen_ai.request.max_tokens", 64)
	a.PutInt("gen_ai.request.n", 1)
	a.PutInt("gen_ai.usage.prompt_tokens", 37)
	a.PutInt("gen_ai.usage.completion_tokens", 64)
	a.PutStr("gen_ai.response.finish_reasons", `["length"]`)
	a.PutDouble("gen_ai.latency.time_to_first_token", 0.021)
	a.PutDouble("gen_ai.latency.e2e", 0.9)
	a.PutDouble("gen_ai.latency.time_in_queue", 0.004)
	a.PutDouble("gen_ai.latency.time_in_scheduler", 0.0021)
	a.PutDouble("gen_ai.latency.time_in_model_forward", 0.7)
	a.PutDouble("gen_ai.latency.time_in_model_execute", 0.8)
	return f
}

// genAIChat is a span per the GenAI conventions with time to first chunk.
func genAIChat() fixture {
	f := newFixture("chat llama-3.1-8b", ptrace.SpanKindServer, at(0), at(3*time.Second))
	pythonResource(f.res, "inference-gateway")
	a := f.span.Attributes()
	a.PutStr("gen_ai.operation.name", "chat")
	a.PutStr("gen_ai.provider.name", "openai")
	a.PutStr("gen_ai.request.model", "llama-3.1-8b")
	a.PutStr("gen_ai.response.model", "llama-3.1-8b-instruct-q4")
	a.PutInt("gen_ai.request.max_tokens", 512)
	a.PutInt("gen_ai.usage.input_tokens", 1200)
	a.PutInt("gen_ai.usage.output_tokens", 300)
	a.PutDouble("gen_ai.response.time_to_first_chunk", 0.25)
	a.PutStr("server.address", "10.0.0.7")
	a.PutInt("server.port", 8000)
	a.PutStr("gpu.uuid", "GPU-3c1f1c5e-8a1b-4d2b-9a47-1e2f3a4b5c6d")
	return f
}

// genAIEmbeddings has no time to first chunk: one inference phase.
func genAIEmbeddings() fixture {
	f := newFixture("embeddings bge-large", ptrace.SpanKindClient, at(0), at(40*time.Millisecond))
	a := f.span.Attributes()
	a.PutStr("gen_ai.operation.name", "embeddings")
	a.PutStr("gen_ai.request.model", "bge-large")
	a.PutInt("gen_ai.usage.input_tokens", 64)
	return f
}

// sglangRoot is SGLang's request root span ("{role} Req {rid[:8]}", role
// empty on a unified server) once the tokenizer has the finished output:
// created at 0, dispatched to the scheduler at 1 ms, first token at 120 ms,
// finished at 2.5 s. The resource is process_tracing_init's.
func sglangRoot(role string) fixture {
	rid := "5c0ffee1d2e34f56a7b8c9d0e1f2a3b4"
	f := newFixture(role+" Req "+rid[:8], ptrace.SpanKindInternal, at(0), at(2500*ms))
	f.res.Attributes().PutStr("service.name", "sglang")
	f.res.Attributes().PutStr("gpu.uuid", "GPU-aaaa,GPU-bbbb")
	a := f.span.Attributes()
	a.PutStr("rid", rid)
	a.PutStr("module", "sglang::request")
	a.PutInt("gen_ai.usage.completion_tokens", 300)
	a.PutInt("gen_ai.usage.prompt_tokens", 1000)
	a.PutInt("gen_ai.usage.cached_tokens", 256)
	a.PutStr("gen_ai.request.id", rid)
	a.PutInt("gen_ai.request.max_tokens", 512)
	a.PutDouble("gen_ai.request.top_p", 0.9)
	a.PutDouble("gen_ai.request.temperature", 0.6)
	a.PutInt("gen_ai.request.n", 1)
	a.PutStr("gen_ai.response.model", "Qwen/Qwen2.5-32B-Instruct")
	a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
	a.PutDouble("gen_ai.latency.time_to_first_token", 0.12)
	a.PutDouble("gen_ai.latency.e2e", 2.5)
	a.PutDouble("gen_ai.latency.time_in_model_decode", 2.38)
	a.PutDouble("gen_ai.latency.time_in_model_inference", 2.499)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.119)
	return f
}

// sglangAborted is the root of a request its client gave up on: ended
// without the gen_ai.* attributes.
func sglangAborted() fixture {
	f := newFixture(" Req 0badcafe", ptrace.SpanKindInternal, at(0), at(4*time.Second))
	f.res.Attributes().PutStr("service.name", "sglang")
	f.span.Attributes().PutStr("rid", "0badcafe00112233445566778899aabb")
	f.span.Attributes().PutStr("module", "sglang::request")
	return f
}

// sglangThread is a scheduler's thread span under the root.
func sglangThread() fixture {
	f := newFixture("Scheduler [TP 1] (host:9a371d29 | pid:4105)", ptrace.SpanKindInternal, at(ms), at(2500*ms))
	f.res.Attributes().PutStr("service.name", "sglang")
	a := f.span.Attributes()
	a.PutInt("tp_rank", 1)
	a.PutStr("host_id", "9a371d29eed4a2dee0496c40d350bf3a")
	a.PutInt("pid", 4105)
	a.PutStr("thread_label", "Scheduler")
	return f
}

// sglangSlice is a stage slice under a thread span (no attributes).
func sglangSlice(name string, start, end time.Duration) fixture {
	f := newFixture(name, ptrace.SpanKindInternal, at(start), at(end))
	f.res.Attributes().PutStr("service.name", "sglang")
	return f
}

// trtllmRequest is trtllm-serve's llm_request (GenerationResult.do_tracing):
// arrival at 0, scheduled at 20 ms, first token at 200 ms, last at 1.5 s,
// traced 2 ms later.
func trtllmRequest() fixture {
	f := newFixture("llm_request", ptrace.SpanKindServer, at(0), at(1502*ms))
	pythonResource(f.res, "trtllm-serve")
	a := f.span.Attributes()
	a.PutDouble("gen_ai.request.temperature", 0.8)
	a.PutDouble("gen_ai.request.top_p", 0.95)
	a.PutInt("gen_ai.request.max_tokens", 128)
	a.PutInt("gen_ai.request.n", 1)
	a.PutInt("gen_ai.request.id", 7)
	a.PutInt("gen_ai.usage.prompt_tokens", 300)
	a.PutInt("gen_ai.usage.completion_tokens", 90)
	a.PutDouble("gen_ai.latency.time_to_first_token", 0.2)
	a.PutDouble("gen_ai.latency.e2e", 1.5)
	a.PutDouble("gen_ai.latency.time_in_queue", 0.02)
	a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
	a.PutDouble("gen_ai.latency.kv_cache_transfer_time", 0.0)
	return f
}

// genAIClient is the application's call as
// opentelemetry-instrumentation-openai-v2 traces it: a CLIENT span whose
// context the library propagates, so the server's span is its child.
func genAIClient() fixture {
	f := newFixture("chat meta-llama/Llama-3.1-8B-Instruct", ptrace.SpanKindClient, at(0), at(2*time.Second))
	pythonResource(f.res, "chat-app")
	a := f.span.Attributes()
	a.PutStr("gen_ai.operation.name", "chat")
	a.PutStr("gen_ai.provider.name", "openai")
	a.PutStr("gen_ai.request.model", "meta-llama/Llama-3.1-8B-Instruct")
	a.PutInt("gen_ai.request.max_tokens", 256)
	a.PutDouble("gen_ai.request.temperature", 0.7)
	a.PutStr("server.address", "vllm-0")
	a.PutInt("server.port", 8000)
	a.PutStr("gen_ai.response.id", "chatcmpl-5f0e7c3a")
	a.PutStr("gen_ai.response.model", "meta-llama/Llama-3.1-8B-Instruct")
	a.PutEmptySlice("gen_ai.response.finish_reasons").AppendEmpty().SetStr("stop")
	a.PutInt("gen_ai.usage.input_tokens", 512)
	a.PutInt("gen_ai.usage.output_tokens", 128)
	return f
}

// tgiCodeAttrs are what tracing-opentelemetry adds to every span.
func tgiCodeAttrs(a pcommon.Map, namespace, file string, line int64) {
	a.PutStr("code.filepath", file)
	a.PutStr("code.namespace", namespace)
	a.PutInt("code.lineno", line)
	a.PutInt("thread.id", 12)
	a.PutStr("thread.name", "tokio-runtime-worker")
	a.PutInt("busy_ns", 1843211)
	a.PutInt("idle_ns", 1497002113)
}

func tgiResource(res pcommon.Resource) {
	res.Attributes().PutStr("service.name", "text-generation-inference.router")
}

// tgiGenerate is the /generate handler span after a successful request.
func tgiGenerate() fixture {
	f := newFixture("generate", ptrace.SpanKindInternal, at(0), at(1500*time.Millisecond+40*time.Microsecond))
	tgiResource(f.res)
	a := f.span.Attributes()
	tgiCodeAttrs(a, "text_generation_router::server", "router/src/server.rs", 238)
	a.PutStr("parameters", "GenerateParameters { best_of: None, temperature: Some(0.5), max_new_tokens: Some(200), details: false }")
	a.PutStr("total_time", "1.499987625s")
	a.PutStr("validation_time", "1.204567ms")
	a.PutStr("queue_time", "5.53µs")
	a.PutStr("inference_time", "1.498777528s")
	a.PutStr("time_per_token", "7.493887ms")
	a.PutStr("seed", "Some(8371204)")
	return f
}

// tgiChat is the OpenAI-compatible chat_completions handler span.
func tgiChat() fixture {
	f := newFixture("chat_completions", ptrace.SpanKindInternal, at(0), at(250*time.Millisecond))
	tgiResource(f.res)
	a := f.span.Attributes()
	tgiCodeAttrs(a, "text_generation_router::server", "router/src/server.rs", 1180)
	a.PutStr("parameters", "GenerateParameters { stream: true }")
	a.PutStr("total_time", "249.5ms")
	a.PutStr("validation_time", "500µs")
	a.PutStr("queue_time", "49ms")
	a.PutStr("inference_time", "200ms")
	a.PutStr("time_per_token", "20ms")
	a.PutStr("seed", "None")
	return f
}

func tgiBackend(name, namespace string, start, end time.Time) fixture {
	f := newFixture(name, ptrace.SpanKindInternal, start, end)
	tgiResource(f.res)
	tgiCodeAttrs(f.span.Attributes(), namespace, "backends/v3/src/backend.rs", 300)
	return f
}

// tritonModel is Triton's request span, named after the model.
func tritonModel() fixture {
	f := newFixture("resnet50", ptrace.SpanKindServer, at(0), at(12*time.Millisecond))
	f.res.Attributes().PutStr("service.name", "triton-inference-server")
	a := f.span.Attributes()
	a.PutStr("triton.model_name", "resnet50")
	a.PutInt("triton.model_version", 1)
	a.PutInt("triton.trace_id", 7)
	a.PutInt("triton.trace_parent_id", 0)
	return f.event("REQUEST_START", at(0)).
		event("QUEUE_START", at(30*time.Microsecond)).
		event("REQUEST_END", at(12*time.Millisecond))
}

// tritonEnsemble is the model span of an ensemble of TensorRT-LLM's
// backend (preprocessing, tensorrt_llm, postprocessing), as src/tracer.cc
// TraceManager::Trace::StartSpan builds it: the request's own trace, so
// triton.trace_parent_id 0. Ensembles run no compute of their own.
func tritonEnsemble() fixture {
	f := newFixture("ensemble", ptrace.SpanKindServer, at(0), at(900*time.Millisecond))
	f.res.Attributes().PutStr("service.name", "triton-inference-server")
	a := f.span.Attributes()
	a.PutStr("triton.model_name", "ensemble")
	a.PutInt("triton.model_version", 1)
	a.PutInt("triton.trace_id", 7)
	a.PutInt("triton.trace_parent_id", 0)
	return f.event("REQUEST_START", at(0)).
		event("QUEUE_START", at(40*time.Microsecond)).
		event("REQUEST_END", at(900*time.Millisecond))
}

// tritonComposing is the model span of a model the ensemble calls: a child
// trace of the ensemble's (TRITONSERVER_InferenceTraceParentId is the
// ensemble's trace id, 7), so StartSpan makes it a child of the ensemble's
// span and sets triton.trace_parent_id to 7. It has a compute span of its
// own under it.
func tritonComposing(model string, start, end time.Duration) fixture {
	f := newFixture(model, ptrace.SpanKindServer, at(start), at(end))
	f.res.Attributes().PutStr("service.name", "triton-inference-server")
	a := f.span.Attributes()
	a.PutStr("triton.model_name", model)
	a.PutInt("triton.model_version", 1)
	a.PutInt("triton.trace_id", 8)
	a.PutInt("triton.trace_parent_id", 7)
	return f.event("REQUEST_START", at(start)).
		event("QUEUE_START", at(start+20*time.Microsecond)).
		event("REQUEST_END", at(end))
}

// tritonCompute is Triton's compute span, child of the model span.
func tritonCompute() fixture {
	f := newFixture("compute", ptrace.SpanKindServer, at(2*time.Millisecond), at(11*time.Millisecond))
	f.res.Attributes().PutStr("service.name", "triton-inference-server")
	return f.event("COMPUTE_START", at(2*time.Millisecond)).
		event("COMPUTE_INPUT_END", at(2500*time.Microsecond)).
		event("COMPUTE_OUTPUT_START", at(10*time.Millisecond)).
		event("COMPUTE_END", at(11*time.Millisecond))
}

// tritonAllEvents carries every activity on one span (as exporters that
// turn Triton's trace file into one span per request do).
func tritonAllEvents() fixture {
	f := newFixture("llama", ptrace.SpanKindServer, at(0), at(20*time.Millisecond))
	f.span.Attributes().PutStr("triton.model_name", "llama")
	f.span.Attributes().PutInt("triton.model_version", 3)
	return f.event("REQUEST_START", at(0)).
		event("QUEUE_START", at(1*time.Millisecond)).
		event("COMPUTE_START", at(4*time.Millisecond)).
		event("COMPUTE_INPUT_END", at(5*time.Millisecond)).
		event("COMPUTE_OUTPUT_START", at(18*time.Millisecond)).
		event("COMPUTE_END", at(19*time.Millisecond)).
		event("REQUEST_END", at(20*time.Millisecond))
}

// tritonRoot is Triton's root span: not an inference span.
func tritonRoot() fixture {
	f := newFixture("InferRequest", ptrace.SpanKindServer, at(0), at(13*time.Millisecond))
	return f.event("HTTP_RECV_START", at(0)).
		event("HTTP_RECV_END", at(100*time.Microsecond)).
		event("HTTP_SEND_START", at(12900*time.Microsecond)).
		event("HTTP_SEND_END", at(13*time.Millisecond))
}

func httpSpan() fixture {
	f := newFixture("GET /v1/models", ptrace.SpanKindServer, at(0), at(3*time.Millisecond))
	a := f.span.Attributes()
	a.PutStr("http.request.method", "GET")
	a.PutStr("url.path", "/v1/models")
	a.PutInt("http.response.status_code", 200)
	return f
}

var testRule = Rule{
	Name:                    "homegrown",
	SpanName:                "serve_request",
	QueueSecondsAttribute:   "srv.queue_s",
	PrefillSecondsAttribute: "srv.prefill",
	DecodeSecondsAttribute:  "srv.decode",
	InputTokensAttribute:    "srv.in",
	OutputTokensAttribute:   "srv.out",
	ModelAttribute:          "srv.model",
}

func ruleSpan() fixture {
	f := newFixture("serve_request", ptrace.SpanKindServer, at(0), at(time.Second))
	a := f.span.Attributes()
	a.PutInt("srv.queue_s", 0)
	a.PutDouble("srv.prefill", 0.2)
	a.PutStr("srv.decode", "700.5ms")
	a.PutInt("srv.in", 10)
	a.PutInt("srv.out", 20)
	f.res.Attributes().PutStr("srv.model", "mistral-7b")
	f.res.Attributes().PutStr("CUDA_VISIBLE_DEVICES", "2,3")
	return f
}

func testConfig() Config {
	c := DefaultConfig()
	c.Rules = []Rule{testRule, {Name: "prefixed", SpanNamePrefix: "batch/"}}
	return c
}
