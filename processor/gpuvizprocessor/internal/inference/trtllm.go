package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TensorRT-LLM's server (trtllm-serve, with an OTLP traces endpoint) sends
// one span per finished request, as tensorrt_llm/executor/result.py do_tracing has it
// (pull request #5897): named llm_request like vLLM's, kind SERVER, on the
// tracer "trt.llm", from the request's arrival to the moment it is traced.
// Its latencies are seconds (doubles) of the executor's RequestPerfMetrics,
// all from the arrival:
//
//	time_in_queue       = first scheduled - arrival
//	time_to_first_token = first token - arrival
//	e2e                 = last token - arrival
//
// with gen_ai.latency.kv_cache_transfer_time (its end minus its start in
// disaggregated serving, else 0), the token counts under the old names
// gen_ai.usage.prompt_tokens and gen_ai.usage.completion_tokens, the
// sampling parameters (gen_ai.request.*) and the executor's request id,
// gen_ai.request.id, an integer. It names no model.
//
// TensorRT-LLM keeps only positive latencies in a request's metrics and
// traces a missing one as the integer -1 (metrics_dict.get(name, -1)): a
// request scheduled the moment it arrived has time_in_queue -1. So exactly
// -1 means unknown here; any other negative latency is malformed.
//
// The recogniser is not given the span's scope, so what tells the span from
// vLLM's is on it: an integer gen_ai.request.id (vLLM's is a string) or a
// gen_ai.latency.kv_cache_transfer_time, and none of the
// gen_ai.latency.time_in_model_* latencies that vLLM V1 always sets (a span
// with those is vLLM's whatever else it has).
//
// Phases run from the span's start: queue [start, +time_in_queue], prefill
// [queue end, start+time_to_first_token], decode [first token, start+e2e],
// or to the span's end without e2e; without time_to_first_token, one
// inference phase [queue end, start+e2e]; without either, no model phase.
const (
	trtllmKVTransfer = "gen_ai.latency.kv_cache_transfer_time"
	attrRequestID    = "gen_ai.request.id"
)

// isTRTLLM says whether a llm_request span is TensorRT-LLM's.
func isTRTLLM(attrs pcommon.Map) bool {
	trt := false
	for k, v := range attrs.All() {
		switch k {
		case vllmPrefill, vllmDecode, vllmInference:
			return false
		case attrRequestID:
			trt = trt || v.Type() == pcommon.ValueTypeInt
		case trtllmKVTransfer:
			trt = true
		}
	}
	return trt
}

func recognizeTRTLLM(span ptrace.Span, req *Request, d *draft) string {
	var queue, ttft, e2e int64 = -1, -1, -1
	u := newUsage()
	if why := readLatencies(span.Attributes(), &u, trtllmSeconds, []latency{
		{vllmQueue, &queue, nil}, {vllmTTFT, &ttft, nil}, {vllmE2E, &e2e, nil}, {trtllmKVTransfer, nil, nil},
	}); why != "" {
		return why
	}
	u.apply(req, d, true)
	scheduled := d.start
	if queue >= 0 {
		scheduled = d.at(queue)
		if why := d.add(PhaseQueue, d.start, scheduled); why != "" {
			return why
		}
	}
	switch {
	case ttft >= 0:
		first := d.at(ttft)
		if why := d.add(PhasePrefill, scheduled, first); why != "" {
			return why
		}
		if e2e >= 0 {
			return d.add(PhaseDecode, first, d.at(e2e))
		}
		// To the span's end; a first token within the tolerance past it
		// leaves decode empty, not reversed.
		return d.add(PhaseDecode, min(first, d.end), d.end)
	case e2e >= 0:
		return d.add(PhaseInference, scheduled, d.at(e2e))
	}
	return ""
}

// trtllmSeconds reads one of TensorRT-LLM's latencies: non-negative seconds,
// or exactly -1 for unknown (returned as -1).
func trtllmSeconds(v pcommon.Value) (int64, string) {
	switch {
	case v.Type() == pcommon.ValueTypeInt && v.Int() == -1,
		v.Type() == pcommon.ValueTypeDouble && v.Double() == -1:
		return -1, ""
	}
	return secondsNS(v)
}
