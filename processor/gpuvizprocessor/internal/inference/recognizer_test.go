package inference

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func newTestRecognizer(t testing.TB) *Recognizer {
	t.Helper()
	r, err := NewRecognizer(testConfig())
	require.NoError(t, err)
	return r
}

func ph(name string, start, end time.Duration) Phase {
	return Phase{Name: name, Start: at(start), End: at(end)}
}

const ms = time.Millisecond

func TestRecognizeGolden(t *testing.T) {
	tests := []struct {
		name string
		f    fixture
		want Request
	}{
		// The model phases back from the first token (153 ms): the 3 ms
		// before the queue are the hop from the front end's arrival to the
		// engine core's QUEUED stamp and the first token's way back.
		{"vllm v1", vllmV1(), Request{
			Family: "vllm", Start: at(0), End: at(2*time.Second + 300*time.Microsecond),
			Phases: []Phase{
				ph("queue", 3*ms, 53*ms),
				ph("prefill", 53*ms, 153*ms),
				ph("decode", 153*ms, 1953*ms),
			},
			InputTokens: 512, OutputTokens: 128, PID: 4242, Host: "gpu-node-7",
		}},
		{"vllm v0", vllmV0(), Request{
			Family: "vllm", Start: at(0), End: at(900 * ms),
			Phases:      []Phase{ph("queue", 0, 4*ms)},
			InputTokens: 37, OutputTokens: 64, Model: "meta-llama/Llama-3.1-8B-Instruct", PID: 4242, Host: "gpu-node-7",
		}},
		{"genai chat", genAIChat(), Request{
			Family: "genai", Start: at(0), End: at(3 * time.Second),
			Phases:      []Phase{ph("prefill", 0, 250*ms), ph("decode", 250*ms, 3*time.Second)},
			InputTokens: 1200, OutputTokens: 300, Model: "llama-3.1-8b",
			GPUIDs: []string{"GPU-3c1f1c5e-8a1b-4d2b-9a47-1e2f3a4b5c6d"}, PID: 4242, Host: "gpu-node-7",
		}},
		{"genai embeddings", genAIEmbeddings(), Request{
			Family: "genai", Start: at(0), End: at(40 * ms),
			Phases:      []Phase{ph("inference", 0, 40*ms)},
			InputTokens: 64, OutputTokens: -1, Model: "bge-large", Client: true,
		}},
		{"genai client", genAIClient(), Request{
			Family: "genai", Start: at(0), End: at(2 * time.Second),
			Phases:      []Phase{ph("inference", 0, 2*time.Second)},
			InputTokens: 512, OutputTokens: 128, Model: "meta-llama/Llama-3.1-8B-Instruct",
			PID: 4242, Host: "gpu-node-7", Client: true,
		}},
		{"sglang unified root", sglangRoot(""), Request{
			Family: "sglang", Start: at(0), End: at(2500 * ms),
			Phases:      []Phase{ph("prefill", ms, 120*ms), ph("decode", 120*ms, 2500*ms)},
			InputTokens: 1000, OutputTokens: 300, Model: "Qwen/Qwen2.5-32B-Instruct",
			GPUIDs: []string{"GPU-aaaa", "GPU-bbbb"},
		}},
		{"sglang prefill server root", sglangRoot("prefill"), Request{
			Family: "sglang", Start: at(0), End: at(2500 * ms),
			Phases:      []Phase{ph("prefill", ms, 120*ms), ph("decode", 120*ms, 2500*ms)},
			InputTokens: 1000, OutputTokens: 300, Model: "Qwen/Qwen2.5-32B-Instruct",
			GPUIDs: []string{"GPU-aaaa", "GPU-bbbb"},
		}},
		{"sglang aborted root", sglangAborted(), Request{
			Family: "sglang", Start: at(0), End: at(4 * time.Second), InputTokens: -1, OutputTokens: -1,
		}},
		{"trtllm", trtllmRequest(), Request{
			Family: "trtllm", Start: at(0), End: at(1502 * ms),
			Phases: []Phase{
				ph("queue", 0, 20*ms),
				ph("prefill", 20*ms, 200*ms),
				ph("decode", 200*ms, 1500*ms),
			},
			InputTokens: 300, OutputTokens: 90, PID: 4242, Host: "gpu-node-7",
		}},
		{"tgi generate", tgiGenerate(), Request{
			Family: "tgi", Start: at(0), End: at(1500*ms + 40*time.Microsecond),
			Phases: []Phase{
				ph("queue", 1204567, 1210097),
				ph("inference", 1210097, 1499987625),
			},
			InputTokens: -1, OutputTokens: -1,
		}},
		{"tgi chat_completions", tgiChat(), Request{
			Family: "tgi", Start: at(0), End: at(250 * ms),
			Phases:      []Phase{ph("queue", 500*time.Microsecond, 49500*time.Microsecond), ph("inference", 49500*time.Microsecond, 249500*time.Microsecond)},
			InputTokens: -1, OutputTokens: -1,
		}},
		{"tgi prefill", tgiBackend("prefill", "text_generation_router_v3::backend", at(10*ms), at(60*ms)), Request{
			Family: "tgi", Start: at(10 * ms), End: at(60 * ms),
			Phases:      []Phase{ph("prefill", 10*ms, 60*ms)},
			InputTokens: -1, OutputTokens: -1, Aggregate: true,
		}},
		{"tgi decode", tgiBackend("decode", "text_generation_router_v3::client::sharded_client", at(60*ms), at(80*ms)), Request{
			Family: "tgi", Start: at(60 * ms), End: at(80 * ms),
			Phases:      []Phase{ph("decode", 60*ms, 80*ms)},
			InputTokens: -1, OutputTokens: -1, Aggregate: true,
		}},
		{"tgi infer", tgiBackend("infer", "text_generation_router_v3::backend", at(60*ms), at(81*ms)), Request{
			Family: "tgi", Start: at(60 * ms), End: at(81 * ms),
			Phases:      []Phase{ph("inference", 60*ms, 81*ms)},
			InputTokens: -1, OutputTokens: -1, Aggregate: true,
		}},
		// TGI's default service name marks its backend spans on its own:
		// tracing-opentelemetry sets code.namespace only with the source
		// location on.
		{"tgi decode marked by its service alone", func() fixture {
			f := newFixture("decode", ptrace.SpanKindInternal, at(60*ms), at(80*ms))
			tgiResource(f.res)
			return f
		}(), Request{
			Family: "tgi", Start: at(60 * ms), End: at(80 * ms),
			Phases:      []Phase{ph("decode", 60*ms, 80*ms)},
			InputTokens: -1, OutputTokens: -1, Aggregate: true,
		}},
		{"triton model span", tritonModel(), Request{
			Family: "triton", Start: at(0), End: at(12 * ms),
			InputTokens: -1, OutputTokens: -1, Model: "resnet50",
		}},
		{"triton ensemble span", tritonEnsemble(), Request{
			Family: "triton", Start: at(0), End: at(900 * ms),
			InputTokens: -1, OutputTokens: -1, Model: "ensemble",
		}},
		// The ensemble's request again, as the model it called saw it
		// (until now a request of its own, with its own energy share).
		{"triton composing model span", tritonComposing("tensorrt_llm", 2*ms, 890*ms), Request{
			Family: "triton", Start: at(2 * ms), End: at(890 * ms),
			InputTokens: -1, OutputTokens: -1, Model: "tensorrt_llm", Aggregate: true,
		}},
		// Any trace_parent_id above 0 is an ensemble's trace, 1 as 7.
		{"triton composing model span of the first trace", func() fixture {
			f := tritonComposing("tensorrt_llm", 2*ms, 890*ms)
			f.span.Attributes().PutInt("triton.trace_parent_id", 1)
			return f
		}(), Request{
			Family: "triton", Start: at(2 * ms), End: at(890 * ms),
			InputTokens: -1, OutputTokens: -1, Model: "tensorrt_llm", Aggregate: true,
		}},
		{"triton compute span", tritonCompute(), Request{
			Family: "triton", Start: at(2 * ms), End: at(11 * ms),
			Phases:      []Phase{ph("inference", 2*ms, 11*ms)},
			InputTokens: -1, OutputTokens: -1, Aggregate: true,
		}},
		{"triton all events", tritonAllEvents(), Request{
			Family: "triton", Start: at(0), End: at(20 * ms),
			Phases:      []Phase{ph("queue", 1*ms, 4*ms), ph("inference", 4*ms, 19*ms)},
			InputTokens: -1, OutputTokens: -1, Model: "llama",
		}},
		// Events in Triton's order may share a nanosecond.
		{"triton events at one instant", func() fixture {
			f := tritonAllEvents()
			f.span.Events().At(3).SetTimestamp(ts(at(4 * ms))) // COMPUTE_INPUT_END at COMPUTE_START
			return f
		}(), Request{
			Family: "triton", Start: at(0), End: at(20 * ms),
			Phases:      []Phase{ph("queue", 1*ms, 4*ms), ph("inference", 4*ms, 19*ms)},
			InputTokens: -1, OutputTokens: -1, Model: "llama",
		}},
		{"rule", ruleSpan(), Request{
			Family: "rule:homegrown", Start: at(0), End: at(time.Second),
			Phases:      []Phase{ph("prefill", 0, 200*ms), ph("decode", 200*ms, 900500*time.Microsecond)},
			InputTokens: 10, OutputTokens: 20, Model: "mistral-7b", GPUIndexes: []int{2, 3},
		}},
		{"rule, model not a string", func() fixture {
			f := ruleSpan()
			f.res.Attributes().PutInt("srv.model", 7)
			return f
		}(), Request{
			Family: "rule:homegrown", Start: at(0), End: at(time.Second),
			Phases:      []Phase{ph("prefill", 0, 200*ms), ph("decode", 200*ms, 900500*time.Microsecond)},
			InputTokens: 10, OutputTokens: 20, GPUIndexes: []int{2, 3},
		}},
		{"rule by prefix", newFixture("batch/step", ptrace.SpanKindInternal, at(0), at(ms)), Request{
			Family: "rule:prefixed", Start: at(0), End: at(ms), InputTokens: -1, OutputTokens: -1,
		}},
	}
	r := newTestRecognizer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, v, reason := r.Recognize(tt.f.span, tt.f.res, now)
			require.Equal(t, Recognized, v, "reason %q", reason)
			assert.Empty(t, reason)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestRecognizeNotInference(t *testing.T) {
	decodeElsewhere := newFixture("decode", ptrace.SpanKindInternal, at(0), at(ms))
	decodeElsewhere.res.Attributes().PutStr("service.name", "image-resizer")
	tool := newFixture("execute_tool get_weather", ptrace.SpanKindInternal, at(0), at(ms))
	tool.span.Attributes().PutStr("gen_ai.operation.name", "execute_tool")
	agent := newFixture("invoke_agent helper", ptrace.SpanKindInternal, at(0), at(ms))
	agent.span.Attributes().PutStr("gen_ai.operation.name", "invoke_agent")
	// The newest GenAI conventions' operations that run no model
	// (open-telemetry/semantic-conventions-genai, model/gen-ai/spans.yaml):
	// an agent's planning phase, INTERNAL, whose LLM call is its child (until
	// now recognised as inference: it took an energy share of the GPUs its
	// host's spans match, beside the call it wraps); a memory search in the
	// same process, INTERNAL; a vector-store retrieval and a stored
	// response's fetch, CLIENT.
	plan := newFixture("plan travel-agent", ptrace.SpanKindInternal, at(0), at(ms))
	plan.span.Attributes().PutStr("gen_ai.operation.name", "plan")
	plan.span.Attributes().PutStr("gen_ai.provider.name", "openai")
	plan.span.Attributes().PutStr("gen_ai.agent.name", "travel-agent")
	plan.span.Attributes().PutStr("gen_ai.request.model", "llama-3.1-8b")
	memory := newFixture("search_memory", ptrace.SpanKindInternal, at(0), at(ms))
	memory.span.Attributes().PutStr("gen_ai.operation.name", "search_memory")
	memory.span.Attributes().PutStr("gen_ai.memory.store.id", "notes")
	retrieval := newFixture("retrieval docs", ptrace.SpanKindClient, at(0), at(ms))
	retrieval.span.Attributes().PutStr("gen_ai.operation.name", "retrieval")
	retrieval.span.Attributes().PutStr("gen_ai.data_source.id", "docs")
	fetch := newFixture("fetch_response", ptrace.SpanKindClient, at(0), at(ms))
	fetch.span.Attributes().PutStr("gen_ai.operation.name", "fetch_response")
	opNotString := newFixture("chat", ptrace.SpanKindInternal, at(0), at(ms))
	opNotString.span.Attributes().PutInt("gen_ai.operation.name", 1)
	innerGenerate := newFixture("generate_stream", ptrace.SpanKindInternal, at(0), at(ms))
	tgiCodeAttrs(innerGenerate.span.Attributes(), "text_generation_router::infer", "router/src/infer/mod.rs", 90)
	tgiResource(innerGenerate.res)
	queued := newFixture("queued", ptrace.SpanKindInternal, at(0), at(ms))
	tgiCodeAttrs(queued.span.Attributes(), "text_generation_router_v3::queue", "backends/v3/src/queue.rs", 80)
	tgiResource(queued.res)

	unmarkedReq := newFixture(" Req 12345678", ptrace.SpanKindInternal, at(0), at(ms))
	unmarkedReq.res.Attributes().PutStr("service.name", "billing")
	otherRID := newFixture(" Req 12345678", ptrace.SpanKindInternal, at(0), at(ms))
	otherRID.span.Attributes().PutStr("rid", "abcdef")
	sglangLike := func(name string) fixture {
		f := newFixture(name, ptrace.SpanKindInternal, at(0), at(ms))
		f.span.Attributes().PutStr("module", "sglang::request")
		return f
	}
	tokenizerThread := sglangThread()
	tokenizerThread.span.SetName("Tokenizer(host:9a371d29 | pid:2040)")
	tokenizerThread.span.Attributes().Remove("tp_rank")

	tests := map[string]fixture{
		"sglang scheduler thread":        sglangThread(),
		"sglang tokenizer thread":        tokenizerThread,
		"sglang tokenize":                sglangSlice("tokenize", 0, ms),
		"sglang prefill_waiting":         sglangSlice("prefill_waiting", ms, 10*ms),
		"sglang prefill_forward":         sglangSlice("prefill_forward", 10*ms, 120*ms),
		"sglang chunked_prefill":         sglangSlice("chunked_prefill", 10*ms, 60*ms),
		"sglang decode_forward":          sglangSlice("decode_forward", 120*ms, 2500*ms),
		"sglang decode_loop":             sglangSlice("decode_loop", 120*ms, 130*ms),
		"sglang router root":             sglangRoot("router"),
		"Req name without sglang mark":   unmarkedReq,
		"Req name with another rid":      otherRID,
		"Req name, role with spaces":     sglangLike("my app Req 12345678"),
		"Req name glued to a word":       sglangLike("FooReq 12345678"),
		"Req name without an id":         sglangLike(" Req "),
		"Req name with a long id":        sglangLike(" Req " + strings.Repeat("x", 33)),
		"Req name with spaces in the id": sglangLike(" Req 1234 5678"),
		"http":                           httpSpan(),
		"decode of another app":          decodeElsewhere,
		"genai execute_tool":             tool,
		"genai invoke_agent":             agent,
		"genai plan":                     plan,
		"genai search_memory":            memory,
		"genai retrieval":                retrieval,
		"genai fetch_response":           fetch,
		"genai op not a string":          opNotString,
		"tgi inner generate span":        innerGenerate,
		"tgi queued":                     queued,
		"triton InferRequest":            tritonRoot(),
		"empty span":                     {span: ptrace.NewSpan(), res: pcommon.NewResource()},
	}
	r := newTestRecognizer(t)
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			got, v, reason := r.Recognize(f.span, f.res, now)
			assert.Equal(t, NotInference, v)
			assert.Empty(t, reason)
			assert.Equal(t, Request{}, got)
		})
	}
}

