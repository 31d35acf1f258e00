package adversarial

import (
	"math"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/xpdata"
)

// The recognisers' malformed reasons (inference.Reasons, which is internal
// to the processor): the processor counts "malformed_" + reason.
const (
	badTimestamp      = "bad_timestamp"
	endBeforeStart    = "end_before_start"
	futureEnd         = "future_end"
	absurdDuration    = "absurd_duration"
	negativeLatency   = "negative_latency"
	badLatency        = "bad_latency"
	badDurationString = "bad_duration_string"
	badTokenCount     = "bad_token_count"
	phasesExceedSpan  = "phases_exceed_span"
	eventsOutOfOrder  = "events_out_of_order"
)

var nan = math.NaN()

type build = func(sp ptrace.Span, c clock)

// then runs base, then edit.
func then(base, edit build) build {
	return func(sp ptrace.Span, c clock) { base(sp, c); edit(sp, c) }
}

// attrs runs base, then edits the span's attributes.
func attrs(base build, edit func(a pcommon.Map)) build {
	return func(sp ptrace.Span, c clock) { base(sp, c); edit(sp.Attributes()) }
}

func window(sp ptrace.Span, start, end int64) {
	sp.SetStartTimestamp(pcommon.Timestamp(start))
	sp.SetEndTimestamp(pcommon.Timestamp(end))
}

func huge(fill byte) string { return strings.Repeat(string(fill), HugeBytes) }

func event(sp ptrace.Span, name string, at int64) {
	e := sp.Events().AppendEmpty()
	e.SetName(name)
	e.SetTimestamp(pcommon.Timestamp(at))
}

// manyEvents adds ManyEvents events no recogniser reads, inside the span.
func manyEvents(sp ptrace.Span, _ clock) {
	start, end := int64(sp.StartTimestamp()), int64(sp.EndTimestamp())
	for i := range ManyEvents {
		event(sp, "token", start+(end-start)*int64(i)/ManyEvents)
		sp.Events().At(i).Attributes().PutInt("index", int64(i))
	}
}

// The families' well-formed spans, 4 s long, ending at c.end.

// vllm is vLLM V1's llm_request: 0.5 s queued, 0.5 s prefill, 3 s decode.
func vllm(sp ptrace.Span, c clock) {
	sp.SetName("llm_request")
	sp.SetKind(ptrace.SpanKindServer)
	window(sp, c.end-4*sec, c.end)
	a := sp.Attributes()
	a.PutDouble("gen_ai.latency.time_in_queue", 0.5)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.5)
	a.PutDouble("gen_ai.latency.time_in_model_decode", 3)
	a.PutDouble("gen_ai.latency.time_to_first_token", 1)
	a.PutDouble("gen_ai.latency.e2e", 4)
	a.PutInt("gen_ai.usage.prompt_tokens", 512)
	a.PutInt("gen_ai.usage.completion_tokens", 200)
	a.PutStr("gen_ai.request.model", "meta-llama/Llama-3.1-8B-Instruct")
	a.PutStr("gen_ai.request.id", "cmpl-5c0ffee1")
}

// trtllm is trtllm-serve's llm_request: scheduled after 0.2 s, first token
// at 0.8 s, last at 3.5 s.
func trtllm(sp ptrace.Span, c clock) {
	sp.SetName("llm_request")
	sp.SetKind(ptrace.SpanKindServer)
	window(sp, c.end-4*sec, c.end)
	a := sp.Attributes()
	a.PutInt("gen_ai.request.id", 7)
	a.PutDouble("gen_ai.latency.time_in_queue", 0.2)
	a.PutDouble("gen_ai.latency.time_to_first_token", 0.8)
	a.PutDouble("gen_ai.latency.e2e", 3.5)
	a.PutDouble("gen_ai.latency.kv_cache_transfer_time", 0)
	a.PutInt("gen_ai.usage.prompt_tokens", 128)
	a.PutInt("gen_ai.usage.completion_tokens", 64)
}

// sglang is a unified server's request root: dispatched at 0.3 s, first
// token at 0.9 s, finished at 3.5 s.
func sglang(sp ptrace.Span, c clock) {
	sp.SetName(" Req 5c0ffee1")
	sp.SetKind(ptrace.SpanKindInternal)
	window(sp, c.end-4*sec, c.end)
	a := sp.Attributes()
	a.PutStr("rid", "5c0ffee1d2e3f4a5b6c7d8e9f0a1b2c3")
	a.PutStr("module", "sglang::tokenizer_manager")
	a.PutDouble("gen_ai.latency.time_to_first_token", 0.9)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.6)
	a.PutDouble("gen_ai.latency.time_in_model_decode", 2.6)
	a.PutDouble("gen_ai.latency.time_in_model_inference", 3.2)
	a.PutDouble("gen_ai.latency.e2e", 3.5)
	a.PutInt("gen_ai.usage.prompt_tokens", 300)
	a.PutInt("gen_ai.usage.completion_tokens", 100)
	a.PutInt("gen_ai.usage.cached_tokens", 64)
	a.PutStr("gen_ai.response.model", "Qwen/Qwen2.5-32B-Instruct")
}

