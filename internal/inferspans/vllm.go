package inferspans

import (
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// vLLM V1, as vllm/v1/engine/output_processor.py (OutputProcessor.do_tracing)
// and vllm/v1/metrics/stats.py (RequestStateStats, IterationStats) have it:
// one span, llm_request, SERVER, when a request finishes, from arrival_time
// (the front end's wall clock) to the moment of export. Its latencies come
// from the engine core's events: queued_ts (QUEUED), scheduled_ts (the first
// SCHEDULED only: "ignore preemptions"), first_token_ts and last_token_ts
// (the steps that produced the tokens), so
//
//	time_in_queue          = scheduled_ts - queued_ts
//	time_in_model_prefill  = first_token_ts - scheduled_ts   (preemptions in prefill included)
//	time_in_model_decode   = last_token_ts - first_token_ts  (preemptions in decode included)
//	time_in_model_inference = last_token_ts - scheduled_ts
//	time_to_first_token    = first output's iteration time - arrival_time
//	e2e                    = final output's iteration time - arrival_time
//
// and e2e exceeds queue + prefill + decode by the time from arrival to
// queued_ts (the hop into the engine core). Sampling parameters appear only
// when truthy (a temperature of 0 is left out). A request aborted by its
// client leaves OutputProcessor.abort_requests, which pops its state without
// do_tracing: no span (tracing aborts is an open pull request, #32162).
//
// The resource is vllm/tracing/otel.py init_tracer's: Resource.create over
// vllm.instrumenting_module_name and vllm.process_id (the API server's PID,
// a string), service.name from OTEL_SERVICE_NAME (the engine's name here);
// no host.name or process.pid.
const (
	vllmScope    = "vllm.llm_engine"
	vllmSpanName = "llm_request"
)

func appendVLLM(td ptrace.Traces, r infersim.Request, e infersim.Engine, env Env, parent pcommon.SpanID) bool {
	if r.Finish == infersim.FinishAbort {
		return false
	}
	own := append(pythonSDK(e.Name),
		kv{"vllm.instrumenting_module_name", vllmScope},
		kv{"vllm.process_id", strconv.FormatInt(serverPID(e), 10)})
	ss := scopeSpans(td, resource(e, env, own...), vllmScope)
	sp := newSpan(ss, r, vllmSpanName, ptrace.SpanKindServer, r.SpanID(), parent, r.Arrival, r.Finished)
	a := sp.Attributes()
	a.PutDouble("gen_ai.latency.time_to_first_token", secs(r.FirstToken-r.Arrival))
	a.PutDouble("gen_ai.latency.e2e", secs(r.Finished-r.Arrival))
	a.PutDouble("gen_ai.latency.time_in_queue", secs(r.Scheduled-r.Queued))
	a.PutInt("gen_ai.usage.prompt_tokens", int64(r.PromptTokens))
	a.PutInt("gen_ai.usage.completion_tokens", int64(r.OutputTokens))
	a.PutDouble("gen_ai.latency.time_in_model_prefill", secs(r.FirstToken-r.Scheduled))
	a.PutDouble("gen_ai.latency.time_in_model_decode", secs(r.LastToken-r.FirstToken))
	a.PutDouble("gen_ai.latency.time_in_model_inference", secs(r.LastToken-r.Scheduled))
	a.PutStr("gen_ai.request.id", chatID(r))
	a.PutStr("gen_ai.response.finish_reasons", finishReasons(r))
	a.PutDouble("gen_ai.request.top_p", topP(r))
	if r.MaxTokens > 0 {
		a.PutInt("gen_ai.request.max_tokens", int64(r.MaxTokens))
	}
	a.PutDouble("gen_ai.request.temperature", temperature(r))
	a.PutInt("gen_ai.request.n", 1)
	return true
}