func TestRecognizeMalformed(t *testing.T) {
	with := func(f fixture, edit func(f fixture)) fixture { edit(f); return f }
	tests := []struct {
		name   string
		f      fixture
		reason string
	}{
		{"zero start", with(vllmV1(), func(f fixture) { f.span.SetStartTimestamp(0) }), ReasonBadTimestamp},
		{"zero end", with(genAIChat(), func(f fixture) { f.span.SetEndTimestamp(0) }), ReasonBadTimestamp},
		{"end past int64", with(tritonCompute(), func(f fixture) { f.span.SetEndTimestamp(math.MaxUint64) }), ReasonBadTimestamp},
		{"end before start", with(vllmV1(), func(f fixture) { f.span.SetEndTimestamp(ts(at(-ms))) }), ReasonEndBeforeStart},
		{"future end", with(tgiGenerate(), func(f fixture) {
			f.span.SetStartTimestamp(ts(now))
			f.span.SetEndTimestamp(ts(now.Add(2 * time.Minute)))
		}), ReasonFutureEnd},
		{"end long before start", with(ruleSpan(), func(f fixture) { f.span.SetEndTimestamp(ts(at(-2 * time.Hour))) }), ReasonEndBeforeStart},
		{"absurd duration", with(ruleSpan(), func(f fixture) { f.span.SetStartTimestamp(ts(at(-2 * time.Hour))) }), ReasonAbsurdDuration},
		{"negative latency", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", -0.001)
		}), ReasonNegativeLatency},
		{"negative int seconds in rule", with(ruleSpan(), func(f fixture) { f.span.Attributes().PutInt("srv.queue_s", -1) }), ReasonNegativeLatency},
		{"negative ttfc", with(genAIChat(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.response.time_to_first_chunk", -0.5)
		}), ReasonNegativeLatency},
		{"two malformed attributes: the first's reason", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutStr("gen_ai.latency.time_to_first_token", "0.153") // first in the span
			f.span.Attributes().PutStr("gen_ai.usage.prompt_tokens", "512")
		}), ReasonBadLatency},
		{"vllm latency as a string", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutStr("gen_ai.latency.time_in_queue", "0.05")
		}), ReasonBadLatency},
		{"vllm NaN latency", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.e2e", math.NaN())
		}), ReasonBadLatency},
		{"vllm bool latency", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutBool("gen_ai.latency.time_in_model_prefill", true)
		}), ReasonBadLatency},
		{"genai ttfc infinite", with(genAIChat(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.response.time_to_first_chunk", math.Inf(1))
		}), ReasonBadLatency},
		{"tgi bad duration string", with(tgiGenerate(), func(f fixture) { f.span.Attributes().PutStr("queue_time", "5.5 ms") }), ReasonBadDurationString},
		{"tgi duration not a string", with(tgiGenerate(), func(f fixture) { f.span.Attributes().PutDouble("inference_time", 1.5) }), ReasonBadDurationString},
		{"tgi unused field still checked", with(tgiGenerate(), func(f fixture) { f.span.Attributes().PutStr("total_time", "1.5") }), ReasonBadDurationString},
		{"rule bad duration string", with(ruleSpan(), func(f fixture) { f.span.Attributes().PutStr("srv.decode", "3m") }), ReasonBadDurationString},
		{"vllm tokens as a string", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutStr("gen_ai.usage.prompt_tokens", "512")
		}), ReasonBadTokenCount},
		{"genai negative tokens", with(genAIChat(), func(f fixture) {
			f.span.Attributes().PutInt("gen_ai.usage.output_tokens", -3)
		}), ReasonBadTokenCount},
		{"rule tokens as a double", with(ruleSpan(), func(f fixture) { f.span.Attributes().PutDouble("srv.in", 10) }), ReasonBadTokenCount},
		{"vllm phases exceed span", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", 1.9)
		}), ReasonPhasesExceedSpan},
		{"vllm huge latency", with(vllmV1(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_queue", 1e300)
		}), ReasonPhasesExceedSpan},
		{"genai ttfc after end", with(genAIChat(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.response.time_to_first_chunk", 3.5)
		}), ReasonPhasesExceedSpan},
		{"tgi validation longer than span", with(tgiChat(), func(f fixture) { f.span.Attributes().PutStr("validation_time", "1s") }), ReasonPhasesExceedSpan},
		{"tgi inference longer than span", with(tgiChat(), func(f fixture) { f.span.Attributes().PutStr("inference_time", "202ms") }), ReasonPhasesExceedSpan},
		{"rule huge int seconds", with(ruleSpan(), func(f fixture) { f.span.Attributes().PutInt("srv.prefill", math.MaxInt64) }), ReasonPhasesExceedSpan},
		{"triton event before span", with(tritonCompute(), func(f fixture) { f.span.SetStartTimestamp(ts(at(3 * ms))) }), ReasonPhasesExceedSpan},
		{"triton event after span", with(tritonCompute(), func(f fixture) { f.span.SetEndTimestamp(ts(at(9 * ms))) }), ReasonPhasesExceedSpan},
		{"triton compute end before start", with(tritonCompute(), func(f fixture) {
			f.span.Events().At(3).SetTimestamp(ts(at(ms)))
		}), ReasonEventsOutOfOrder},
		{"triton input end after output start", with(tritonAllEvents(), func(f fixture) {
			f.span.Events().At(3).SetTimestamp(ts(at(18500 * time.Microsecond)))
		}), ReasonEventsOutOfOrder},
		{"triton queue after compute", with(tritonAllEvents(), func(f fixture) {
			f.span.Events().At(1).SetTimestamp(ts(at(5 * ms)))
		}), ReasonEventsOutOfOrder},
		{"triton compute start without end", with(tritonCompute(), func(f fixture) {
			f.span.Events().RemoveIf(func(e ptrace.SpanEvent) bool { return e.Name() == "COMPUTE_END" })
		}), ReasonEventsOutOfOrder},
		{"triton compute end without start", with(tritonCompute(), func(f fixture) {
			f.span.Events().RemoveIf(func(e ptrace.SpanEvent) bool { return e.Name() == "COMPUTE_START" })
		}), ReasonEventsOutOfOrder},
		{"triton repeated event", tritonCompute().event("COMPUTE_START", at(3*ms)), ReasonEventsOutOfOrder},
		{"triton event repeated at its own time", tritonCompute().event("COMPUTE_END", at(11*ms)), ReasonEventsOutOfOrder},
		{"sglang zero start", with(sglangRoot(""), func(f fixture) { f.span.SetStartTimestamp(0) }), ReasonBadTimestamp},
		{"sglang negative latency", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", -0.1)
		}), ReasonNegativeLatency},
		{"sglang -1 is not unknown", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutInt("gen_ai.latency.e2e", -1)
		}), ReasonNegativeLatency},
		{"sglang latency as a string", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutStr("gen_ai.latency.time_to_first_token", "0.12")
		}), ReasonBadLatency},
		{"sglang cached tokens as a double", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.usage.cached_tokens", 256)
		}), ReasonBadTokenCount},
		{"sglang negative prompt tokens", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutInt("gen_ai.usage.prompt_tokens", -1)
		}), ReasonBadTokenCount},
		{"sglang dispatched before the span", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_prefill", 0.2)
		}), ReasonPhasesExceedSpan},
		{"sglang decode past the end", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", 2.5)
		}), ReasonPhasesExceedSpan},
		{"sglang huge latencies", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutInt("gen_ai.latency.time_to_first_token", math.MaxInt64)
			f.span.Attributes().PutInt("gen_ai.latency.time_in_model_decode", math.MaxInt64)
		}), ReasonPhasesExceedSpan},
		{"sglang queue past the first token", with(sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_queue", 0.2)
		}), ReasonEventsOutOfOrder},
		{"trtllm negative latency", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_queue", -0.5)
		}), ReasonNegativeLatency},
		{"trtllm -2 is negative", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutInt("gen_ai.latency.time_to_first_token", -2)
		}), ReasonNegativeLatency},
		{"trtllm negative kv cache transfer", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.kv_cache_transfer_time", -3.2)
		}), ReasonNegativeLatency},
		{"trtllm latency as a string", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutStr("gen_ai.latency.e2e", "1.5")
		}), ReasonBadLatency},
		{"trtllm kv cache transfer as a bool", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutBool("gen_ai.latency.kv_cache_transfer_time", false)
		}), ReasonBadLatency},
		{"trtllm NaN latency", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_to_first_token", math.NaN())
		}), ReasonBadLatency},
		{"trtllm tokens as a string", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutStr("gen_ai.usage.completion_tokens", "90")
		}), ReasonBadTokenCount},
		{"trtllm first token before scheduling", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_to_first_token", 0.01)
		}), ReasonEventsOutOfOrder},
		{"trtllm last token before the first", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.e2e", 0.1)
		}), ReasonEventsOutOfOrder},
		{"trtllm e2e past the end", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.e2e", 1.6)
		}), ReasonPhasesExceedSpan},
		{"trtllm huge queue", with(trtllmRequest(), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_queue", 1e300)
		}), ReasonPhasesExceedSpan},
		{"genai client negative tokens", with(genAIClient(), func(f fixture) {
			f.span.Attributes().PutInt("gen_ai.usage.input_tokens", -1)
		}), ReasonBadTokenCount},
		{"triton model span events out of order", with(tritonModel(), func(f fixture) {
			f.span.Events().At(1).SetTimestamp(ts(at(13 * ms)))
		}), ReasonEventsOutOfOrder},
	}
	r := newTestRecognizer(t)
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, v, reason := r.Recognize(tt.f.span, tt.f.res, now)
			require.Equal(t, Malformed, v)
			assert.Equal(t, tt.reason, reason)
			assert.Equal(t, Request{}, got)
		})
		seen[tt.reason] = true
	}
	for _, reason := range Reasons() {
		assert.True(t, seen[reason], "no test for reason %q", reason)
	}
}

