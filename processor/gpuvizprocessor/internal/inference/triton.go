package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// NVIDIA Triton (--trace-config mode=opentelemetry, OTLP/HTTP) sends per
// request: a root span InferRequest (HTTP/GRPC timestamps as events), a child
// named after the model with attributes triton.model_name,
// triton.model_version, triton.trace_id, triton.trace_parent_id and events
// REQUEST_START, QUEUE_START, REQUEST_END, and under it a span "compute"
// with events COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START,
// COMPUTE_END (it starts at COMPUTE_START and ends at COMPUTE_END). An
// ensemble adds a model span per composing model under the ensemble's.
//
// Which spans produce a Request:
//   - any span whose events include COMPUTE_START and COMPUTE_END (the
//     compute span; or a span carrying every event, as other exporters of
//     Triton's trace activities do): phases queue [QUEUE_START, or the span's
//     start, COMPUTE_START] — empty, so dropped, on Triton's own compute span,
//     which starts at COMPUTE_START — and inference [COMPUTE_START,
//     COMPUTE_END]. Model: triton.model_name when the span has it (Triton's
//     compute span does not: the model is on its parent).
//   - a model span (string triton.model_name, no compute events): the
//     request's whole window with its model, and no phases (compute is in the
//     child).
//
// An ensemble's or a BLS model's request is one model span at the top
// (triton.trace_parent_id 0) with a model span and a compute span for every
// composing model it calls (docs/user_guide/trace.md, "OpenTelemetry trace
// support": "For ensembles, every composing model produces model and compute
// spans in addition to one model span for the ensemble"); src/tracer.cc
// (TraceManager::Trace::StartSpan) gives a composing model's span the
// ensemble's trace as triton.trace_parent_id, an integer above 0. The top
// span is the request; a composing model's span, like a compute span, is
// Aggregate: counted as requests, an ensemble of preprocessing, model and
// postprocessing would be four requests, each with an energy share.
//
// InferRequest is not an inference span (it has no model and its compute is
// below). Events must come in Triton's order: REQUEST_START ≤ QUEUE_START ≤
// COMPUTE_START ≤ COMPUTE_INPUT_END ≤ COMPUTE_OUTPUT_START ≤ COMPUTE_END ≤
// REQUEST_END for those present, each at most once, and COMPUTE_START and
// COMPUTE_END together; else the span is malformed (events_out_of_order).
const (
	attrTritonModelName = "triton.model_name"
	attrTritonParentID  = "triton.trace_parent_id"
)

// Triton's activities, in the order they happen.
const (
	tritonRequestStart = iota
	tritonQueueStart
	tritonComputeStart
	tritonComputeInputEnd
	tritonComputeOutputStart
	tritonComputeEnd
	tritonRequestEnd
	tritonEvents
)

// tritonComputeSpanName is the span Triton opens around a model's
// execution, under the model-named span that accounts for the request.
const tritonComputeSpanName = "compute"

func tritonEvent(name string) int {
	switch name {
	case "REQUEST_START":
		return tritonRequestStart
	case "QUEUE_START":
		return tritonQueueStart
	case "COMPUTE_START":
		return tritonComputeStart
	case "COMPUTE_INPUT_END":
		return tritonComputeInputEnd
	case "COMPUTE_OUTPUT_START":
		return tritonComputeOutputStart
	case "COMPUTE_END":
		return tritonComputeEnd
	case "REQUEST_END":
		return tritonRequestEnd
	}
	return -1
}

func (r *Recognizer) recognizeTriton(span ptrace.Span, req *Request, d *draft, now time.Time) (bool, string) {
	var at [tritonEvents]int64
	var seen [tritonEvents]bool
	duplicate := false
	events := span.Events()
	for i := 0; i < events.Len(); i++ {
		e := events.At(i)
		k := tritonEvent(e.Name())
		if k < 0 {
			continue
		}
		if seen[k] {
			duplicate = true
		}
		seen[k] = true
		ts := uint64(e.Timestamp())
		if ts > 1<<63-1 {
			ts = 0 // before any span's start: fails the phase checks
		}
		at[k] = int64(ts)
	}
	compute := seen[tritonComputeStart] || seen[tritonComputeEnd]
	model := ""
	if v, ok := span.Attributes().Get(attrTritonModelName); ok {
		model = str(v)
	}
	if !compute && model == "" {
		return false, ""
	}
	if why := r.window(span, d, now); why != "" {
		return true, why
	}
	req.Model = model
	if v, ok := span.Attributes().Get(attrTritonParentID); ok && v.Type() == pcommon.ValueTypeInt && v.Int() != 0 {
		req.Aggregate = true // a composing model's: its ensemble's span is the request
	}
	if duplicate || seen[tritonComputeStart] != seen[tritonComputeEnd] {
		return true, ReasonEventsOutOfOrder
	}
	last := int64(-1 << 63)
	for k := range tritonEvents {
		if !seen[k] {
			continue
		}
		if at[k] < last {
			return true, ReasonEventsOutOfOrder
		}
		last = at[k]
	}
	if !compute {
		return true, ""
	}
	queueStart := d.start
	if seen[tritonQueueStart] {
		queueStart = at[tritonQueueStart]
	}
	if why := d.add(PhaseQueue, queueStart, at[tritonComputeStart]); why != "" {
		return true, why
	}
	return true, d.add(PhaseInference, at[tritonComputeStart], at[tritonComputeEnd])
}
