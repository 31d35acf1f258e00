package inferspans

import (
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// HuggingFace TGI's router (tracing-opentelemetry over the opentelemetry-otlp
// batch pipeline): the HTTP server span of its axum tracing layer and, under
// it, the chat_completions handler span (INTERNAL) whose timing fields are
// Rust Debug strings. TGI measures from the handler's start: validation
// (tokenisation, until the request is queued), queue (until a batch takes
// it), inference (until generation returns); time_per_token is inference
// over generated tokens. router/src/logging.rs builds the resource as
// Resource::new([service.name]) (--otlp-service-name), which replaces the
// SDK's default: no telemetry.sdk.*, and OTEL_RESOURCE_ATTRIBUTES is not
// read. Spans close, and are exported, when dropped: a request whose client
// went away still sends both, without the fields recorded on success.
const (
	tgiScope   = "opentelemetry-otlp"
	tgiService = "text-generation-inference.router"
	tgiRoute   = "/v1/chat/completions"
)

func appendTGI(td ptrace.Traces, r infersim.Request, e infersim.Engine, env Env, parent pcommon.SpanID) {
	ss := scopeSpans(td, resource(e, env, kv{"service.name", tgiService}), tgiScope)
	aborted := r.Finish == infersim.FinishAbort
	us := int64(time.Microsecond)

	server := newSpan(ss, r, "POST "+tgiRoute, ptrace.SpanKindServer, spanID(r, saltTGIServer), parent, r.Arrival-60*us, r.Finished+120*us)
	a := server.Attributes()
	a.PutStr("http.request.method", "POST")
	a.PutStr("http.route", tgiRoute)
	a.PutStr("url.path", tgiRoute)
	a.PutStr("url.scheme", "http")
	a.PutStr("network.protocol.version", "1.1")
	a.PutStr("user_agent.original", "python-httpx/0.27.0")
	if !aborted {
		a.PutInt("http.response.status_code", 200)
	}

	handler := newSpan(ss, r, "chat_completions", ptrace.SpanKindInternal, r.SpanID(), server.SpanID(), r.Arrival, r.Finished)
	h := handler.Attributes()
	h.PutStr("code.filepath", "router/src/server.rs")
	h.PutStr("code.namespace", "text_generation_router::server")
	h.PutInt("code.lineno", 1120)
	h.PutStr("thread.name", "tokio-runtime-worker")
	h.PutInt("thread.id", int64(2+draw(r, saltThread)%16))
	validation := r.Queued - r.Arrival
	total := r.Finished - r.Arrival
	if !aborted {
		inference := r.Finished - r.Scheduled
		h.PutStr("total_time", rustDuration(time.Duration(total)))
		h.PutStr("validation_time", rustDuration(time.Duration(validation)))
		h.PutStr("queue_time", rustDuration(time.Duration(r.Scheduled-r.Queued)))
		h.PutStr("inference_time", rustDuration(time.Duration(inference)))
		h.PutStr("time_per_token", rustDuration(time.Duration(inference/int64(max(r.OutputTokens, 1)))))
		h.PutStr("seed", "Some("+strconv.FormatUint(draw(r, saltSeed)%1_000_000, 10)+")")
	}
	// The handler's own work: validation and the response; it awaits the
	// rest.
	busy := validation + 150*us
	h.PutInt("busy_ns", busy)
	h.PutInt("idle_ns", total-busy)
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