func TestRecognizeTolerance(t *testing.T) {
	r := newTestRecognizer(t)
	// vLLM's latencies come from another clock than the span's ends: phases
	// may run past the end by up to 1 ms, and are clamped to it.
	f := vllmV1()
	f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", 1.8509)
	got, v, reason := r.Recognize(f.span, f.res, now)
	require.Equal(t, Recognized, v, reason)
	require.Len(t, got.Phases, 3)
	assert.Equal(t, got.End, got.Phases[2].End)

	// A phase entirely inside the tolerance is dropped, not kept empty.
	f = ruleSpan()
	f.span.Attributes().PutInt("srv.queue_s", 1)
	f.span.Attributes().PutDouble("srv.prefill", 0.0005)
	f.span.Attributes().PutStr("srv.decode", "0ns")
	got, v, reason = r.Recognize(f.span, f.res, now)
	require.Equal(t, Recognized, v, reason)
	assert.Equal(t, []Phase{ph("queue", 0, time.Second)}, got.Phases)

	// TGI's validation may end within the tolerance past the span: nothing
	// after it is left to place.
	f = tgiChat()
	f.span.Attributes().PutStr("validation_time", "250.5ms")
	f.span.Attributes().PutStr("queue_time", "0ns")
	f.span.Attributes().PutStr("inference_time", "0ns")
	got, v, reason = r.Recognize(f.span, f.res, now)
	require.Equal(t, Recognized, v, reason)
	assert.Empty(t, got.Phases)

	// Without a clock, the future is not checked.
	f = vllmV1()
	_, v, _ = r.Recognize(f.span, f.res, time.Time{})
	assert.Equal(t, Recognized, v)
	_, v, reason = r.Recognize(f.span, f.res, t0)
	assert.Equal(t, Recognized, v, "ends 2 s after now, within max_future: %s", reason)
	_, v, reason = r.Recognize(f.span, f.res, t0.Add(-time.Minute))
	assert.Equal(t, Malformed, v)
	assert.Equal(t, ReasonFutureEnd, reason)
}

