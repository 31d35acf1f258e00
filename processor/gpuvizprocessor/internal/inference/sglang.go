package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"math"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// SGLang (--enable-trace --otlp-traces-endpoint) traces a request as a tree,
// as python/sglang/srt/observability/trace.py (TraceReqContext) builds it,
// all spans INTERNAL on the tracer "sglang server":
//
//   - a root span "{role} Req {rid[:8]}" in the tokenizer, with attributes
//     rid (the whole id) and module ("sglang::" and the module's name). The
//     role is empty on a unified server (the name then starts with a
//     space), "prefill" or "decode" on the servers of a prefill/decode
//     disaggregation, "router" on the disaggregation's router;
//   - under it one thread span per process that handled the request,
//     "{label} [TP {rank}] (host:{host_id[:8]} | pid:{pid})", carrying
//     host_id, pid, thread_label and tp_rank/pp_rank/dp_rank: the
//     tokenizer's, and every TP rank's scheduler's;
//   - under those the stage slices, each linked to the one before: tokenize,
//     dispatch, request_process, prefill_waiting, prefill_forward,
//     chunked_prefill, decode_waiting, decode_forward, decode_loop,
//     prefill_transfer_kv_cache, ...
//
// When the tokenizer has the finished output, the root gets the gen_ai.*
// attributes (observability/req_time_stats.py,
// convert_to_gen_ai_span_attrs): token counts under the old names
// gen_ai.usage.prompt_tokens and gen_ai.usage.completion_tokens, with
// gen_ai.usage.cached_tokens; gen_ai.response.model; and latencies in
// seconds on the tokenizer's clock, from the request's creation (the root's
// start):
//
//	time_to_first_token     = first token - created
//	e2e                     = finished - created
//	time_in_model_prefill   = first token - dispatched to the scheduler
//	time_in_model_decode    = finished - first token
//	time_in_model_inference = finished - dispatched
//
// There is no time_in_queue: the scheduler's waiting (prefill_waiting) is
// inside time_in_model_prefill, and the root cannot tell it apart. So the
// phases are prefill [start+ttft-time_in_model_prefill, start+ttft] and
// decode [start+ttft, +time_in_model_decode] (to start+e2e without it);
// without ttft or time_in_model_prefill, one inference phase
// [start+e2e-time_in_model_inference, start+e2e]; without those, none. A
// time_in_queue, should a version set it, is taken as the queue from the
// dispatch, before the model phase. An aborted request's root ends without
// any gen_ai.* attribute: it is still the request, with its window and no
// phases.
//
// Only the root produces a Request. Its names ("Req" and a space, the rid's
// start) need an SGLang mark: a module starting with "sglang::", a string
// rid starting with the name's id, or the resource's service.name starting
// with "sglang". The router's root is not an inference span: it runs no
// model, and the prefill and decode servers' roots account for the GPUs.
//
// The thread and slice spans are not recognised at all rather than marked
// Aggregate. Aggregate is for spans whose GPU work is worth enriching on its
// own though a request accounts for it (a batch step of many requests,
// Triton's compute span); these are the root's request again, per process
// and per stage: the tokenizer's are CPU work, and the scheduler's come once
// per TP rank on a resource that names all the engine's GPUs, so each rank's
// copy would be given the same GPUs' statistics and all their drawn energy,
// while the stages repeat the root's phases (which the processor already
// draws as phase spans). Not recognised, they are not counted as requests
// either.
const (
	sglangCachedTokens = "gen_ai.usage.cached_tokens"
	sglangRID          = "rid"
	sglangModule       = "module"
	sglangModulePrefix = "sglang::"
	sglangServicePref  = "sglang"
	sglangRouterRole   = "router"
	sglangReq          = "Req "
	// sglangMaxID is the most bytes rid[:8] takes: 8 code points.
	sglangMaxID = 8 * 4
)

// sglangRootName parses "{role} Req {id}" (and "Req {id}"), role and id
// without spaces.
func sglangRootName(name string) (role, id string, ok bool) {
	i := strings.LastIndex(name, sglangReq)
	if i < 0 {
		return "", "", false
	}
	id = name[i+len(sglangReq):]
	if id == "" || len(id) > sglangMaxID || strings.IndexByte(id, ' ') >= 0 {
		return "", "", false
	}
	if i == 0 {
		return "", id, true
	}
	if name[i-1] != ' ' {
		return "", "", false
	}
	role = name[:i-1]
	if strings.IndexByte(role, ' ') >= 0 {
		return "", "", false
	}
	return role, id, true
}

func sglangMarked(span, resource pcommon.Map, id string) bool {
	if v, ok := span.Get(sglangModule); ok && strings.HasPrefix(str(v), sglangModulePrefix) {
		return true
	}
	if v, ok := span.Get(sglangRID); ok && v.Type() == pcommon.ValueTypeStr && strings.HasPrefix(v.Str(), id) {
		return true
	}
	v, ok := resource.Get(attrServiceName)
	return ok && strings.HasPrefix(str(v), sglangServicePref)
}

func (r *Recognizer) recognizeSGLang(span ptrace.Span, resource pcommon.Resource, req *Request, d *draft, now time.Time) (bool, string) {
	role, id, ok := sglangRootName(span.Name())
	if !ok || role == sglangRouterRole || !sglangMarked(span.Attributes(), resource.Attributes(), id) {
		return false, ""
	}
	if why := r.window(span, d, now); why != "" {
		return true, why
	}
	var queue, prefill, decode, inference, ttft, e2e int64 = -1, -1, -1, -1, -1, -1
	u := newUsage()
	if why := readLatencies(span.Attributes(), &u, secondsNS, []latency{
		{vllmQueue, &queue, nil}, {vllmPrefill, &prefill, nil}, {vllmDecode, &decode, nil}, {vllmInference, &inference, nil},
		{vllmTTFT, &ttft, nil}, {vllmE2E, &e2e, nil}, {sglangCachedTokens, nil, tokenCount},
	}); why != "" {
		return true, why
	}
	u.apply(req, d, true)
	// Offsets from the start; the differences of two latencies (each at
	// least 0) cannot overflow, and a negative one puts the dispatch before
	// the span: phases_exceed_span.
	var dispatched int64
	switch {
	case ttft >= 0 && prefill >= 0:
		dispatched = ttft - prefill
	case e2e >= 0 && inference >= 0:
		dispatched = e2e - inference
	default:
		return true, ""
	}
	from := d.at(dispatched)
	if queue >= 0 {
		queued := d.at(addNS(dispatched, queue))
		if why := d.add(PhaseQueue, from, queued); why != "" {
			return true, why
		}
		from = queued
	}
	if ttft < 0 || prefill < 0 {
		return true, d.add(PhaseInference, from, d.at(e2e))
	}
	first := d.at(ttft)
	if why := d.add(PhasePrefill, from, first); why != "" {
		return true, why
	}
	switch {
	case decode >= 0:
		return true, d.add(PhaseDecode, first, d.at(addNS(ttft, decode)))
	case e2e >= 0:
		return true, d.add(PhaseDecode, first, d.at(e2e))
	}
	return true, ""
}

// addNS is a+b, b ≥ 0, saturated at the largest int64.
func addNS(a, b int64) int64 {
	if a > 0 && b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}
