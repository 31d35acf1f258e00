package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// The families of inference servers whose spans the load generator speaks.
const (
	familyVLLM   = "vllm"
	familyTGI    = "tgi"
	familyTriton = "triton"
)

var allFamilies = []string{familyVLLM, familyTGI, familyTriton}

// Instrumentation scopes (tracer names) and service names, as each server
// sets them.
const (
	// vLLM: init_tracer("vllm.llm_engine", ...); the service name comes from
	// OTEL_SERVICE_NAME (--service here).
	vllmTracer = "vllm.llm_engine"
	// TGI's router installs the opentelemetry-otlp batch pipeline, whose
	// tracer carries the crate's name, with a fixed service.name (its
	// --otlp-service-name default).
	tgiTracer  = "opentelemetry-otlp"
	tgiService = "text-generation-inference.router"
	// Triton's tracer (kTritonTracer) and its default resource service.name.
	tritonTracer  = "triton-server"
	tritonService = "triton-inference-server"
	// tritonModel is the model Triton serves the LLM as.
	tritonModel = "tensorrt_llm"
)

// hwIDKey names the GPU on a span in --match attribute mode.
const hwIDKey = "hw.id"

// secs converts nanoseconds to seconds as vLLM reports latencies (float).
func secs(ns int64) float64 { return float64(ns) / 1e9 }

// splitmix is SplitMix64's finaliser: per-request choices are drawn from the
// request's ID through it, so a simulated request is the same every run.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// sampling are the request's sampling parameters and how it finished.
type sampling struct {
	temperature, topP float64
	maxTokens         int64
	finish            string // "stop" or "length"
	seed              int64
}

var (
	temperatures = []float64{0.7, 1, 0.2, 0.8, 0.6}
	topPs        = []float64{0.95, 1, 0.9}
	maxTokenCaps = []int64{256, 512, 1024, 2048, 4096, 8192, 16384}
)

// samplingOf derives the request's parameters from its ID: one request in
// five ran into max_tokens (finish reason "length", max_tokens = the output
// length); the others stopped on their own below the smallest usual cap
// above their output.
func samplingOf(r nvmlsim.Request) sampling {
	h := splitmix(r.ID ^ 0x5a17)
	s := sampling{
		temperature: temperatures[h%uint64(len(temperatures))],
		topP:        topPs[(h>>8)%uint64(len(topPs))],
		finish:      "stop",
		seed:        int64((h >> 16) % 1_000_000),
	}
	if (h>>32)%5 == 0 {
		s.finish, s.maxTokens = "length", r.OutputTokens
		return s
	}
	s.maxTokens = maxTokenCaps[len(maxTokenCaps)-1]
	for _, c := range maxTokenCaps {
		if c > r.OutputTokens {
			s.maxTokens = c
			break
		}
	}
	return s
}

// hexID renders 128 bits from the ID as 32 hex digits, as Python's
// uuid4().hex does.
func hexID(id uint64) string {
	return fmt.Sprintf("%016x%016x", splitmix(id), splitmix(id^0xc0ffee))
}

// emitVLLM emits the span vLLM's V1 engine exports when a request finishes
// (vllm/v1/engine/output_processor.py, do_tracing): llm_request, SERVER,
// from the arrival to the end, latencies in seconds as doubles, token counts
// under the old gen_ai.usage names, finish reasons as a JSON string.
func emitVLLM(ctx context.Context, tracer trace.Tracer, r nvmlsim.Request, hints []attribute.KeyValue) {
	p := samplingOf(r)
	queue := r.PrefillStart - r.Arrival
	prefill := r.DecodeStart - r.PrefillStart
	decode := r.End - r.DecodeStart
	attrs := []attribute.KeyValue{
		attribute.Float64("gen_ai.latency.time_to_first_token", secs(r.DecodeStart-r.Arrival)),
		attribute.Float64("gen_ai.latency.e2e", secs(r.End-r.Arrival)),
		attribute.Float64("gen_ai.latency.time_in_queue", secs(queue)),
		attribute.Int64("gen_ai.usage.prompt_tokens", r.PromptTokens),
		attribute.Int64("gen_ai.usage.completion_tokens", r.OutputTokens),
		attribute.Float64("gen_ai.latency.time_in_model_prefill", secs(prefill)),
		attribute.Float64("gen_ai.latency.time_in_model_decode", secs(decode)),
		attribute.Float64("gen_ai.latency.time_in_model_inference", secs(prefill+decode)),
		attribute.String("gen_ai.request.id", "chatcmpl-"+hexID(r.ID)),
		attribute.Float64("gen_ai.request.top_p", p.topP),
		attribute.Int64("gen_ai.request.max_tokens", p.maxTokens),
		attribute.Float64("gen_ai.request.temperature", p.temperature),
		attribute.Int64("gen_ai.request.n", 1),
		attribute.String("gen_ai.response.finish_reasons", `["`+p.finish+`"]`),
	}
	_, span := tracer.Start(ctx, "llm_request",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(time.Unix(0, r.Arrival)),
		trace.WithAttributes(append(attrs, hints...)...),
	)
	span.End(trace.WithTimestamp(time.Unix(0, r.End)))
}

