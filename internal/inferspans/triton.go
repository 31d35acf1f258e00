package inferspans

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// Triton (--trace-config mode=opentelemetry, level=TIMESTAMPS) serving the
// TensorRT-LLM backend: every span SERVER, the root InferRequest with the
// HTTP timestamps as events, the model-named request span (triton.*
// attributes; REQUEST_START, QUEUE_START, REQUEST_END) and under it the
// compute span from COMPUTE_START to COMPUTE_END. Triton does not tell
// prefill from decode: compute covers both. A trace ends when its request
// is released, cancelled ones too; one never scheduled has no compute span.
// The resource is src/tracer.cc InitTracer's: Resource::Create (the C++
// SDK's telemetry.sdk.* and OTEL_RESOURCE_ATTRIBUTES) over service.name
// triton-inference-server and any --trace-config opentelemetry,resource=.
const (
	tritonScope   = "triton-server"
	tritonService = "triton-inference-server"
	tritonModel   = "tensorrt_llm"
)

func appendTriton(td ptrace.Traces, r infersim.Request, e infersim.Engine, env Env, parent pcommon.SpanID) {
	own := []kv{
		{"telemetry.sdk.language", "cpp"},
		{"telemetry.sdk.name", "opentelemetry"},
		{"telemetry.sdk.version", cppSDKVersion},
		{"service.name", tritonService},
	}
	ss := scopeSpans(td, resource(e, env, own...), tritonScope)
	us := int64(time.Microsecond)

	recvStart := r.Arrival - 120*us
	root := newSpan(ss, r, "InferRequest", ptrace.SpanKindServer, spanID(r, saltTritonRoot), parent, recvStart, r.Finished+100*us)
	event(root, "HTTP_RECV_START", recvStart)
	event(root, "HTTP_RECV_END", r.Arrival-20*us)
	event(root, "HTTP_SEND_START", r.Finished+40*us)
	event(root, "HTTP_SEND_END", r.Finished+90*us)

	requestEnd := r.Finished + 30*us
	model := newSpan(ss, r, tritonModel, ptrace.SpanKindServer, r.SpanID(), root.SpanID(), r.Arrival, requestEnd)
	a := model.Attributes()
	a.PutStr("triton.model_name", tritonModel)
	a.PutInt("triton.model_version", 1)
	// Triton numbers its traces from 1 as requests arrive; each episode
	// is a fresh engine.
	a.PutInt("triton.trace_id", int64(r.Seq)+1)
	a.PutInt("triton.trace_parent_id", 0)
	a.PutStr("triton.request_id", hexID(r, saltRequestID)[:16])
	event(model, "REQUEST_START", r.Arrival)
	event(model, "QUEUE_START", r.Queued)
	event(model, "REQUEST_END", requestEnd)

	if r.Scheduled == 0 {
		return
	}
	compute := newSpan(ss, r, "compute", ptrace.SpanKindServer, spanID(r, saltTritonCompute), model.SpanID(), r.Scheduled, r.Finished)
	event(compute, "COMPUTE_START", r.Scheduled)
	if r.FirstToken != 0 {
		event(compute, "COMPUTE_INPUT_END", r.Scheduled+min((r.FirstToken-r.Scheduled)/20, 200*us))
		event(compute, "COMPUTE_OUTPUT_START", r.Finished-min((r.Finished-r.FirstToken)/20, 150*us))
	}
	event(compute, "COMPUTE_END", r.Finished)
}
