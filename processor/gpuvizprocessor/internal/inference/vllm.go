package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
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

// recognizeVLLM reads a llm_request span. vLLM V1's latencies are of two
// clocks (vllm/v1/engine/output_processor.py do_tracing,
// vllm/v1/metrics/stats.py): time_in_queue, time_in_model_prefill and
// time_in_model_decode are differences of the engine core's own stamps
// (QUEUED, first SCHEDULED, first and last token), while the span starts at
// the front end's arrival_time and time_to_first_token is the front end's
// clock from it to the first token's output. arrival_time is taken before
// the request's inputs are processed (vllm/v1/engine/input_processor.py
// process_inputs: tokenising and the multimodal processor run after it) and
// the engine core stamps QUEUED only when its busy loop takes the request,
// between two steps; that hop is not in any latency. So the model phases
// are placed back from the first token: prefill [start+ttft-prefill,
// start+ttft], the queue before it, decode from the first token for
// time_in_model_decode, to the span's end at the latest (the first token's
// output may have reached the front end later after its step than the last
// one did). Laid out from the span's start instead, every phase would be
// early by the hop, a step of the engine's and the multimodal processing:
// more than a 100 ms bin for an image prompt under load.
//
// Without time_to_first_token, prefill or decode, or when the first does not
// fit (less than queue and prefill, or past the span's end: not vLLM V1's),
// the phases run one after
// the other from the span's start: queue (time_in_queue), then prefill
// (time_in_model_prefill) and decode (time_in_model_decode); without both of
// those, one inference phase (time_in_model_inference); without that
// either, prefill alone if given, else no model phase (the older engine's
// span: its time_in_queue runs from the arrival, on its clock). Every
// gen_ai.latency.* that vLLM V1 sets must be a non-negative number of
// seconds (a string is malformed, not coerced); e2e is only checked.
func recognizeVLLM(span ptrace.Span, req *Request, d *draft) string {
	var queue, prefill, decode, inference, ttft int64 = -1, -1, -1, -1, -1
	u := newUsage()
	if why := readLatencies(span.Attributes(), &u, secondsNS, []latency{
		{vllmQueue, &queue, nil}, {vllmPrefill, &prefill, nil}, {vllmDecode, &decode, nil}, {vllmInference, &inference, nil},
		{vllmTTFT, &ttft, nil}, {vllmE2E, nil, nil},
	}); why != "" {
		return why
	}
	// vLLM names its counts the old way; the newer names are a fallback.
	u.apply(req, d, true)
	if prefill >= 0 && decode >= 0 && ttft >= 0 && ttft <= d.endTol-d.start && ttft-prefill >= max(queue, 0) {
		// Offsets from the start: none overflows (ttft fits in the span,
		// prefill and queue in ttft).
		first := d.start + ttft
		scheduled := first - prefill
		if queue >= 0 {
			if why := d.add(PhaseQueue, scheduled-queue, scheduled); why != "" {
				return why
			}
		}
		if why := d.add(PhasePrefill, scheduled, first); why != "" {
			return why
		}
		// The decode may end past the span by what the first token's way
		// back took longer than the last one's, at most the hop and that
		// way back together (ttft less queue and prefill); by more, the
		// latencies do not fit the span.
		last := addNS(first, decode)
		if last > d.endTol && last-d.endTol > ttft-prefill-max(queue, 0) {
			return ReasonPhasesExceedSpan
		}
		return d.add(PhaseDecode, min(first, d.end), min(last, d.end))
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

// latency is an attribute a family reads as a duration (or, with its own
// parse, another number); a nil dst only checks it.
type latency struct {
	key   string
	dst   *int64
	parse func(pcommon.Value) (int64, string) // nil: readLatencies' parse
}

// readLatencies reads a span's attributes: those in latencies with parse,
// the token counts into u. It returns the first reason one was malformed.
func readLatencies(attrs pcommon.Map, u *usage, parse func(pcommon.Value) (int64, string), latencies []latency) string {
	reason := ""
	for k, v := range attrs.All() {
		why, found := "", false
		for _, l := range latencies {
			if l.key != k {
				continue
			}
			found = true
			p := parse
			if l.parse != nil {
				p = l.parse
			}
			var n int64
			if n, why = p(v); l.dst != nil {
				*l.dst = n
			}
			break
		}
		if !found {
			why = u.read(k, v)
		}
		if why != "" && reason == "" {
			reason = why
		}
	}
	return reason
}

// usage collects the token counts and model a GenAI-style span carries,
// under both the older (prompt/completion) and the current (input/output)
// attribute names.
type usage struct {
	prompt, completion, input, output int64
	reqModel, respModel               string
}

func newUsage() usage { return usage{prompt: -1, completion: -1, input: -1, output: -1} }

// read takes one attribute if it is a usage one, and says why its value is
// malformed; other keys are ignored.
func (u *usage) read(k string, v pcommon.Value) (why string) {
	switch k {
	case attrPromptTokens:
		u.prompt, why = tokenCount(v)
	case attrCompletionTokens:
		u.completion, why = tokenCount(v)
	case attrInputTokens:
		u.input, why = tokenCount(v)
	case attrOutputTokens:
		u.output, why = tokenCount(v)
	case attrRequestModel:
		u.reqModel = str(v)
	case attrResponseModel:
		u.respModel = str(v)
	}
	return why
}

// apply sets the request's tokens, preferring the older names when
// oldFirst, and its model (the requested one, else the responding one).
func (u *usage) apply(req *Request, d *draft, oldFirst bool) {
	if oldFirst {
		d.in, d.out = firstKnown(u.prompt, u.input), firstKnown(u.completion, u.output)
	} else {
		d.in, d.out = firstKnown(u.input, u.prompt), firstKnown(u.output, u.completion)
	}
	req.Model = u.reqModel
	if req.Model == "" {
		req.Model = u.respModel
	}
}

func firstKnown(a, b int64) int64 {
	if a >= 0 {
		return a
	}
	return b
}