// rustDuration formats d as Rust's Debug for std::time::Duration does
// (format!("{d:?}")): the largest unit of s, ms, µs and ns in which the value
// is at least one, with every significant fraction digit and no trailing
// zeros: "2.5s", "1.234567ms", "850µs", "12ns", "0ns".
func rustDuration(d time.Duration) string {
	ns := max(int64(d), 0)
	var whole, frac int64
	var digits int
	var unit string
	switch {
	case ns >= int64(time.Second):
		whole, frac, digits, unit = ns/1e9, ns%1e9, 9, "s"
	case ns >= int64(time.Millisecond):
		whole, frac, digits, unit = ns/1e6, ns%1e6, 6, "ms"
	case ns >= int64(time.Microsecond):
		whole, frac, digits, unit = ns/1e3, ns%1e3, 3, "µs"
	default:
		whole, unit = ns, "ns"
	}
	s := strconv.FormatInt(whole, 10)
	if frac > 0 {
		f := strconv.FormatInt(frac, 10)
		f = strings.Repeat("0", digits-len(f)) + f
		s += "." + strings.TrimRight(f, "0")
	}
	return s + unit
}

// tgiValidation is how long TGI's validation (tokenisation, on the CPU)
// took: 0.3 to 1.5 ms, never more than half the time before the prefill.
func tgiValidation(r nvmlsim.Request) int64 {
	v := int64(300*time.Microsecond) + int64(splitmix(r.ID^0x7e1)%uint64(1200*time.Microsecond))
	return min(v, (r.PrefillStart-r.Arrival)/2)
}

// emitTGI emits what HuggingFace TGI's router exports for a successful chat
// completion: the HTTP server span of its axum tracing layer and, under it,
// the chat_completions handler span (tracing-opentelemetry, INTERNAL) whose
// timing fields are Rust Debug strings. TGI measures from the handler's
// start: validation, queue (until the batch takes the request: the
// prefill), inference (prefill and decode). time_per_token is
// inference_time / generated tokens.
func emitTGI(ctx context.Context, tracer trace.Tracer, r nvmlsim.Request, hints []attribute.KeyValue) {
	p := samplingOf(r)
	start := r.Arrival
	validation := tgiValidation(r)
	queue := r.PrefillStart - start - validation
	inference := r.End - r.PrefillStart
	total := r.End - start
	perToken := inference / max(r.OutputTokens, 1)
	busy := validation + int64(150*time.Microsecond)

	httpStart := start - int64(60*time.Microsecond)
	httpEnd := r.End + int64(120*time.Microsecond)
	ctx, server := tracer.Start(ctx, "POST /v1/chat/completions",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(time.Unix(0, httpStart)),
		trace.WithAttributes(append([]attribute.KeyValue{
			attribute.String("http.request.method", "POST"),
			attribute.String("http.route", "/v1/chat/completions"),
			attribute.String("url.path", "/v1/chat/completions"),
			attribute.String("url.scheme", "http"),
			attribute.String("network.protocol.version", "1.1"),
			attribute.String("user_agent.original", "python-httpx/0.27.0"),
			attribute.Int64("http.response.status_code", 200),
		}, hints...)...),
	)
	_, handler := tracer.Start(ctx, "chat_completions",
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(time.Unix(0, start)),
		trace.WithAttributes(append([]attribute.KeyValue{
			attribute.String("code.filepath", "router/src/server.rs"),
			attribute.String("code.namespace", "text_generation_router::server"),
			attribute.Int64("code.lineno", 1120),
			attribute.String("thread.name", "tokio-runtime-worker"),
			attribute.Int64("thread.id", int64(2+splitmix(r.ID)%16)),
			attribute.String("total_time", rustDuration(time.Duration(total))),
			attribute.String("validation_time", rustDuration(time.Duration(validation))),
			attribute.String("queue_time", rustDuration(time.Duration(queue))),
			attribute.String("inference_time", rustDuration(time.Duration(inference))),
			attribute.String("time_per_token", rustDuration(time.Duration(perToken))),
			attribute.String("seed", "Some("+strconv.FormatInt(p.seed, 10)+")"),
			attribute.Int64("busy_ns", busy),
			attribute.Int64("idle_ns", total-busy),
		}, hints...)...),
	)
	handler.End(trace.WithTimestamp(time.Unix(0, r.End)))
	server.End(trace.WithTimestamp(time.Unix(0, httpEnd)))
}