func TestRecognizeVLLMVariants(t *testing.T) {
	r := newTestRecognizer(t)
	// vLLM V1: the model phases back from the first token.
	anchored := []Phase{ph("queue", 3*ms, 53*ms), ph("prefill", 53*ms, 153*ms), ph("decode", 153*ms, 1953*ms)}
	sequential := []Phase{ph("queue", 0, 50*ms), ph("prefill", 50*ms, 150*ms), ph("decode", 150*ms, 1950*ms)}
	tests := []struct {
		name   string
		edit   func(a pcommon.Map)
		phases []Phase
		in     int64
		out    int64
		model  string
	}{
		{"no prefill: inference", func(a pcommon.Map) { a.Remove("gen_ai.latency.time_in_model_prefill") },
			[]Phase{ph("queue", 0, 50*ms), ph("inference", 50*ms, 1950*ms)}, 512, 128, ""},
		{"no decode: inference", func(a pcommon.Map) { a.Remove("gen_ai.latency.time_in_model_decode") },
			[]Phase{ph("queue", 0, 50*ms), ph("inference", 50*ms, 1950*ms)}, 512, 128, ""},
		{"nothing but prefill", func(a pcommon.Map) {
			a.Remove("gen_ai.latency.time_in_model_decode")
			a.Remove("gen_ai.latency.time_in_model_inference")
		}, []Phase{ph("queue", 0, 50*ms), ph("prefill", 50*ms, 150*ms)}, 512, 128, ""},
		{"no latencies", func(a pcommon.Map) {
			a.RemoveIf(func(k string, _ pcommon.Value) bool { return strings.HasPrefix(k, "gen_ai.latency.") })
		}, nil, 512, 128, ""},
		{"int seconds", func(a pcommon.Map) {
			a.PutInt("gen_ai.latency.time_in_queue", 1)
			a.PutInt("gen_ai.latency.time_in_model_prefill", 0)
			a.PutDouble("gen_ai.latency.time_in_model_decode", 0.5)
		}, []Phase{ph("queue", 0, time.Second), ph("decode", time.Second, 1500*ms)}, 512, 128, ""},
		{"newer token names", func(a pcommon.Map) {
			a.Remove("gen_ai.usage.prompt_tokens")
			a.Remove("gen_ai.usage.completion_tokens")
			a.PutInt("gen_ai.usage.input_tokens", 5)
			a.PutInt("gen_ai.usage.output_tokens", 6)
		}, anchored, 5, 6, ""},
		{"request model wins", func(a pcommon.Map) {
			a.PutStr("gen_ai.response.model", "b")
			a.PutStr("gen_ai.request.model", "a")
		}, anchored, 512, 128, "a"},
		{"model not a string is unknown", func(a pcommon.Map) { a.PutInt("gen_ai.request.model", 3) },
			anchored, 512, 128, ""},
		{"zero output tokens are known", func(a pcommon.Map) { a.PutInt("gen_ai.usage.completion_tokens", 0) },
			anchored, 512, 0, ""},
		{"the older token names win", func(a pcommon.Map) {
			a.PutInt("gen_ai.usage.input_tokens", 5)
			a.PutInt("gen_ai.usage.output_tokens", 6)
		}, anchored, 512, 128, ""},
		// One output token, its first token 0.5 ms past the span's end
		// (clock rounding): still placed back from it, no decode.
		{"first token within the tolerance past the span: back from it", func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_to_first_token", 2.0008)
			a.PutDouble("gen_ai.latency.time_in_model_decode", 0)
		}, []Phase{ph("queue", 1850800*time.Microsecond, 1900800*time.Microsecond), ph("prefill", 1900800*time.Microsecond, 2000300*time.Microsecond)}, 512, 128, ""},
		// Not V1's shape: the phases one after the other from the arrival.
		{"no first token: from the start", func(a pcommon.Map) { a.Remove("gen_ai.latency.time_to_first_token") },
			sequential, 512, 128, ""},
		{"first token before queue and prefill: from the start", func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_to_first_token", 0.149)
		}, sequential, 512, 128, ""},
		{"first token past the span: from the start", func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_to_first_token", 2.1)
		}, sequential, 512, 128, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := vllmV1()
			tt.edit(f.span.Attributes())
			got, v, reason := r.Recognize(f.span, f.res, now)
			require.Equal(t, Recognized, v, reason)
			assert.Equal(t, tt.phases, got.Phases)
			assert.Equal(t, tt.in, got.InputTokens)
			assert.Equal(t, tt.out, got.OutputTokens)
			assert.Equal(t, tt.model, got.Model)
		})
	}
}

