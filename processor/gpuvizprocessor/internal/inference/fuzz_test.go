package inference

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

var fuzzNames = []string{
	"llm_request", "chat m", "generate", "generate_stream", "completions", "chat_completions",
	"prefill", "decode", "infer", "resnet50", "compute", "InferRequest", "serve_request", "batch/x", "GET /",
	" Req 5c0ffee1", "prefill Req 5c0ffee1", "router Req 5c0ffee1", "Scheduler [TP 0] (host:9a371d29 | pid:4104)",
	"decode_forward",
}

var fuzzKeys = []string{
	"gen_ai.latency.time_in_queue", "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode",
	"gen_ai.latency.time_in_model_inference", "gen_ai.latency.e2e", "gen_ai.latency.time_to_first_token",
	"gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
	"gen_ai.request.model", "gen_ai.response.model", "gen_ai.operation.name", "gen_ai.response.time_to_first_chunk",
	"total_time", "validation_time", "queue_time", "inference_time", "time_per_token",
	"code.namespace", "service.name", "triton.model_name",
	"srv.queue_s", "srv.prefill", "srv.decode", "srv.in", "srv.out", "srv.model",
	"hw.id", "gpu.id", "gpu.index", "CUDA_VISIBLE_DEVICES", "process.pid", "host.name", "slurm.job.id",
	"gen_ai.latency.kv_cache_transfer_time", "gen_ai.request.id", "gen_ai.usage.cached_tokens", "rid", "module",
}

var fuzzEvents = []string{
	"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END",
	"REQUEST_END", "HTTP_RECV_START",
}

// fuzzSpan builds a span and resource from fuzz input:
//   - nameSel picks a family's span name (or name when out of range);
//   - kind is the span kind (modulo the six kinds);
//   - startSel: with the top bit set, the start timestamp as is; else t0 plus
//     up to an hour;
//   - attrs: (key, kind) byte pairs; kind's top bit puts the attribute on the
//     resource, its low bits pick the value: sval, ival, dval, a Rust
//     duration or number made from ival, a bool, a slice, a map, bytes;
//   - events: (name, offset) triples, offset a signed 16-bit count of
//     100 µs steps from the start.
func fuzzSpan(nameSel uint8, name string, kind uint8, startSel uint64, dur int64, attrs []byte, sval string, ival int64, dval float64, events []byte) (ptrace.Span, pcommon.Resource) {
	span, res := ptrace.NewSpan(), pcommon.NewResource()
	if int(nameSel) < len(fuzzNames) {
		name = fuzzNames[nameSel]
	}
	span.SetName(name)
	span.SetKind(ptrace.SpanKind(kind % 6))
	start := startSel
	if startSel>>63 == 0 {
		start = uint64(t0.UnixNano()) + startSel%uint64(time.Hour)
	}
	span.SetStartTimestamp(pcommon.Timestamp(start))
	span.SetEndTimestamp(pcommon.Timestamp(start + uint64(dur)))
	for i := 0; i+1 < len(attrs); i += 2 {
		key := fuzzKeys[int(attrs[i])%len(fuzzKeys)]
		kind := attrs[i+1]
		m := span.Attributes()
		if kind&0x80 != 0 {
			m = res.Attributes()
		}
		switch kind & 0x0f {
		case 0:
			m.PutStr(key, sval)
		case 1:
			m.PutInt(key, ival)
		case 2:
			m.PutDouble(key, dval)
		case 3:
			m.PutDouble(key, float64(ival%10_000_000)/1e6) // plausible seconds
		case 4:
			m.PutInt(key, ival%5000)
		case 5:
			m.PutStr(key, rustDebug(time.Duration(ival%int64(10*time.Second))))
		case 6:
			m.PutBool(key, ival&1 == 1)
		case 7:
			s := m.PutEmptySlice(key)
			s.AppendEmpty().SetStr(sval)
			s.AppendEmpty().SetInt(ival % 10)
			s.AppendEmpty().SetDouble(dval)
		case 8:
			m.PutEmptyMap(key).PutStr("k", sval)
		case 9:
			m.PutEmptyBytes(key).FromRaw([]byte(sval))
		case 10:
			m.PutEmpty(key)
		default:
			m.PutStr(key, sval+","+sval)
		}
	}
	for i := 0; i+2 < len(events); i += 3 {
		e := span.Events().AppendEmpty()
		e.SetName(fuzzEvents[int(events[i])%len(fuzzEvents)])
		off := int64(int16(uint16(events[i+1])<<8|uint16(events[i+2]))) * int64(100*time.Microsecond)
		e.SetTimestamp(pcommon.Timestamp(start + uint64(off)))
	}
	return span, res
}

