package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// vLLM (V1 engine) sends one span per finished request: name llm_request,
// kind SERVER, start = the request's arrival, latencies in seconds (doubles),
// token counts under the old names gen_ai.usage.prompt_tokens and
// gen_ai.usage.completion_tokens.
const (
	vllmSpanName = "llm_request"

	vllmQueue     = "gen_ai.latency.time_in_queue"
	vllmPrefill   = "gen_ai.latency.time_in_model_prefill"
	vllmDecode    = "gen_ai.latency.time_in_model_decode"
	vllmInference = "gen_ai.latency.time_in_model_inference"
	vllmTTFT      = "gen_ai.latency.time_to_first_token"
	vllmE2E       = "gen_ai.latency.e2e"

	attrPromptTokens     = "gen_ai.usage.prompt_tokens"
	attrCompletionTokens = "gen_ai.usage.completion_tokens"
	attrInputTokens      = "gen_ai.usage.input_tokens"
	attrOutputTokens     = "gen_ai.usage.output_tokens"
	attrRequestModel     = "gen_ai.request.model"
	attrResponseModel    = "gen_ai.response.model"
)

// recognizeVLLM reads a llm_request span. Phases run one after the other
// from the span's start: queue (time_in_queue), then prefill
// (time_in_model_prefill) and decode (time_in_model_decode); without both of
// those, one inference phase (time_in_model_inference); without that either,
// prefill alone if given, else no model phase. Every gen_ai.latency.* that
// vLLM V1 sets must be a non-negative number of seconds (a string is
// malformed, not coerced); time_to_first_token and e2e are only checked.
func recognizeVLLM(span ptrace.Span, req *Request, d *draft) string {
	var queue, prefill, decode, inference int64 = -1, -1, -1, -1
	var prompt, completion, input, output int64 = -1, -1, -1, -1
	var reqModel, respModel string
	reason := ""
	for k, v := range span.Attributes().All() {
		var why string
		switch k {
		case vllmQueue:
			queue, why = secondsNS(v)
		case vllmPrefill:
			prefill, why = secondsNS(v)
		case vllmDecode:
			decode, why = secondsNS(v)
		case vllmInference:
			inference, why = secondsNS(v)
		case vllmTTFT, vllmE2E:
			_, why = secondsNS(v)
		case attrPromptTokens:
			prompt, why = tokenCount(v)
		case attrCompletionTokens:
			completion, why = tokenCount(v)
		case attrInputTokens:
			input, why = tokenCount(v)
		case attrOutputTokens:
			output, why = tokenCount(v)
		case attrRequestModel:
			reqModel = str(v)
		case attrResponseModel:
			respModel = str(v)
		}
		if why != "" && reason == "" {
			reason = why
		}
	}
	if reason != "" {
		return reason
	}
	d.in, d.out = firstKnown(prompt, input), firstKnown(completion, output)
	req.Model = reqModel
	if req.Model == "" {
		req.Model = respModel
	}
	if queue >= 0 {
		if why := d.next(PhaseQueue, queue); why != "" {
			return why
		}
	}
	switch {
	case prefill >= 0 && decode >= 0:
		if why := d.next(PhasePrefill, prefill); why != "" {
			return why
		}
		return d.next(PhaseDecode, decode)
	case inference >= 0:
		return d.next(PhaseInference, inference)
	case prefill >= 0:
		return d.next(PhasePrefill, prefill)
	}
	return ""
}

func firstKnown(a, b int64) int64 {
	if a >= 0 {
		return a
	}
	return b
}