// A vLLM V1 request with an image, built as vllm/v1/engine/output_processor.py
// do_tracing builds its span: it starts at arrival_time, which
// vllm/v1/engine/input_processor.py process_inputs takes before the
// multimodal processor runs (150 ms here); the engine core's busy loop
// takes the request between two steps (40 ms later) and stamps QUEUED
// (vllm/v1/metrics/stats.py: queued, scheduled, first and last token are
// the engine core's monotonic stamps); the front end stamps each output
// when it receives it (IterationStats.iteration_timestamp, 1-2 ms after
// the step). Placed from the arrival, the 60 ms prefill fell inside the
// multimodal processing, 190 ms before the GPU ran it, and every phase
// ended 192 ms early.
func TestRecognizeVLLMMultimodalHop(t *testing.T) {
	const (
		queued    = 190 * ms // arrival + image processing + a step's wait
		scheduled = queued + 10*ms
		first     = scheduled + 60*ms
		last      = first + 1500*ms
	)
	f := newFixture("llm_request", ptrace.SpanKindServer, at(0), at(last+1200*time.Microsecond))
	pythonResource(f.res, "vllm")
	a := f.span.Attributes()
	secs := func(d time.Duration) float64 { return d.Seconds() }
	a.PutDouble("gen_ai.latency.time_to_first_token", secs(first+2*ms)) // received 2 ms after the step
	a.PutDouble("gen_ai.latency.e2e", secs(last+ms))
	a.PutDouble("gen_ai.latency.time_in_queue", secs(scheduled-queued))
	a.PutInt("gen_ai.usage.prompt_tokens", 1855) // 1,600 of them the image's
	a.PutInt("gen_ai.usage.completion_tokens", 300)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", secs(first-scheduled))
	a.PutDouble("gen_ai.latency.time_in_model_decode", secs(last-first))
	a.PutDouble("gen_ai.latency.time_in_model_inference", secs(last-scheduled))
	a.PutStr("gen_ai.request.id", "chatcmpl-9f1e2d3c4b5a69788796a5b4c3d2e1f0")
	a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
	a.PutInt("gen_ai.request.max_tokens", 512)
	a.PutInt("gen_ai.request.n", 1)

	got, v, reason := newTestRecognizer(t).Recognize(f.span, f.res, now)
	require.Equal(t, Recognized, v, reason)
	// 2 ms late (the first token's way back), where they were 192 ms early.
	assert.Equal(t, []Phase{
		ph("queue", queued+2*ms, scheduled+2*ms),
		ph("prefill", scheduled+2*ms, first+2*ms),
		ph("decode", first+2*ms, last+1200*time.Microsecond), // to the span's end
	}, got.Phases)
}

// The decode back from the first token may end past the span by what the
// first token's way back took longer than the last one's; by more than the
// hop and that way back together, the latencies do not fit the span.
func TestRecognizeVLLMDecodePastTheSpan(t *testing.T) {
	r := newTestRecognizer(t)
	f := vllmV1() // ends at 2.0003 s; first token at 153 ms, 3 ms after queue and prefill
	f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", 1.8502)
	got, v, reason := r.Recognize(f.span, f.res, now)
	require.Equal(t, Recognized, v, reason)
	assert.Equal(t, ph("decode", 153*ms, 2*time.Second+300*time.Microsecond), got.Phases[2], "2.9 ms past the span: clamped")
	f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", 1.8515)
	_, v, reason = r.Recognize(f.span, f.res, now)
	assert.Equal(t, Malformed, v)
	assert.Equal(t, ReasonPhasesExceedSpan, reason, "4.2 ms past the span: more than the 3 ms and the 1 ms tolerance")
}