func FuzzRecognize(f *testing.F) {
	sec := int64(time.Second)
	// One seed per family, shaped like the fixtures; kinds: 1 internal, 2
	// server, 3 client.
	f.Add(uint8(0), "", uint8(2), uint64(0), 2*sec, []byte{0, 3, 1, 3, 2, 3, 6, 4, 7, 4, 10, 0}, "m", int64(300_000), 0.1, []byte{})
	f.Add(uint8(1), "", uint8(2), uint64(5), 3*sec, []byte{12, 0, 13, 2, 8, 4, 9, 4, 30, 4, 31, 0x80}, "chat", int64(7), 0.25, []byte{})
	f.Add(uint8(1), "", uint8(3), uint64(5), 3*sec, []byte{12, 0, 10, 0, 8, 4, 9, 4}, "chat", int64(7), 0.25, []byte{})
	f.Add(uint8(2), "", uint8(1), uint64(5), 3*sec, []byte{14, 5, 15, 5, 16, 5, 17, 5, 18, 5, 20, 0x80}, "text-generation-inference.router", int64(900_000_000), 0.0, []byte{})
	f.Add(uint8(6), "", uint8(1), uint64(5), sec, []byte{19, 0}, "text_generation_router_v3::backend", int64(0), 0.0, []byte{})
	f.Add(uint8(9), "", uint8(2), uint64(5), sec/50, []byte{21, 0}, "resnet50", int64(0), 0.0, []byte{0, 0, 0, 1, 0, 10, 2, 0, 40, 3, 0, 50, 4, 0, 150, 5, 0, 180, 6, 0, 200})
	f.Add(uint8(10), "", uint8(2), uint64(5), sec/100, []byte{}, "", int64(0), 0.0, []byte{2, 0, 0, 5, 0, 100, 5, 0, 90})
	f.Add(uint8(12), "", uint8(2), uint64(5), sec, []byte{22, 4, 23, 3, 24, 5, 25, 4, 27, 0x80}, "0,1,GPU-a", int64(123_456_789), 0.5, []byte{})
	// SGLang's root: marked by module (and service.name), every latency the
	// same plausible seconds; by rid on a prefill server.
	f.Add(uint8(15), "", uint8(1), uint64(5), 2*sec, []byte{38, 0, 21, 0x80, 5, 3, 1, 3, 2, 3, 4, 3, 3, 3, 6, 4, 7, 4, 36, 4, 13, 0}, "sglang::request", int64(300_000), 0.0, []byte{})
	f.Add(uint8(16), "", uint8(1), uint64(5), 2*sec, []byte{37, 0, 5, 3, 1, 2, 3, 3, 4, 3, 0, 2}, "5c0ffee1d2e3", int64(400_000), 0.1, []byte{})
	f.Add(uint8(17), "", uint8(1), uint64(5), sec, []byte{38, 0, 5, 3}, "sglang::request", int64(100_000), 0.0, []byte{})
	f.Add(uint8(18), "", uint8(1), uint64(5), sec, []byte{21, 0x80, 37, 0}, "sglang", int64(0), 0.0, []byte{})
	f.Add(uint8(19), "", uint8(1), uint64(5), sec, []byte{21, 0x80}, "sglang", int64(0), 0.0, []byte{})
	// TensorRT-LLM's llm_request: an integer request id, latencies from the
	// arrival, a KV cache transfer time; then with its -1 for unknown.
	f.Add(uint8(0), "", uint8(2), uint64(5), 2*sec, []byte{35, 4, 0, 3, 5, 3, 4, 3, 34, 2, 6, 4, 7, 4}, "", int64(100_000), 0.0, []byte{})
	f.Add(uint8(0), "", uint8(2), uint64(5), sec, []byte{35, 1, 0, 1, 5, 2, 4, 1, 34, 2}, "", int64(-1), 0.2, []byte{})
	f.Add(uint8(200), "weird", uint8(0), uint64(1<<63|1), -sec, []byte{0, 0, 1, 1, 2, 2}, "1.5", int64(-1), -0.5, []byte{2, 255, 255})

	r := newTestRecognizer(f)
	f.Fuzz(func(t *testing.T, nameSel uint8, name string, kind uint8, startSel uint64, dur int64, attrs []byte, sval string, ival int64, dval float64, events []byte) {
		span, res := fuzzSpan(nameSel, name, kind, startSel, dur, attrs, sval, ival, dval, events)
		spanCopy, resCopy := ptrace.NewSpan(), pcommon.NewResource()
		span.CopyTo(spanCopy)
		res.CopyTo(resCopy)
		before := spanBytes(t, spanCopy, resCopy)

		clock := now
		if nameSel&0x80 != 0 && int(nameSel) >= len(fuzzNames) {
			clock = time.Time{} // no future check
		}
		req, v, reason := r.Recognize(span, res, clock)

		if !bytes.Equal(before, spanBytes(t, span, res)) {
			t.Fatal("Recognize changed the span or its resource")
		}
		switch v {
		case NotInference:
			if reason != "" || req.Family != "" {
				t.Fatalf("NotInference with reason %q, family %q", reason, req.Family)
			}
		case Malformed:
			if !slices.Contains(Reasons(), reason) {
				t.Fatalf("Malformed with unlisted reason %q", reason)
			}
			if req.Family != "" || req.Phases != nil {
				t.Fatalf("Malformed with a request: %+v", req)
			}
		case Recognized:
			checkRequest(t, req)
		default:
			t.Fatalf("verdict %v", v)
		}
	})
}

