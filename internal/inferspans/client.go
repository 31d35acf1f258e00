package inferspans

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// The application that calls the engine through the OpenAI client library,
// instrumented by opentelemetry-instrumentation-openai-v2 (GenAI semantic
// conventions): one CLIENT span per call, "chat {model}", whose context the
// library propagates (traceparent), so the server span is its child.
const (
	clientService = "chat-app"
	clientScope   = "opentelemetry.instrumentation.openai_v2"
	clientPort    = 8000
)

// appendClient appends the application's span of r and returns its ID. It
// starts before the server sees the request (connection, request body) and
// ends after the engine let go of it (response body); a call the
// application gave up on (an aborted request) ends with the client
// library's timeout error.
func appendClient(td ptrace.Traces, r infersim.Request, e infersim.Engine) pcommon.SpanID {
	res := pcommon.NewMap()
	for _, a := range pythonSDK(clientService) {
		res.PutStr(a.k, a.v)
	}
	ss := scopeSpans(td, res, clientScope)
	model := modelName(e)
	id := spanID(r, saltClient)
	start := r.Arrival - between(r, saltClientLead, int64(500*time.Microsecond), int64(2*time.Millisecond))
	end := r.Finished + between(r, saltClientTail, int64(200*time.Microsecond), int64(time.Millisecond))
	sp := newSpan(ss, r, "chat "+model, ptrace.SpanKindClient, id, pcommon.SpanID{}, start, end)
	a := sp.Attributes()
	a.PutStr("gen_ai.operation.name", "chat")
	a.PutStr("gen_ai.provider.name", "openai")
	a.PutStr("gen_ai.request.model", model)
	if r.MaxTokens > 0 {
		a.PutInt("gen_ai.request.max_tokens", int64(r.MaxTokens))
	}
	a.PutDouble("gen_ai.request.temperature", temperature(r))
	a.PutDouble("gen_ai.request.top_p", topP(r))
	a.PutStr("server.address", e.Name)
	a.PutInt("server.port", clientPort)
	if r.Finish == infersim.FinishAbort {
		a.PutStr("error.type", "APITimeoutError")
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage("Request timed out.")
		return id
	}
	a.PutStr("gen_ai.response.id", chatID(r))
	a.PutStr("gen_ai.response.model", model)
	a.PutEmptySlice("gen_ai.response.finish_reasons").AppendEmpty().SetStr(r.Finish)
	a.PutInt("gen_ai.usage.input_tokens", int64(r.PromptTokens))
	a.PutInt("gen_ai.usage.output_tokens", int64(r.OutputTokens))
	return id
}

// chatID is the id of the chat completion (the response's "id"), which the
// OpenAI-compatible servers derive from their request id.
func chatID(r infersim.Request) string { return "chatcmpl-" + hexID(r, saltRequestID) }
