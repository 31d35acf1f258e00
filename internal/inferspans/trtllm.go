package inferspans

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// TensorRT-LLM's server (trtllm-serve), as tensorrt_llm/executor/result.py
// do_tracing (pull request #5897) and tensorrt_llm/llmapi/tracing.py have
// it: one llm_request span, SERVER, from the request's arrival, on the
// tracer "trt.llm", with the request's sampling parameters (those not None;
// top_k is None unless the client sets it), its id (an integer), token
// counts and the latencies of the executor's RequestPerfMetrics
// (executor/result.py _process_req_perf_metrics):
//
//	time_to_first_token = first token - arrival
//	e2e                 = last token - arrival
//	time_in_queue       = first scheduled - arrival
//
// kv_cache_transfer_time and its events exist only in disaggregated serving.
// TracerProvider() gets the Python SDK's default resource: service.name from
// OTEL_SERVICE_NAME (the engine's name here). A request is traced from its
// final response's perf metrics; we found no path that traces a cancelled
// one, so an aborted request has no span.
const trtllmScope = "trt.llm"

func appendTRTLLM(td ptrace.Traces, r infersim.Request, e infersim.Engine, env Env, parent pcommon.SpanID) bool {
	if r.Finish == infersim.FinishAbort {
		return false
	}
	ss := scopeSpans(td, resource(e, env, pythonSDK(e.Name)...), trtllmScope)
	sp := newSpan(ss, r, vllmSpanName, ptrace.SpanKindServer, r.SpanID(), parent, r.Arrival, r.Finished)
	a := sp.Attributes()
	a.PutDouble("gen_ai.request.temperature", temperature(r))
	a.PutDouble("gen_ai.request.top_p", topP(r))
	if r.MaxTokens > 0 {
		a.PutInt("gen_ai.request.max_tokens", int64(r.MaxTokens))
	}
	a.PutInt("gen_ai.request.n", 1)
	// The executor numbers requests from 1; each episode is a fresh engine.
	a.PutInt("gen_ai.request.id", int64(r.Seq)+1)
	a.PutInt("gen_ai.usage.prompt_tokens", int64(r.PromptTokens))
	a.PutInt("gen_ai.usage.completion_tokens", int64(r.OutputTokens))
	a.PutDouble("gen_ai.latency.time_to_first_token", secs(r.FirstToken-r.Arrival))
	a.PutDouble("gen_ai.latency.e2e", secs(r.LastToken-r.Arrival))
	a.PutDouble("gen_ai.latency.time_in_queue", secs(r.Scheduled-r.Arrival))
	a.PutStr("gen_ai.response.finish_reasons", finishReasons(r))
	return true
}