func checkRequest(t *testing.T, req Request) {
	t.Helper()
	if req.Family == "" {
		t.Fatalf("bad family %q", req.Family)
	}
	if req.Client && (req.Aggregate || req.Family != FamilyGenAI) {
		t.Fatalf("client span of family %q, aggregate %v", req.Family, req.Aggregate)
	}
	if req.End.Before(req.Start) || req.Start.IsZero() {
		t.Fatalf("window %v .. %v", req.Start, req.End)
	}
	prev := req.Start
	named := map[string]bool{}
	for _, p := range req.Phases {
		if named[p.Name] {
			t.Fatalf("phase %q twice in %+v: the processor writes one attribute per phase name", p.Name, req.Phases)
		}
		named[p.Name] = true
		switch p.Name {
		case PhaseQueue, PhasePrefill, PhaseDecode, PhaseInference:
		default:
			t.Fatalf("phase name %q", p.Name)
		}
		if p.Start.Before(prev) || !p.End.After(p.Start) || p.End.After(req.End) {
			t.Fatalf("phases %+v out of order, empty or outside %v .. %v", req.Phases, req.Start, req.End)
		}
		prev = p.End
	}
	if len(req.SlurmJobID) > maxSlurmJobID {
		t.Fatalf("slurm job id %q", req.SlurmJobID)
	}
	if req.InputTokens < -1 || req.OutputTokens < -1 || req.PID < 0 {
		t.Fatalf("tokens %d/%d pid %d", req.InputTokens, req.OutputTokens, req.PID)
	}
	for _, i := range req.GPUIndexes {
		if i < 0 {
			t.Fatalf("index %d", i)
		}
	}
	for _, id := range req.GPUIDs {
		if id == "" {
			t.Fatal("empty GPU ID")
		}
	}
}