// tgi is TGI's generate handler: 100 ms validation, 400 ms queued, 3.4 s
// inference.
func tgi(sp ptrace.Span, c clock) {
	sp.SetName("generate")
	sp.SetKind(ptrace.SpanKindInternal)
	window(sp, c.end-4*sec, c.end)
	a := sp.Attributes()
	a.PutStr("total_time", "3.9s")
	a.PutStr("validation_time", "100ms")
	a.PutStr("queue_time", "400ms")
	a.PutStr("inference_time", "3.4s")
	a.PutStr("time_per_token", "17.5ms")
	a.PutStr("code.namespace", "text_generation_router::server")
}

// tgiStep is a TGI backend span (prefill, decode, infer) marked by its
// code.namespace.
func tgiStep(name string, marked bool) build {
	return func(sp ptrace.Span, c clock) {
		sp.SetName(name)
		sp.SetKind(ptrace.SpanKindInternal)
		window(sp, c.end-sec/2, c.end)
		if marked {
			sp.Attributes().PutStr("code.namespace", "text_generation_router_v3::backend")
		}
	}
}

// tritonCompute is Triton's compute span: it starts at COMPUTE_START and
// ends at COMPUTE_END.
func tritonCompute(sp ptrace.Span, c clock) {
	sp.SetName("compute")
	sp.SetKind(ptrace.SpanKindInternal)
	start := c.end - sec
	window(sp, start, c.end)
	event(sp, "COMPUTE_START", start)
	event(sp, "COMPUTE_INPUT_END", start+sec/10)
	event(sp, "COMPUTE_OUTPUT_START", start+9*sec/10)
	event(sp, "COMPUTE_END", c.end)
}

// tritonModel is the model-named span above the compute span.
func tritonModel(sp ptrace.Span, c clock) {
	sp.SetName("llama")
	sp.SetKind(ptrace.SpanKindInternal)
	start := c.end - 2*sec
	window(sp, start, c.end)
	sp.Attributes().PutStr("triton.model_name", "llama")
	sp.Attributes().PutStr("triton.model_version", "1")
	event(sp, "REQUEST_START", start)
	event(sp, "QUEUE_START", start+sec/10)
	event(sp, "REQUEST_END", c.end)
}

// tritonAll is one span carrying every Triton activity in order.
func tritonAll(sp ptrace.Span, c clock) {
	sp.SetName("llama")
	start := c.end - 2*sec
	window(sp, start, c.end)
	sp.Attributes().PutStr("triton.model_name", "llama")
	for i, name := range []string{"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"} {
		event(sp, name, start+int64(i)*sec/4)
	}
}

// genai is a GenAI server span: first chunk after 0.5 s.
func genai(sp ptrace.Span, c clock) {
	sp.SetName("chat llama-3.1-8b")
	sp.SetKind(ptrace.SpanKindServer)
	window(sp, c.end-4*sec, c.end)
	a := sp.Attributes()
	a.PutStr("gen_ai.operation.name", "chat")
	a.PutStr("gen_ai.request.model", "llama-3.1-8b")
	a.PutDouble("gen_ai.response.time_to_first_chunk", 0.5)
	a.PutInt("gen_ai.usage.input_tokens", 40)
	a.PutInt("gen_ai.usage.output_tokens", 300)
}

// plain is a span of no family.
func plain(sp ptrace.Span, c clock) {
	sp.SetName("GET /health")
	sp.SetKind(ptrace.SpanKindServer)
	window(sp, c.end-sec/100, c.end)
	sp.Attributes().PutStr("http.request.method", "GET")
	sp.Attributes().PutInt("http.response.status_code", 200)
}

// windowCases are the checks every family shares, on a well-formed span
// of the family.
func windowCases(family string, res resource, base build) []Case {
	edits := []struct {
		edge, reason string
		edit         build
	}{
		{"zero_start", badTimestamp, func(sp ptrace.Span, _ clock) { sp.SetStartTimestamp(0) }},
		{"zero_end", badTimestamp, func(sp ptrace.Span, _ clock) { sp.SetEndTimestamp(0) }},
		{"start_beyond_int64", badTimestamp, func(sp ptrace.Span, _ clock) { sp.SetStartTimestamp(1<<63 + 5) }},
		{"end_before_start", endBeforeStart, func(sp ptrace.Span, _ clock) {
			start, end := sp.StartTimestamp(), sp.EndTimestamp()
			window(sp, int64(end), int64(start))
		}},
		{"future_end", futureEnd, func(sp ptrace.Span, _ clock) {
			window(sp, int64(sp.StartTimestamp())+3600*sec, int64(sp.EndTimestamp())+3600*sec)
		}},
		{"absurd_duration", absurdDuration, func(sp ptrace.Span, _ clock) {
			sp.SetStartTimestamp(sp.EndTimestamp() - pcommon.Timestamp(2*3600*sec))
		}},
	}
	out := make([]Case, len(edits))
	for i, e := range edits {
		out[i] = Case{Name: family + "/" + e.edge, Family: family, Outcome: Malformed, Reason: e.reason, PerCycle: 8, res: res, build: then(base, e.edit)}
	}
	return out
}