func TestRecognizeTRTLLMVariants(t *testing.T) {
	r := newTestRecognizer(t)
	full := []Phase{ph("queue", 0, 20*ms), ph("prefill", 20*ms, 200*ms), ph("decode", 200*ms, 1500*ms)}
	tests := []struct {
		name   string
		edit   func(a pcommon.Map)
		phases []Phase
	}{
		{"as served", func(pcommon.Map) {}, full},
		// TensorRT-LLM drops latencies that are not positive and traces a
		// missing one as the integer -1.
		{"queue -1: scheduled on arrival", func(a pcommon.Map) { a.PutInt("gen_ai.latency.time_in_queue", -1) },
			[]Phase{ph("prefill", 0, 200*ms), ph("decode", 200*ms, 1500*ms)}},
		{"-1 as a double too", func(a pcommon.Map) { a.PutDouble("gen_ai.latency.time_in_queue", -1) },
			[]Phase{ph("prefill", 0, 200*ms), ph("decode", 200*ms, 1500*ms)}},
		{"first token -1: inference", func(a pcommon.Map) { a.PutInt("gen_ai.latency.time_to_first_token", -1) },
			[]Phase{ph("queue", 0, 20*ms), ph("inference", 20*ms, 1500*ms)}},
		{"e2e -1: decode to the end", func(a pcommon.Map) { a.PutInt("gen_ai.latency.e2e", -1) },
			[]Phase{ph("queue", 0, 20*ms), ph("prefill", 20*ms, 200*ms), ph("decode", 200*ms, 1502*ms)}},
		{"every latency -1", func(a pcommon.Map) {
			a.PutInt("gen_ai.latency.time_in_queue", -1)
			a.PutInt("gen_ai.latency.time_to_first_token", -1)
			a.PutInt("gen_ai.latency.e2e", -1)
		}, nil},
		{"no latencies", func(a pcommon.Map) {
			a.RemoveIf(func(k string, _ pcommon.Value) bool { return strings.HasPrefix(k, "gen_ai.latency.") })
		}, nil},
		{"one output token: no decode", func(a pcommon.Map) { a.PutDouble("gen_ai.latency.e2e", 0.2) },
			[]Phase{ph("queue", 0, 20*ms), ph("prefill", 20*ms, 200*ms)}},
		{"first token within the tolerance past the end", func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_to_first_token", 1.5025)
			a.PutInt("gen_ai.latency.e2e", -1)
		}, []Phase{ph("queue", 0, 20*ms), ph("prefill", 20*ms, 1502*ms)}},
		{"disaggregated: kv cache transfer time", func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.kv_cache_transfer_time", 0.004)
		}, full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := trtllmRequest()
			tt.edit(f.span.Attributes())
			got, v, reason := r.Recognize(f.span, f.res, now)
			require.Equal(t, Recognized, v, reason)
			assert.Equal(t, "trtllm", got.Family)
			assert.Equal(t, tt.phases, got.Phases)
			assert.Equal(t, int64(300), got.InputTokens)
			assert.Equal(t, int64(90), got.OutputTokens)
		})
	}
}

func TestRecognizeSGLangVariants(t *testing.T) {
	r := newTestRecognizer(t)
	full := []Phase{ph("prefill", ms, 120*ms), ph("decode", 120*ms, 2500*ms)}
	tests := []struct {
		name   string
		f      fixture
		edit   func(f fixture)
		phases []Phase
	}{
		{"decode server root", sglangRoot("decode"), func(fixture) {}, full},
		{"name without a role", sglangRoot(""), func(f fixture) { f.span.SetName("Req 5c0ffee1") }, full},
		{"marked by its rid", sglangRoot(""), func(f fixture) {
			f.span.Attributes().Remove("module")
			f.res.Attributes().PutStr("service.name", "llm")
		}, full},
		{"marked by its service", sglangRoot(""), func(f fixture) {
			f.span.Attributes().Remove("module")
			f.span.Attributes().Remove("rid")
		}, full},
		{"without time_in_model_prefill: inference from the dispatch", sglangRoot(""), func(f fixture) {
			f.span.Attributes().Remove("gen_ai.latency.time_in_model_prefill")
		}, []Phase{ph("inference", ms, 2500*ms)}},
		{"without time_in_model_decode: decode to e2e", sglangRoot(""), func(f fixture) {
			f.span.Attributes().Remove("gen_ai.latency.time_in_model_decode")
			f.span.Attributes().PutDouble("gen_ai.latency.e2e", 2.4)
		}, []Phase{ph("prefill", ms, 120*ms), ph("decode", 120*ms, 2400*ms)}},
		{"first token only", sglangRoot(""), func(f fixture) {
			f.span.Attributes().Remove("gen_ai.latency.time_in_model_decode")
			f.span.Attributes().Remove("gen_ai.latency.e2e")
		}, []Phase{ph("prefill", ms, 120*ms)}},
		{"a time_in_queue is the queue after the dispatch", sglangRoot(""), func(f fixture) {
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_queue", 0.009)
		}, []Phase{ph("queue", ms, 10*ms), ph("prefill", 10*ms, 120*ms), ph("decode", 120*ms, 2500*ms)}},
		{"a time_in_queue without the first token: queue, then inference", sglangRoot(""), func(f fixture) {
			f.span.Attributes().Remove("gen_ai.latency.time_to_first_token")
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_queue", 0.009)
		}, []Phase{ph("queue", ms, 10*ms), ph("inference", 10*ms, 2500*ms)}},
		{"no dispatch: no phases", sglangRoot(""), func(f fixture) {
			f.span.Attributes().Remove("gen_ai.latency.time_to_first_token")
			f.span.Attributes().Remove("gen_ai.latency.time_in_model_inference")
			f.span.Attributes().PutDouble("gen_ai.latency.time_in_queue", 0.009)
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.edit(tt.f)
			got, v, reason := r.Recognize(tt.f.span, tt.f.res, now)
			require.Equal(t, Recognized, v, reason)
			assert.Equal(t, "sglang", got.Family)
			assert.Equal(t, tt.phases, got.Phases)
			assert.Equal(t, int64(1000), got.InputTokens)
			assert.Equal(t, int64(300), got.OutputTokens)
			assert.False(t, got.Aggregate || got.Client)
		})
	}
}

func TestRecognizeGenAIVariants(t *testing.T) {
	r := newTestRecognizer(t)
	tests := []struct {
		name    string
		edit    func(a pcommon.Map)
		phases  []Phase
		in, out int64
	}{
		{"as sent", func(pcommon.Map) {}, []Phase{ph("prefill", 0, 250*ms), ph("decode", 250*ms, 3*time.Second)}, 1200, 300},
		{"first chunk at once: decode throughout", func(a pcommon.Map) { a.PutDouble("gen_ai.response.time_to_first_chunk", 0) },
			[]Phase{ph("decode", 0, 3*time.Second)}, 1200, 300},
		{"first chunk within the tolerance past the end: prefill throughout", func(a pcommon.Map) {
			a.PutDouble("gen_ai.response.time_to_first_chunk", 3.0005)
		}, []Phase{ph("prefill", 0, 3*time.Second)}, 1200, 300},
		{"the current token names win", func(a pcommon.Map) {
			a.PutInt("gen_ai.usage.prompt_tokens", 7)
			a.PutInt("gen_ai.usage.completion_tokens", 8)
		}, []Phase{ph("prefill", 0, 250*ms), ph("decode", 250*ms, 3*time.Second)}, 1200, 300},
		{"the older names where the current are missing", func(a pcommon.Map) {
			a.Remove("gen_ai.usage.input_tokens")
			a.Remove("gen_ai.usage.output_tokens")
			a.PutInt("gen_ai.usage.prompt_tokens", 7)
			a.PutInt("gen_ai.usage.completion_tokens", 8)
		}, []Phase{ph("prefill", 0, 250*ms), ph("decode", 250*ms, 3*time.Second)}, 7, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := genAIChat()
			tt.edit(f.span.Attributes())
			got, v, reason := r.Recognize(f.span, f.res, now)
			require.Equal(t, Recognized, v, reason)
			assert.Equal(t, "genai", got.Family)
			assert.Equal(t, tt.phases, got.Phases)
			assert.Equal(t, tt.in, got.InputTokens)
			assert.Equal(t, tt.out, got.OutputTokens)
		})
	}
}