// emitTriton emits what Triton (--trace-config mode=opentelemetry) exports
// for one request, every span SERVER: the root InferRequest with the HTTP
// timestamps as events, the model-named request span (triton.* attributes,
// REQUEST_START, QUEUE_START, REQUEST_END) and under it the compute span
// from COMPUTE_START to COMPUTE_END. Triton does not tell prefill from
// decode: compute covers both.
func emitTriton(ctx context.Context, tracer trace.Tracer, r nvmlsim.Request, traceID int64, hints []attribute.KeyValue) {
	us := int64(time.Microsecond)
	at := func(ns int64) trace.SpanStartEventOption { return trace.WithTimestamp(time.Unix(0, ns)) }
	server := trace.WithSpanKind(trace.SpanKindServer)

	recvStart := r.Arrival - 120*us
	ctx, root := tracer.Start(ctx, "InferRequest", server, at(recvStart), trace.WithAttributes(hints...))
	root.AddEvent("HTTP_RECV_START", at(recvStart))
	root.AddEvent("HTTP_RECV_END", at(r.Arrival-20*us))

	queueStart := r.Arrival + min((r.PrefillStart-r.Arrival)/10, 50*us)
	mctx, model := tracer.Start(ctx, tritonModel, server, at(r.Arrival), trace.WithAttributes(append([]attribute.KeyValue{
		attribute.String("triton.model_name", tritonModel),
		attribute.Int64("triton.model_version", 1),
		attribute.Int64("triton.trace_id", traceID),
		attribute.Int64("triton.trace_parent_id", 0),
		attribute.String("triton.request_id", hexID(r.ID)[:16]),
	}, hints...)...))
	model.AddEvent("REQUEST_START", at(r.Arrival))
	model.AddEvent("QUEUE_START", at(queueStart))

	_, compute := tracer.Start(mctx, "compute", server, at(r.PrefillStart), trace.WithAttributes(hints...))
	compute.AddEvent("COMPUTE_START", at(r.PrefillStart))
	compute.AddEvent("COMPUTE_INPUT_END", at(r.PrefillStart+min((r.DecodeStart-r.PrefillStart)/20, 200*us)))
	compute.AddEvent("COMPUTE_OUTPUT_START", at(r.End-min((r.End-r.DecodeStart)/20, 150*us)))
	compute.AddEvent("COMPUTE_END", at(r.End))
	compute.End(trace.WithTimestamp(time.Unix(0, r.End)))

	requestEnd := r.End + 30*us
	model.AddEvent("REQUEST_END", at(requestEnd))
	model.End(trace.WithTimestamp(time.Unix(0, requestEnd)))

	root.AddEvent("HTTP_SEND_START", at(r.End+40*us))
	root.AddEvent("HTTP_SEND_END", at(r.End+90*us))
	root.End(trace.WithTimestamp(time.Unix(0, r.End+100*us)))
}