// ok, malformed and not are table rows of the common weight.
func ok(name, family string, phases int, res resource, b build) Case {
	return Case{Name: name, Family: family, Outcome: Enriched, Phases: phases, PerCycle: 8, res: res, build: b}
}

// passed is a well-formed span of family whose window holds no GPU sample
// (long past, or empty): recognised, passed through untouched and counted
// unenriched no_samples.
func passed(name, family string, b build) Case {
	return Case{Name: name, Family: family, Outcome: Enriched, Unenriched: "no_samples", PerCycle: 8, res: resPlain, build: b}
}

func malformed(name, family, reason string, res resource, b build) Case {
	return Case{Name: name, Family: family, Outcome: Malformed, Reason: reason, PerCycle: 8, res: res, build: b}
}

func not(name, family string, res resource, b build) Case {
	return Case{Name: name, Family: family, Outcome: NotInference, PerCycle: 8, res: res, build: b}
}

// rare makes a case with a large payload come once a cycle.
func rare(c Case) Case {
	c.PerCycle = 1
	return c
}

// mistypedExtras puts, beside what a recogniser reads, attributes of every
// type and value no server sends: NaN and infinities, extreme integers,
// bytes, empty values, nested maps and slices.
func mistypedExtras(a pcommon.Map) {
	a.PutDouble("x.nan", nan)
	a.PutDouble("x.inf", math.Inf(1))
	a.PutDouble("x.neg_inf", math.Inf(-1))
	a.PutDouble("x.neg_zero", math.Copysign(0, -1))
	a.PutInt("x.min_int", math.MinInt64)
	a.PutEmptyBytes("x.bytes").FromRaw([]byte{0, 0xff, 0xfe})
	a.PutEmpty("x.empty")
	a.PutStr("x.invalid_utf8", "\xff\xfe\xfd")
	a.PutStr("", "empty key")
	s := a.PutEmptySlice("x.slice")
	s.AppendEmpty().SetDouble(nan)
	s.AppendEmpty().SetStr("GPU-")
	s.AppendEmpty().SetEmptyMap().PutInt("k", -1)
	deep(a.PutEmptyMap("x.deep"), DeepestMaps)
}

// DeepestMaps is how deep the cases nest maps in an attribute value: about
// the most pdata decodes (its proto.RecursionLimit of 100 counts the
// AnyValue, KeyValueList and KeyValue of each level, and the levels above).
const DeepestMaps = 16

// deep nests maps n levels.
func deep(m pcommon.Map, n int) {
	for range n {
		m = m.PutEmptyMap("d")
	}
	m.PutStr("leaf", "bottom")
}

// ManyAttributes is how many attributes the "many attributes" cases add:
// a hundred times what an SDK's default span limit (128) lets through.
// 10^5 made TestAdversarial 93 s longer (its 10^6 spans carry one such
// span per cycle of the table) for no case 10^4 does not show.
const ManyAttributes = 10_000

// manyAttrs adds ManyAttributes attributes no recogniser reads.
// (appended: pcommon.Map's Puts scan every key already there).
func manyAttrs(a pcommon.Map) {
	var mb xpdata.MapBuilder
	mb.EnsureCapacity(a.Len() + ManyAttributes)
	for k, v := range a.All() {
		v.CopyTo(mb.AppendEmpty(k))
	}
	for i := range ManyAttributes {
		mb.AppendEmpty("x." + strconv.Itoa(i)).SetInt(int64(i))
	}
	mb.UnsafeIntoMap(a)
}

// duplicated appends a second attribute named k with value set, after
// whatever the span has: on the wire OTLP allows it, pcommon.Map's Puts
// never make it, and each recogniser reads every attribute in order.
func duplicated(k string, set func(v pcommon.Value)) func(a pcommon.Map) {
	return func(a pcommon.Map) {
		var mb xpdata.MapBuilder
		mb.EnsureCapacity(a.Len() + 1)
		for key, v := range a.All() {
			v.CopyTo(mb.AppendEmpty(key))
		}
		set(mb.AppendEmpty(k))
		mb.UnsafeIntoMap(a)
	}
}