// A span may end as it starts, and last exactly max_request_duration; it
// may not end before it starts or last longer.
func TestRecognizeWindowBounds(t *testing.T) {
	r := newTestRecognizer(t)
	for _, tc := range []struct {
		name       string
		start, end time.Time
		v          Verdict
		reason     string
	}{
		{"ends as it starts", at(0), at(0), Recognized, ""},
		{"ends a nanosecond before it starts", at(0), at(-1), Malformed, ReasonEndBeforeStart},
		{"exactly max_request_duration", at(-time.Hour), at(0), Recognized, ""},
		{"a nanosecond longer", at(-time.Hour - 1), at(0), Malformed, ReasonAbsurdDuration},
		{"ends exactly max_future ahead", now, now.Add(time.Minute), Recognized, ""},
		{"a nanosecond later", now, now.Add(time.Minute + 1), Malformed, ReasonFutureEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture("batch/step", ptrace.SpanKindInternal, tc.start, tc.end)
			got, v, reason := r.Recognize(f.span, f.res, now)
			assert.Equal(t, tc.v, v)
			assert.Equal(t, tc.reason, reason)
			if v == Recognized {
				assert.Equal(t, tc.start, got.Start)
				assert.Equal(t, tc.end, got.End)
			}
		})
	}
}

// A span that carries any attribute under gpuviz. (enriched by a
// collector upstream) is marked, wherever among its attributes it is: the
// processor then replaces those attributes instead of appending duplicates.
func TestRecognizeMarksSpansEnrichedUpstream(t *testing.T) {
	r := newTestRecognizer(t)
	for _, tc := range []struct {
		name string
		edit func(f fixture)
		want bool
	}{
		{"bare", func(fixture) {}, false},
		{"gpuviz. attribute last", func(f fixture) { f.span.Attributes().PutDouble("gpuviz.energy", 1) }, true},
		{"gpuviz. attribute first", func(f fixture) {
			a := f.span.Attributes()
			rest := pcommon.NewMap()
			a.CopyTo(rest)
			a.Clear()
			a.PutDouble("gpuviz.energy", 1)
			for k, v := range rest.All() {
				v.CopyTo(a.PutEmpty(k))
			}
		}, true},
		{"a name that only starts alike", func(f fixture) { f.span.Attributes().PutStr("gpuvizzz", "x") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := vllmV1()
			tc.edit(f)
			got, v, reason := r.Recognize(f.span, f.res, now)
			require.Equal(t, Recognized, v, reason)
			assert.Equal(t, tc.want, got.Enriched)
		})
	}
}

func TestRecognizeDispatchOrder(t *testing.T) {
	// A rule overrides the built-in families.
	cfg := DefaultConfig()
	cfg.Rules = []Rule{{Name: "mine", SpanName: "llm_request", QueueSecondsAttribute: "gen_ai.latency.time_in_queue"}}
	r, err := NewRecognizer(cfg)
	require.NoError(t, err)
	f := vllmV1()
	got, v, _ := r.Recognize(f.span, f.res, now)
	require.Equal(t, Recognized, v)
	assert.Equal(t, "rule:mine", got.Family)
	assert.Equal(t, []Phase{ph("queue", 0, 50*ms)}, got.Phases)

	// vLLM's span is vLLM's even with gen_ai.operation.name.
	r = newTestRecognizer(t)
	f = vllmV1()
	f.span.Attributes().PutStr("gen_ai.operation.name", "chat")
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "vllm", got.Family)

	// Which llm_request is TensorRT-LLM's: vLLM V1's time_in_model_*
	// latencies win over an integer request id; an integer id or a KV cache
	// transfer time marks TensorRT-LLM's; without either it is vLLM's.
	f = vllmV1()
	f.span.Attributes().PutInt("gen_ai.request.id", 3)
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "vllm", got.Family)
	f = vllmV0()
	f.span.Attributes().PutDouble("gen_ai.latency.kv_cache_transfer_time", 0)
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "trtllm", got.Family)
	f = trtllmRequest()
	f.span.Attributes().PutStr("gen_ai.request.id", "7")
	f.span.Attributes().Remove("gen_ai.latency.kv_cache_transfer_time")
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "vllm", got.Family)
	assert.Equal(t, []Phase{ph("queue", 0, 20*ms)}, got.Phases)
	f = trtllmRequest()
	f.span.Attributes().PutDouble("gen_ai.latency.time_in_model_inference", 1.48)
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "vllm", got.Family, "time_in_model_inference is vLLM's alone")
	f = trtllmRequest()
	f.span.Attributes().PutStr("gen_ai.operation.name", "chat")
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "trtllm", got.Family)

	// SGLang's root is SGLang's even with GenAI attributes.
	f = sglangRoot("")
	f.span.Attributes().PutStr("gen_ai.operation.name", "chat")
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "sglang", got.Family)

	// A GenAI span is the client's only when its kind is CLIENT.
	for kind, client := range map[ptrace.SpanKind]bool{
		ptrace.SpanKindClient: true, ptrace.SpanKindServer: false, ptrace.SpanKindInternal: false,
		ptrace.SpanKindUnspecified: false, ptrace.SpanKindProducer: false, ptrace.SpanKindConsumer: false,
	} {
		f = genAIClient()
		f.span.SetKind(kind)
		got, v, _ := r.Recognize(f.span, f.res, now)
		require.Equal(t, Recognized, v)
		assert.Equal(t, client, got.Client, kind.String())
		assert.False(t, got.Aggregate)
	}
	// Only GenAI's: vLLM's span is the server's whatever its kind.
	f = vllmV1()
	f.span.SetKind(ptrace.SpanKindClient)
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.False(t, got.Client)

	// Triton's events win over GenAI attributes.
	f = tritonAllEvents()
	f.span.Attributes().PutStr("gen_ai.operation.name", "chat")
	got, _, _ = r.Recognize(f.span, f.res, now)
	assert.Equal(t, "triton", got.Family)
}

