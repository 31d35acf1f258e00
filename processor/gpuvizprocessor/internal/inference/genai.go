package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// OpenTelemetry GenAI semantic conventions: an inference span is named
// "{gen_ai.operation.name} {gen_ai.request.model}" and carries
// gen_ai.operation.name; the span is the request.
const (
	attrOperationName = "gen_ai.operation.name"
	attrTTFC          = "gen_ai.response.time_to_first_chunk"
)

// genAINotInference lists the GenAI operations that are not a model's
// inference: their spans would claim GPU time that belongs to the inference
// spans under them, or that no model spent. These are the well-known values
// of gen_ai.operation.name (open-telemetry/semantic-conventions-genai,
// model/gen-ai/registry.yaml and spans.yaml) that run no model of their own:
// agents and workflows (create_agent, invoke_agent, invoke_workflow), an
// agent's planning phase (plan, an INTERNAL span whose LLM call "SHOULD be a
// child of the plan span"), tools (execute_tool), vector-store retrieval
// (retrieval), memory stores (create_memory_store, search_memory,
// create_memory, update_memory, upsert_memory, delete_memory,
// delete_memory_store, INTERNAL when the store runs in the same process) and
// fetch_response (fetching a stored response "without performing
// inference"). apply_guardrail stays: a guardrail service may run a model.
func genAINotInference(op string) bool {
	switch op {
	case "", "execute_tool", "invoke_agent", "create_agent", "invoke_workflow", "plan",
		"retrieval", "fetch_response",
		"create_memory_store", "search_memory", "create_memory", "update_memory",
		"upsert_memory", "delete_memory", "delete_memory_store":
		return true
	}
	return false
}

// recognizeGenAI reads a span that follows the GenAI conventions: any span
// whose gen_ai.operation.name is a string naming an inference operation
// (chat, text_completion, generate_content, embeddings, or a custom value;
// not one genAINotInference lists). With gen_ai.response.time_to_first_chunk (seconds),
// phases are prefill [start, start+ttfc] and decode [then, end]; without it,
// one inference phase covers the span.
//
// A span of kind CLIENT is the application's call (opentelemetry-
// instrumentation-openai-v2 and the like, whose propagated context makes
// the server's span its child): it is recognised the same way, marked
// Client, since the server's span accounts for the request. Every other
// kind (SERVER, INTERNAL, unset) is the server side.
func (r *Recognizer) recognizeGenAI(span ptrace.Span, req *Request, d *draft, now time.Time) (bool, string) {
	attrs := span.Attributes()
	op, ok := attrs.Get(attrOperationName)
	if !ok || genAINotInference(str(op)) {
		return false, ""
	}
	if why := r.window(span, d, now); why != "" {
		return true, why
	}
	ttfc := int64(-1)
	u := newUsage()
	reason := ""
	for k, v := range attrs.All() {
		var why string
		if k == attrTTFC {
			ttfc, why = secondsNS(v)
		} else {
			why = u.read(k, v)
		}
		if why != "" && reason == "" {
			reason = why
		}
	}
	if reason != "" {
		return true, reason
	}
	u.apply(req, d, false)
	req.Client = span.Kind() == ptrace.SpanKindClient
	if ttfc < 0 {
		return true, d.add(PhaseInference, d.start, d.end)
	}
	if why := d.next(PhasePrefill, ttfc); why != "" {
		return true, why
	}
	return true, d.add(PhaseDecode, min(d.cursor, d.end), d.end)
}