// farPast moves a span's window (and its events) back by 25 years, before any GPU
// sample.
func farPast(sp ptrace.Span, _ clock) {
	const back = 25 * 365 * 24 * 3600 * sec
	window(sp, int64(sp.StartTimestamp())-back, int64(sp.EndTimestamp())-back)
	for i := range sp.Events().Len() {
		e := sp.Events().At(i)
		e.SetTimestamp(e.Timestamp() - pcommon.Timestamp(back))
	}
}

// zeroDuration ends a span at its start.
func zeroDuration(sp ptrace.Span, _ clock) { sp.SetStartTimestamp(sp.EndTimestamp()) }

var cases = func() []Case {
	var t []Case
	add := func(cs ...Case) { t = append(t, cs...) }

	// vLLM.
	add(
		ok("vllm/ok", "vllm", 3, resPlain, vllm),
		ok("vllm/inference_only", "vllm", 2, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.Remove("gen_ai.latency.time_in_model_prefill")
			a.Remove("gen_ai.latency.time_in_model_decode")
			a.PutDouble("gen_ai.latency.time_in_model_inference", 3.5)
		})),
		ok("vllm/no_latencies", "vllm", 0, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.RemoveIf(func(k string, _ pcommon.Value) bool { return strings.HasPrefix(k, "gen_ai.latency.") })
		})),
		ok("vllm/mistyped_extras", "vllm", 3, resPlain, attrs(vllm, mistypedExtras)),
		ok("vllm/mistyped_resource", "vllm", 3, resMistyped, vllm),
		ok("vllm/empty_resource", "vllm", 3, resEmpty, vllm),
		ok("vllm/empty_ids", "vllm", 3, resPlain, then(vllm, func(sp ptrace.Span, _ clock) {
			sp.SetTraceID(pcommon.NewTraceIDEmpty())
			sp.SetSpanID(pcommon.NewSpanIDEmpty())
			sp.SetParentSpanID(pcommon.NewSpanIDEmpty())
		})),
		ok("vllm/foreign_gpuviz_attributes", "vllm", 3, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutStr("gpuviz.energy", "lots")
			a.PutBool("gpuviz.gpu.ids", true)
		})),
		ok("vllm/unknown_gpu_hint", "vllm", 3, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutStr("gpu.uuid", "GPU-00000000-dead-beef-0000-000000000000, ,")
			a.PutInt("gpu.index", 1<<40)
		})),
		rare(ok("vllm/huge_model", "vllm", 3, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutStr("gen_ai.request.model", huge('m'))
		}))),
		rare(ok("vllm/many_events", "vllm", 3, resPlain, then(vllm, manyEvents))),
		rare(ok("vllm/huge_resource", "vllm", 3, resHuge, vllm)),
		malformed("vllm/nan_latency", "vllm", badLatency, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_prefill", nan)
		})),
		malformed("vllm/inf_latency", "vllm", badLatency, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_decode", math.Inf(1))
		})),
		malformed("vllm/string_latency", "vllm", badLatency, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutStr("gen_ai.latency.time_in_queue", "0.5")
		})),
		malformed("vllm/bool_latency", "vllm", badLatency, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutBool("gen_ai.latency.e2e", true)
		})),
		malformed("vllm/slice_latency", "vllm", badLatency, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutEmptySlice("gen_ai.latency.time_in_model_prefill").AppendEmpty().SetDouble(0.5)
		})),
		malformed("vllm/negative_latency", "vllm", negativeLatency, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_decode", -3)
		})),
		malformed("vllm/negative_int_e2e", "vllm", negativeLatency, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutInt("gen_ai.latency.e2e", -1)
		})),
		malformed("vllm/huge_latency", "vllm", phasesExceedSpan, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_decode", 1e300)
		})),
		malformed("vllm/huge_int_latency", "vllm", phasesExceedSpan, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutInt("gen_ai.latency.time_in_queue", math.MaxInt64)
		})),
		malformed("vllm/phases_exceed_span", "vllm", phasesExceedSpan, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_prefill", 2)
		})),
		malformed("vllm/string_token_count", "vllm", badTokenCount, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutStr("gen_ai.usage.prompt_tokens", "512")
		})),
		malformed("vllm/negative_token_count", "vllm", badTokenCount, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutInt("gen_ai.usage.completion_tokens", -1)
		})),
		malformed("vllm/double_token_count", "vllm", badTokenCount, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.usage.output_tokens", 3.5)
		})),
		not("vllm/name_with_space", "vllm", resPlain, then(vllm, func(sp ptrace.Span, _ clock) { sp.SetName("llm_request ") })),
		ok("vllm/duplicate_model", "vllm", 3, resPlain, attrs(vllm, duplicated("gen_ai.request.model", func(v pcommon.Value) { v.SetStr("other") }))),
		ok("vllm/duplicate_gpuviz_attribute", "vllm", 3, resPlain, attrs(vllm, func(a pcommon.Map) {
			a.PutStr("gpuviz.energy", "lots")
			duplicated("gpuviz.energy", func(v pcommon.Value) { v.SetBool(true) })(a)
		})),
		ok("vllm/invalid_utf8_model", "vllm", 3, resPlain, attrs(vllm, func(a pcommon.Map) { a.PutStr("gen_ai.request.model", "\xff\xfe") })),
		ok("vllm/empty_model", "vllm", 3, resPlain, attrs(vllm, func(a pcommon.Map) { a.PutStr("gen_ai.request.model", "") })),
		passed("vllm/zero_duration_no_latencies", "vllm", then(attrs(vllm, func(a pcommon.Map) {
			a.RemoveIf(func(k string, _ pcommon.Value) bool { return strings.HasPrefix(k, "gen_ai.latency.") })
		}), zeroDuration)),
		rare(ok("vllm/many_attributes", "vllm", 3, resPlain, attrs(vllm, manyAttrs))),
		passed("vllm/far_past", "vllm", then(vllm, farPast)),
		malformed("vllm/duplicate_latency_nan", "vllm", badLatency, resPlain, attrs(vllm, duplicated("gen_ai.latency.time_in_model_prefill", func(v pcommon.Value) { v.SetDouble(nan) }))),
		malformed("vllm/duplicate_latency_past_end", "vllm", phasesExceedSpan, resPlain, attrs(vllm, duplicated("gen_ai.latency.time_in_model_prefill", func(v pcommon.Value) { v.SetDouble(2) }))),
		malformed("vllm/duplicate_token_count_string", "vllm", badTokenCount, resPlain, attrs(vllm, duplicated("gen_ai.usage.prompt_tokens", func(v pcommon.Value) { v.SetStr("512") }))),
		malformed("vllm/zero_duration", "vllm", phasesExceedSpan, resPlain, then(vllm, zeroDuration)),
		malformed("vllm/empty_latency_value", "vllm", badLatency, resPlain, attrs(vllm, func(a pcommon.Map) { a.PutEmpty("gen_ai.latency.time_in_queue") })),
		malformed("vllm/far_past_start", "vllm", absurdDuration, resPlain, then(vllm, func(sp ptrace.Span, _ clock) { sp.SetStartTimestamp(1) })),
	)
	add(windowCases("vllm", resPlain, vllm)...)

	// TensorRT-LLM.
	add(
		ok("trtllm/ok", "trtllm", 3, resPlain, trtllm),
		ok("trtllm/unknown_queue", "trtllm", 2, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutInt("gen_ai.latency.time_in_queue", -1)
		})),
		ok("trtllm/unknown_queue_double", "trtllm", 2, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_queue", -1)
		})),
		ok("trtllm/no_e2e", "trtllm", 3, resPlain, attrs(trtllm, func(a pcommon.Map) { a.Remove("gen_ai.latency.e2e") })),
		ok("trtllm/no_ttft", "trtllm", 2, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.Remove("gen_ai.latency.time_to_first_token")
		})),
		ok("trtllm/string_request_id", "trtllm", 3, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutStr("gen_ai.request.id", "7")
		})),
		// vLLM's latencies make it vLLM's span: queue and prefill.
		ok("trtllm/with_vllm_latencies", "vllm", 2, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.6)
		})),
		malformed("trtllm/zero_duration", "trtllm", phasesExceedSpan, resPlain, then(trtllm, zeroDuration)),
		passed("trtllm/far_past", "trtllm", then(trtllm, farPast)),
		malformed("trtllm/negative_latency", "trtllm", negativeLatency, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_queue", -2)
		})),
		malformed("trtllm/nan_ttft", "trtllm", badLatency, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_to_first_token", nan)
		})),
		malformed("trtllm/string_kv_transfer", "trtllm", badLatency, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutStr("gen_ai.latency.kv_cache_transfer_time", "0")
		})),
		malformed("trtllm/ttft_past_end", "trtllm", phasesExceedSpan, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_to_first_token", 10)
		})),
		malformed("trtllm/e2e_before_ttft", "trtllm", eventsOutOfOrder, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.e2e", 0.5)
		})),
		malformed("trtllm/bool_token_count", "trtllm", badTokenCount, resPlain, attrs(trtllm, func(a pcommon.Map) {
			a.PutBool("gen_ai.usage.prompt_tokens", true)
		})),
	)
	add(windowCases("trtllm", resPlain, trtllm)...)

	// SGLang.
	add(
		ok("sglang/ok", "sglang", 2, resPlain, sglang),
		ok("sglang/with_queue", "sglang", 3, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_queue", 0.1)
		})),
		ok("sglang/aborted", "sglang", 0, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.RemoveIf(func(k string, _ pcommon.Value) bool { return strings.HasPrefix(k, "gen_ai.") })
		})),
		ok("sglang/inference_only", "sglang", 1, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.Remove("gen_ai.latency.time_to_first_token")
		})),
		ok("sglang/marked_by_service", "sglang", 2, resSGLang, attrs(sglang, func(a pcommon.Map) {
			a.Remove("module")
			a.PutInt("rid", 5)
		})),
		ok("sglang/prefill_server", "sglang", 2, resPlain, then(sglang, func(sp ptrace.Span, _ clock) {
			sp.SetName("prefill Req 5c0ffee1")
		})),
		not("sglang/router", "sglang", resPlain, then(sglang, func(sp ptrace.Span, _ clock) { sp.SetName("router Req 5c0ffee1") })),
		not("sglang/unmarked", "sglang", resPlain, attrs(sglang, func(a pcommon.Map) {
			a.Remove("module")
			a.PutStr("rid", "other")
		})),
		not("sglang/thread_span", "sglang", resSGLang, then(sglang, func(sp ptrace.Span, _ clock) {
			sp.SetName("Scheduler [TP 0] (host:9a371d29 | pid:4104)")
		})),
		not("sglang/long_id", "sglang", resPlain, then(sglang, func(sp ptrace.Span, _ clock) {
			sp.SetName(" Req " + strings.Repeat("5c0ffee1", 5))
		})),
		not("sglang/role_with_space", "sglang", resPlain, then(sglang, func(sp ptrace.Span, _ clock) {
			sp.SetName("a b Req 5c0ffee1")
		})),
		ok("sglang/invalid_utf8_id", "sglang", 2, resPlain, then(sglang, func(sp ptrace.Span, _ clock) { sp.SetName(" Req \xff\xfe") })),
		malformed("sglang/zero_duration", "sglang", phasesExceedSpan, resPlain, then(sglang, zeroDuration)),
		passed("sglang/far_past", "sglang", then(sglang, farPast)),
		malformed("sglang/prefill_before_dispatch", "sglang", phasesExceedSpan, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_prefill", 1.5)
		})),
		malformed("sglang/double_cached_tokens", "sglang", badTokenCount, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.PutDouble("gen_ai.usage.cached_tokens", 64)
		})),
		malformed("sglang/nan_ttft", "sglang", badLatency, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_to_first_token", nan)
		})),
		malformed("sglang/huge_decode", "sglang", phasesExceedSpan, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.time_in_model_decode", 1e300)
		})),
		malformed("sglang/negative_e2e", "sglang", negativeLatency, resPlain, attrs(sglang, func(a pcommon.Map) {
			a.PutDouble("gen_ai.latency.e2e", -0.1)
		})),
	)
	add(windowCases("sglang", resPlain, sglang)...)

	// TGI.
	add(
		ok("tgi/ok", "tgi", 2, resPlain, tgi),
		ok("tgi/micro_signs", "tgi", 2, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("validation_time", "850µs")
			a.PutStr("queue_time", "850μs")
			a.PutStr("time_per_token", "850us")
		})),
		ok("tgi/no_validation", "tgi", 2, resPlain, attrs(tgi, func(a pcommon.Map) { a.Remove("validation_time") })),
		ok("tgi/prefill_marked", "tgi", 1, resPlain, tgiStep("prefill", true)),
		ok("tgi/decode_by_service", "tgi", 1, resTGI, tgiStep("decode", false)),
		ok("tgi/infer_by_service", "tgi", 1, resTGI, tgiStep("infer", false)),
		not("tgi/decode_unmarked", "tgi", resPlain, tgiStep("decode", false)),
		not("tgi/handler_without_timing", "tgi", resPlain, attrs(tgi, func(a pcommon.Map) {
			for _, k := range []string{"total_time", "validation_time", "queue_time", "inference_time", "time_per_token"} {
				a.Remove(k)
			}
		})),
		malformed("tgi/duration_with_space", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("queue_time", "1.5 ms")
		})),
		malformed("tgi/duration_minutes", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("inference_time", "1m")
		})),
		malformed("tgi/duration_negative", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("validation_time", "-1ms")
		})),
		malformed("tgi/duration_int", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutInt("total_time", 4)
		})),
		malformed("tgi/duration_too_large", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("inference_time", "99999999999999999999s")
		})),
		malformed("tgi/duration_empty_fraction", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("queue_time", "1.ms")
		})),
		malformed("tgi/validation_past_end", "tgi", phasesExceedSpan, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("validation_time", "10s")
		})),
		malformed("tgi/inference_past_end", "tgi", phasesExceedSpan, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("inference_time", "30s")
		})),
		malformed("tgi/duration_empty", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) { a.PutStr("queue_time", "") })),
		malformed("tgi/duration_invalid_utf8", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) { a.PutStr("queue_time", "1\xffms") })),
		malformed("tgi/duration_nan", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) { a.PutStr("queue_time", "NaNs") })),
		malformed("tgi/duplicate_duration", "tgi", badDurationString, resPlain, attrs(tgi, duplicated("queue_time", func(v pcommon.Value) { v.SetStr("soon") }))),
		malformed("tgi/zero_duration", "tgi", phasesExceedSpan, resPlain, then(tgi, zeroDuration)),
		passed("tgi/far_past", "tgi", then(tgi, farPast)),
		rare(malformed("tgi/huge_duration_string", "tgi", badDurationString, resPlain, attrs(tgi, func(a pcommon.Map) {
			a.PutStr("queue_time", strings.Repeat("9", HugeBytes)+"ms")
		}))),
	)
	add(windowCases("tgi", resPlain, tgi)...)

	// Triton.
	add(
		ok("triton/compute", "triton", 1, resPlain, tritonCompute),
		ok("triton/model_span", "triton", 0, resPlain, tritonModel),
		ok("triton/all_events", "triton", 2, resPlain, tritonAll),
		rare(ok("triton/many_events", "triton", 1, resPlain, then(tritonCompute, manyEvents))),
		not("triton/infer_request", "triton", resPlain, func(sp ptrace.Span, c clock) {
			sp.SetName("InferRequest")
			window(sp, c.end-2*sec, c.end)
			event(sp, "HTTP_RECV_START", c.end-2*sec)
			event(sp, "HTTP_SEND_END", c.end)
		}),
		not("triton/model_name_int", "triton", resPlain, func(sp ptrace.Span, c clock) {
			sp.SetName("llama")
			window(sp, c.end-2*sec, c.end)
			sp.Attributes().PutInt("triton.model_name", 3)
		}),
		malformed("triton/duplicate_compute_end", "triton", eventsOutOfOrder, resPlain, then(tritonCompute, func(sp ptrace.Span, _ clock) {
			event(sp, "COMPUTE_END", int64(sp.EndTimestamp()))
		})),
		malformed("triton/zero_duration", "triton", phasesExceedSpan, resPlain, then(tritonCompute, zeroDuration)),
		passed("triton/far_past", "triton", then(tritonCompute, farPast)),
		malformed("triton/compute_start_only", "triton", eventsOutOfOrder, resPlain, then(tritonCompute, func(sp ptrace.Span, _ clock) {
			sp.Events().RemoveIf(func(e ptrace.SpanEvent) bool { return e.Name() == "COMPUTE_END" })
		})),
		malformed("triton/duplicate_compute_start", "triton", eventsOutOfOrder, resPlain, then(tritonCompute, func(sp ptrace.Span, _ clock) {
			event(sp, "COMPUTE_START", int64(sp.StartTimestamp()))
		})),
		malformed("triton/reversed_events", "triton", eventsOutOfOrder, resPlain, then(tritonCompute, func(sp ptrace.Span, _ clock) {
			ev := sp.Events()
			first, last := ev.At(0).Timestamp(), ev.At(ev.Len()-1).Timestamp()
			ev.At(0).SetTimestamp(last)
			ev.At(ev.Len() - 1).SetTimestamp(first)
		})),
		malformed("triton/event_at_zero", "triton", phasesExceedSpan, resPlain, then(tritonCompute, func(sp ptrace.Span, _ clock) {
			for i := range sp.Events().Len() - 1 {
				sp.Events().At(i).SetTimestamp(0)
			}
		})),
		malformed("triton/event_beyond_int64", "triton", eventsOutOfOrder, resPlain, then(tritonCompute, func(sp ptrace.Span, _ clock) {
			ev := sp.Events()
			ev.At(ev.Len() - 1).SetTimestamp(1<<63 + 1)
		})),
		malformed("triton/compute_before_span", "triton", phasesExceedSpan, resPlain, then(tritonCompute, func(sp ptrace.Span, _ clock) {
			sp.Events().At(0).SetTimestamp(sp.StartTimestamp() - pcommon.Timestamp(sec/2))
		})),
	)
	add(windowCases("triton", resPlain, tritonCompute)...)

	// GenAI.
	add(
		ok("genai/ok", "genai", 2, resPlain, genai),
		ok("genai/client", "genai", 2, resPlain, then(genai, func(sp ptrace.Span, _ clock) { sp.SetKind(ptrace.SpanKindClient) })),
		ok("genai/no_ttfc", "genai", 1, resPlain, attrs(genai, func(a pcommon.Map) { a.Remove("gen_ai.response.time_to_first_chunk") })),
		ok("genai/kind_out_of_range", "genai", 2, resPlain, then(genai, func(sp ptrace.Span, _ clock) { sp.SetKind(ptrace.SpanKind(42)) })),
		ok("genai/old_token_names", "genai", 2, resPlain, attrs(genai, func(a pcommon.Map) {
			a.Remove("gen_ai.usage.input_tokens")
			a.PutInt("gen_ai.usage.prompt_tokens", 40)
		})),
		rare(ok("genai/huge_operation", "genai", 2, resPlain, attrs(genai, func(a pcommon.Map) {
			a.PutStr("gen_ai.operation.name", huge('o'))
		}))),
		not("genai/execute_tool", "genai", resPlain, attrs(genai, func(a pcommon.Map) { a.PutStr("gen_ai.operation.name", "execute_tool") })),
		not("genai/operation_int", "genai", resPlain, attrs(genai, func(a pcommon.Map) { a.PutInt("gen_ai.operation.name", 1) })),
		not("genai/operation_empty", "genai", resPlain, attrs(genai, func(a pcommon.Map) { a.PutStr("gen_ai.operation.name", "") })),
		malformed("genai/zero_duration", "genai", phasesExceedSpan, resPlain, then(genai, zeroDuration)),
		malformed("genai/duplicate_tokens", "genai", badTokenCount, resPlain, attrs(genai, duplicated("gen_ai.usage.input_tokens", func(v pcommon.Value) { v.SetInt(-5) }))),
		passed("genai/far_past", "genai", then(genai, farPast)),
		ok("genai/operation_invalid_utf8", "genai", 2, resPlain, attrs(genai, func(a pcommon.Map) { a.PutStr("gen_ai.operation.name", "ch\xffat") })),
		malformed("genai/nan_ttfc", "genai", badLatency, resPlain, attrs(genai, func(a pcommon.Map) {
			a.PutDouble("gen_ai.response.time_to_first_chunk", nan)
		})),
		malformed("genai/string_ttfc", "genai", badLatency, resPlain, attrs(genai, func(a pcommon.Map) {
			a.PutStr("gen_ai.response.time_to_first_chunk", "0.5")
		})),
		malformed("genai/negative_ttfc", "genai", negativeLatency, resPlain, attrs(genai, func(a pcommon.Map) {
			a.PutDouble("gen_ai.response.time_to_first_chunk", -0.5)
		})),
		malformed("genai/ttfc_past_end", "genai", phasesExceedSpan, resPlain, attrs(genai, func(a pcommon.Map) {
			a.PutDouble("gen_ai.response.time_to_first_chunk", 10)
		})),
		malformed("genai/double_tokens", "genai", badTokenCount, resPlain, attrs(genai, func(a pcommon.Map) {
			a.PutDouble("gen_ai.usage.input_tokens", 40)
		})),
	)
	add(windowCases("genai", resPlain, genai)...)

	// Spans of no family.
	add(
		not("none/http", "", resPlain, plain),
		not("none/empty_span", "", resEmpty, func(ptrace.Span, clock) {}),
		not("none/invalid_utf8_name", "", resPlain, then(plain, func(sp ptrace.Span, _ clock) { sp.SetName("\xff\xfellm_request") })),
		not("none/mistyped_extras", "", resMistyped, attrs(plain, func(a pcommon.Map) {
			mistypedExtras(a)
			a.PutDouble("gen_ai.latency.time_in_queue", nan)
			a.PutStr("gen_ai.usage.prompt_tokens", "many")
		})),
		not("none/zero_timestamps", "", resPlain, then(plain, func(sp ptrace.Span, _ clock) { window(sp, 0, 0) })),
		not("none/status_and_state", "", resPlain, then(plain, func(sp ptrace.Span, _ clock) {
			sp.Status().SetCode(ptrace.StatusCode(99))
			sp.Status().SetMessage(strings.Repeat("error ", 100))
			sp.TraceState().FromRaw("vendor=\xff,=,,")
			sp.SetDroppedAttributesCount(1 << 31)
			sp.SetFlags(0xffffffff)
		})),
		rare(not("none/huge_name", "", resPlain, then(plain, func(sp ptrace.Span, _ clock) { sp.SetName(huge('n')) }))),
		rare(not("none/huge_resource", "", resHuge, plain)),
		rare(not("none/many_events_and_links", "", resPlain, then(plain, func(sp ptrace.Span, c clock) {
			manyEvents(sp, c)
			for i := range ManyEvents / 4 {
				l := sp.Links().AppendEmpty()
				l.SetTraceID(pcommon.TraceID{byte(i), 1})
				l.SetSpanID(pcommon.SpanID{byte(i), 2})
				l.Attributes().PutInt("index", int64(i))
			}
		}))),
	)
	return t
}()