func TestGPUHints(t *testing.T) {
	r := newTestRecognizer(t)
	tests := []struct {
		name    string
		span    map[string]any
		res     map[string]any
		ids     []string
		indexes []int
	}{
		{"none", nil, nil, nil, nil},
		{"visible devices list on the resource", nil,
			map[string]any{"process.env.CUDA_VISIBLE_DEVICES": "0, 3,GPU-aaaa,foo,-1,,MIG-bbbb"},
			[]string{"GPU-aaaa", "MIG-bbbb"}, []int{0, 3}},
		{"span wins over resource", map[string]any{"gpu.index": int64(1)},
			map[string]any{"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, nil, []int{1}},
		{"span and resource keys merge within a level", map[string]any{"hw.id": "GPU-x", "nvidia.gpu.index": "4"},
			nil, []string{"GPU-x"}, []int{4}},
		{"id attribute with a number is an index", map[string]any{"gpu.id": "2"}, nil, nil, []int{2}},
		{"id attribute keeps other strings", map[string]any{"gpu.id": "nvidia0"}, nil, []string{"nvidia0"}, nil},
		{"index attribute ignores other strings", map[string]any{"gpu.index": "nvidia0"}, nil, nil, nil},
		{"slices", map[string]any{"gpu.uuid": []any{"GPU-a", "GPU-b", "GPU-a"}, "gpu.index": []any{int64(0), "1", int64(-5), 2.5, true}},
			nil, []string{"GPU-a", "GPU-b"}, []int{0, 1}},
		{"other types ignored", map[string]any{"gpu.index": 1.0, "hw.id": true, "gpu.uuid": map[string]any{"a": "GPU-z"}},
			map[string]any{"cuda_visible_devices": int64(6)}, nil, []int{6}},
		{"index bounds", map[string]any{"gpu.index": []any{int64(65535), int64(65536), "99999999999999999999"}},
			nil, nil, []int{65535}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := genAIEmbeddings()
			for k, v := range tt.span {
				require.NoError(t, f.span.Attributes().PutEmpty(k).FromRaw(v))
			}
			for k, v := range tt.res {
				require.NoError(t, f.res.Attributes().PutEmpty(k).FromRaw(v))
			}
			got, v, reason := r.Recognize(f.span, f.res, now)
			require.Equal(t, Recognized, v, reason)
			assert.Equal(t, tt.ids, got.GPUIDs)
			assert.Equal(t, tt.indexes, got.GPUIndexes)
		})
	}

	t.Run("pid and host", func(t *testing.T) {
		f := genAIEmbeddings()
		f.res.Attributes().PutStr("process.pid", "12")
		f.res.Attributes().PutInt("host.name", 3)
		got, _, _ := r.Recognize(f.span, f.res, now)
		assert.Zero(t, got.PID)
		assert.Empty(t, got.Host)
	})

	t.Run("slurm job", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			span, res map[string]any
			want      string
		}{
			{"on the resource, as OTEL_RESOURCE_ATTRIBUTES sets it", nil, map[string]any{"slurm.job.id": "4242"}, "4242"},
			{"on the span", map[string]any{"slurm.job.id": "4242"}, nil, "4242"},
			{"the span's wins", map[string]any{"slurm.job.id": "4243"}, map[string]any{"slurm.job.id": "4242"}, "4243"},
			{"an int", nil, map[string]any{"slurm.job.id": int64(4242)}, "4242"},
			{"not an id", map[string]any{"slurm.job.id": true}, map[string]any{"slurm.job.id": int64(-1)}, ""},
			{"64 bytes", nil, map[string]any{"slurm.job.id": strings.Repeat("9", 64)}, strings.Repeat("9", 64)},
			{"too long", nil, map[string]any{"slurm.job.id": strings.Repeat("9", 65)}, ""},
			{"only slurm.job.id", nil, map[string]any{"SLURM_JOB_ID": "4242", "slurm.array.job.id": "4240"}, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := genAIEmbeddings()
				require.NoError(t, f.span.Attributes().FromRaw(merge(f.span.Attributes().AsRaw(), tc.span)))
				require.NoError(t, f.res.Attributes().FromRaw(merge(f.res.Attributes().AsRaw(), tc.res)))
				got, v, reason := r.Recognize(f.span, f.res, now)
				require.Equal(t, Recognized, v, reason)
				assert.Equal(t, tc.want, got.SlurmJobID)
			})
		}
	})

	t.Run("configured keys only", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.GPUIDAttributes = []string{"my.gpu"}
		cfg.GPUIndexAttributes = nil
		cfg.VisibleDevicesAttributes = nil
		r, err := NewRecognizer(cfg)
		require.NoError(t, err)
		f := genAIEmbeddings()
		f.span.Attributes().PutStr("gpu.uuid", "GPU-ignored")
		f.span.Attributes().PutStr("my.gpu", "GPU-used")
		got, _, _ := r.Recognize(f.span, f.res, now)
		assert.Equal(t, []string{"GPU-used"}, got.GPUIDs)
	})
}

// allFixtures are every span the tests use, valid or not.
func allFixtures() map[string]fixture {
	return map[string]fixture{
		"vllm v1": vllmV1(), "vllm v0": vllmV0(), "genai chat": genAIChat(), "genai embeddings": genAIEmbeddings(),
		"tgi generate": tgiGenerate(), "tgi chat": tgiChat(),
		"tgi prefill":  tgiBackend("prefill", "text_generation_router_v3::backend", at(0), at(ms)),
		"triton model": tritonModel(), "triton compute": tritonCompute(), "triton all": tritonAllEvents(),
		"triton root": tritonRoot(), "http": httpSpan(), "rule": ruleSpan(),
		"triton bad order": tritonCompute().event("COMPUTE_START", at(3*ms)),
		"sglang root":      sglangRoot(""), "sglang aborted": sglangAborted(), "sglang thread": sglangThread(),
		"sglang slice": sglangSlice("decode_forward", 0, ms), "trtllm": trtllmRequest(), "genai client": genAIClient(),
	}
}

func spanBytes(t testing.TB, s ptrace.Span, res pcommon.Resource) []byte {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	res.CopyTo(rs.Resource())
	s.CopyTo(rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty())
	b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	require.NoError(t, err)
	return b
}

func TestRecognizeDoesNotMutate(t *testing.T) {
	r := newTestRecognizer(t)
	for name, f := range allFixtures() {
		t.Run(name, func(t *testing.T) {
			spanCopy, resCopy := ptrace.NewSpan(), pcommon.NewResource()
			f.span.CopyTo(spanCopy)
			f.res.CopyTo(resCopy)
			before := spanBytes(t, spanCopy, resCopy)
			for range 2 {
				r.Recognize(f.span, f.res, now)
			}
			assert.Equal(t, before, spanBytes(t, f.span, f.res))
			assert.True(t, resCopy.Attributes().Equal(f.res.Attributes()))
		})
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, testConfig().Validate())

	tests := []struct {
		name string
		edit func(c *Config)
		want []string
	}{
		{"empty key", func(c *Config) { c.GPUIndexAttributes = []string{"gpu.index", ""} }, []string{"match.gpu_index_attributes[1]: must not be empty"}},
		{"negative max_future", func(c *Config) { c.MaxFuture = -time.Second }, []string{"max_future:"}},
		{"zero max_duration", func(c *Config) { c.MaxDuration = 0 }, []string{"max_request_duration:"}},
		{"rule without name", func(c *Config) { c.Rules = []Rule{{SpanName: "x"}} }, []string{"rules[0].name: must not be empty"}},
		{"rule with spaces in name", func(c *Config) { c.Rules = []Rule{{Name: "my rule", SpanName: "x"}} }, []string{"rules[0].name:"}},
		{"rule without span name", func(c *Config) { c.Rules = []Rule{{Name: "a"}} }, []string{"rules[0].span_name:"}},
		{"rule with both names", func(c *Config) { c.Rules = []Rule{{Name: "a", SpanName: "x", SpanNamePrefix: "x"}} }, []string{"rules[0].span_name: set span_name or span_name_prefix, not both"}},
		{"duplicate rule names", func(c *Config) { c.Rules = []Rule{{Name: "a", SpanName: "x"}, {Name: "a", SpanName: "y"}} }, []string{"rules[1].name:", "rules[0]"}},
		{"same key twice", func(c *Config) {
			c.Rules = []Rule{{Name: "a", SpanName: "x", QueueSecondsAttribute: "k", DecodeSecondsAttribute: "k"}}
		}, []string{"rules[0].decode_seconds_attribute:", "queue_seconds_attribute"}},
		{"key with spaces", func(c *Config) { c.Rules = []Rule{{Name: "a", SpanName: "x", ModelAttribute: " m"}} }, []string{"rules[0].model_attribute:"}},
		{"several at once", func(c *Config) { c.MaxDuration = -1; c.Rules = []Rule{{}} }, []string{"max_request_duration:", "rules[0].name:", "rules[0].span_name:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			_, err = NewRecognizer(c)
			assert.Error(t, err)
		})
	}

	err := Rule{SpanName: "x"}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules[].name")
	assert.NoError(t, testRule.Validate())
}

func TestVerdictString(t *testing.T) {
	assert.Equal(t, "not_inference", NotInference.String())
	assert.Equal(t, "recognized", Recognized.String())
	assert.Equal(t, "malformed", Malformed.String())
	assert.Equal(t, "verdict(9)", Verdict(9).String())
}

func TestReasonsAreSnakeCase(t *testing.T) {
	for _, r := range Reasons() {
		assert.Regexp(t, `^[a-z]+(_[a-z]+)*$`, r)
	}
	rs := Reasons()
	rs[0] = "changed"
	assert.NotEqual(t, "changed", Reasons()[0])
}

// merge returns a with b's entries added.
func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}
