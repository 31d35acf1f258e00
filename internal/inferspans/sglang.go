package inferspans

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// SGLang (--enable-trace), as python/sglang/srt/observability/trace.py
// (TraceReqContext), observability/req_time_stats.py (the stages: the
// tokenizer's are RequestStage.TOKENIZE, "tokenize", and
// API_SERVER_DISPATCH, "api_server_dispatch", whose end is the dispatch the
// gen_ai.latency.time_in_model_* latencies count from) and
// managers/tokenizer_manager_components/request_tracing.py (make_span_attrs)
// have it, in a unified (not disaggregated) server at trace level 2 ("all
// slices except nested ones"): the per-chunk chunked_prefill and per-step
// decode_loop slices and the schedule events are level 3, and the
// simulation does not record a request's steps.
//
// The request's root span, "{role} Req {rid[:8]}" (role is empty when
// unified), lives in the tokenizer; under it one thread span per process
// that handled the request, "{label} [TP {rank}] (host:{host_id[:8]} |
// pid:{pid})", carrying host_id (/etc/machine-id), pid and tp_rank; under
// those the stage slices, each linked to the one before (across processes
// too). All INTERNAL, on the tracer "sglang server". The root gets the
// gen_ai.* attributes when the tokenizer receives the finished output; its
// latencies are tokenizer times, so prefill and inference run from the
// dispatch to the scheduler, and there is no time_in_queue. Every TP rank's
// scheduler traces the request. A retraction (preemption) adds a "retract"
// event and a second prefill slice; the simulation does not record when
// one happened, so neither is here.
//
// An aborted request ends the root span without the gen_ai.* attributes
// (TokenizerManager._handle_abort_req calls set_finished_time only); only
// the tokenizer's spans come with it here: what becomes of the schedulers'
// thread spans then, the code we read does not settle. The resource is
// process_tracing_init's: Resource.create({service.name: "sglang"}), which
// OTEL_SERVICE_NAME cannot override.
const (
	sglangScope   = "sglang server"
	sglangService = "sglang"
)

func appendSGLang(td ptrace.Traces, r infersim.Request, e infersim.Engine, env Env, parent pcommon.SpanID) bool {
	t := &sglangTrace{
		ss:     scopeSpans(td, resource(e, env, pythonSDK(sglangService)...), sglangScope),
		r:      r,
		hostID: machineID(env.Host),
	}
	rid := hexID(r, saltRequestID)
	root := newSpan(t.ss, r, " Req "+rid[:8], ptrace.SpanKindInternal, r.SpanID(), parent, r.Arrival, r.Finished)
	a := root.Attributes()
	a.PutStr("rid", rid)
	a.PutStr("module", "sglang::request")

	us := int64(time.Microsecond)
	tokenized := max(r.Arrival, r.Queued-100*us)
	dispatched := tokenized + 20*us
	received := min(dispatched+20*us, r.Queued)
	tok := t.thread(root, "Tokenizer", -1, serverPID(e), r.Arrival, dispatched)
	last := t.slice(tok, "tokenize", r.Arrival, tokenized, pcommon.SpanID{})
	last = t.slice(tok, "api_server_dispatch", tokenized, dispatched, last)
	if r.Finish == infersim.FinishAbort {
		return true
	}

	a.PutInt("gen_ai.usage.completion_tokens", int64(r.OutputTokens))
	a.PutInt("gen_ai.usage.prompt_tokens", int64(r.PromptTokens))
	a.PutInt("gen_ai.usage.cached_tokens", 0) // the simulation has no prefix cache
	a.PutStr("gen_ai.request.id", rid)
	if r.MaxTokens > 0 {
		a.PutInt("gen_ai.request.max_tokens", int64(r.MaxTokens))
	}
	a.PutDouble("gen_ai.request.top_p", topP(r))
	a.PutDouble("gen_ai.request.temperature", temperature(r))
	a.PutInt("gen_ai.request.n", 1)
	a.PutStr("gen_ai.response.model", modelName(e))
	a.PutStr("gen_ai.response.finish_reasons", finishReasons(r))
	a.PutDouble("gen_ai.latency.time_to_first_token", secs(r.FirstToken-r.Arrival))
	a.PutDouble("gen_ai.latency.e2e", secs(r.Finished-r.Arrival))
	a.PutDouble("gen_ai.latency.time_in_model_decode", secs(r.Finished-r.FirstToken))
	a.PutDouble("gen_ai.latency.time_in_model_inference", secs(r.Finished-dispatched))
	a.PutDouble("gen_ai.latency.time_in_model_prefill", secs(r.FirstToken-dispatched))

	for rank, gpu := range e.GPUs {
		sched := t.thread(root, "Scheduler", rank, int64(nvmlsim.SimulatedPID(gpu)), received, r.Finished)
		prev := t.slice(sched, "request_process", received, r.Queued, last)
		prev = t.slice(sched, "prefill_waiting", r.Queued, r.Scheduled, prev)
		prev = t.slice(sched, "prefill_forward", r.Scheduled, r.FirstToken, prev)
		if r.OutputTokens > 1 {
			// The first decode step is scheduled as the prefill's ends.
			prev = t.slice(sched, "decode_waiting", r.FirstToken, r.FirstToken, prev)
			t.slice(sched, "decode_forward", r.FirstToken, r.Finished, prev)
		}
	}
	return true
}

// sglangTrace appends the thread and slice spans of one request, each with
// its own ID.
type sglangTrace struct {
	ss     ptrace.SpanSlice
	r      infersim.Request
	hostID string
	n      uint64 // spans so far
}

func (t *sglangTrace) span(name string, parent pcommon.SpanID, start, end int64) ptrace.Span {
	t.n++
	return newSpan(t.ss, t.r, name, ptrace.SpanKindInternal, spanID(t.r, saltSGLangThread<<16+t.n), parent, start, end)
}

// thread appends the span of a process's thread that handled the request;
// rank is its TP rank, -1 for none.
func (t *sglangTrace) thread(root ptrace.Span, label string, rank int, pid, start, end int64) ptrace.Span {
	name := label
	if rank >= 0 {
		name += fmt.Sprintf(" [TP %d] ", rank)
	}
	name += fmt.Sprintf("(host:%s | pid:%d)", t.hostID[:8], pid)
	sp := t.span(name, root.SpanID(), start, end)
	a := sp.Attributes()
	if rank >= 0 {
		a.PutInt("tp_rank", int64(rank))
	}
	a.PutStr("host_id", t.hostID)
	a.PutInt("pid", pid)
	a.PutStr("thread_label", label)
	return sp
}

// slice appends a stage slice under thread, linked to the slice before it
// (none for the first), and returns its ID.
func (t *sglangTrace) slice(thread ptrace.Span, name string, start, end int64, prev pcommon.SpanID) pcommon.SpanID {
	sp := t.span(name, thread.SpanID(), start, end)
	if !prev.IsEmpty() {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(t.r.TraceID())
		l.SetSpanID(prev)
	}
	return sp.SpanID()
}

// machineID stands for the host's /etc/machine-id: 32 hex digits, a pure
// function of the host name.
func machineID(host string) string {
	h := fnv.New64a()
	h.Write([]byte(host))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], h.Sum64())
	h.Write([]byte{0})
	binary.BigEndian.PutUint64(b[8:], h.Sum64())
	return hex.EncodeToString(b[:])
}
