package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// HuggingFace TGI exports (OTLP gRPC, through tracing-opentelemetry) spans
// named after its Rust functions. Which of them produce a Request:
//
//   - Handler spans generate, generate_stream, completions and
//     chat_completions, once TGI has recorded their timing fields
//     (total_time, validation_time, queue_time, inference_time,
//     time_per_token: Rust Debug strings such as "1.234567ms"). TGI records
//     them only when the request succeeds; a handler span without any of them
//     (a failed request, or the inner Infer::generate/generate_stream span of
//     the same name) is not an inference span. TGI measures from the handler's
//     start: validation (tokenisation, on the CPU), then queue, then
//     inference, so the phases are queue [start+validation_time, +queue_time]
//     and inference [queue end, +inference_time]; without validation_time the
//     queue starts at the span's start.
//   - Backend spans prefill and decode: one batched forward step, one phase
//     named after the span. They belong to the batch's own trace (linked, not
//     parented, to the requests), and each step is seen up to three times,
//     nested: the batching task's prefill/decode, the ShardedClient's, and one
//     per shard from the gRPC Client (those two carry the batch "size").
//   - infer: a request's child span while it is in a running batch (a new one
//     per decode step), one inference phase.
//
// The backend names are generic, so they count as TGI only with a TGI mark:
// tracing-opentelemetry's code.namespace on the span starting with
// "text_generation", or the resource's service.name starting with
// "text-generation-inference" (TGI's default, --otlp-service-name).
// TGI puts no token counts or model on its spans: those stay unknown.
// The other spans (entry, queued, batch, waiting, send_generation, health,
// ...) are not inference spans.
const (
	tgiTotalTime      = "total_time"
	tgiValidationTime = "validation_time"
	tgiQueueTime      = "queue_time"
	tgiInferenceTime  = "inference_time"
	tgiTimePerToken   = "time_per_token"

	attrCodeNamespace  = "code.namespace"
	attrServiceName    = "service.name"
	tgiNamespacePrefix = "text_generation"
	tgiServicePrefix   = "text-generation-inference"
)

func (r *Recognizer) recognizeTGI(span ptrace.Span, resource pcommon.Resource, d *draft, now time.Time) (bool, string) {
	switch name := span.Name(); name {
	case "generate", "generate_stream", "completions", "chat_completions":
		return r.tgiHandler(span, d, now)
	case "prefill", "decode", "infer":
		if !tgiMarked(span.Attributes(), resource.Attributes()) {
			return false, ""
		}
		if why := r.window(span, d, now); why != "" {
			return true, why
		}
		phase := name
		if name == "infer" {
			phase = PhaseInference
		}
		return true, d.add(phase, d.start, d.end)
	}
	return false, ""
}

func tgiMarked(span, resource pcommon.Map) bool {
	if v, ok := span.Get(attrCodeNamespace); ok && strings.HasPrefix(str(v), tgiNamespacePrefix) {
		return true
	}
	v, ok := resource.Get(attrServiceName)
	return ok && strings.HasPrefix(str(v), tgiServicePrefix)
}

func (r *Recognizer) tgiHandler(span ptrace.Span, d *draft, now time.Time) (bool, string) {
	var validation, queue, inference int64 = -1, -1, -1
	found := false
	reason := ""
	for k, v := range span.Attributes().All() {
		var dur *int64
		switch k {
		case tgiValidationTime:
			dur = &validation
		case tgiQueueTime:
			dur = &queue
		case tgiInferenceTime:
			dur = &inference
		case tgiTotalTime, tgiTimePerToken:
			var ignored int64
			dur = &ignored
		default:
			continue
		}
		found = true
		if v.Type() != pcommon.ValueTypeStr {
			reason = firstReason(reason, ReasonBadDurationString)
			continue
		}
		x, err := ParseRustDuration(v.Str())
		if err != nil {
			reason = firstReason(reason, ReasonBadDurationString)
			continue
		}
		*dur = int64(x)
	}
	if !found {
		return false, ""
	}
	if why := r.window(span, d, now); why != "" {
		return true, why
	}
	if reason != "" {
		return true, reason
	}
	if validation >= 0 {
		if validation > d.endTol-d.start {
			return true, ReasonPhasesExceedSpan
		}
		d.cursor = d.start + validation
	}
	if queue >= 0 {
		if why := d.next(PhaseQueue, queue); why != "" {
			return true, why
		}
	}
	if inference >= 0 {
		return true, d.next(PhaseInference, inference)
	}
	return true, ""
}

func firstReason(have, next string) string {
	if have != "" {
		return have
	}
	return next
}
