package adversarial

import (
	"encoding/binary"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// RefusedRequests returns OTLP/protobuf export requests (the body of a POST
// to /v1/traces) a collector must refuse whole (OTLP/HTTP 400), staying up:
// each holds one well-formed span and one that pdata cannot decode, a
// trace, span or parent ID of the wrong length (encoded by hand: pdata
// cannot hold one) or an attribute nested deeper than pdata's recursion
// limit. Keyed by what is wrong.
func RefusedRequests(now time.Time) map[string][]byte {
	c := clock{now: now.UnixNano(), end: now.UnixNano() - 2*sec}
	good := ptrace.NewTraces()
	rs := good.ResourceSpans().AppendEmpty()
	resPlain.fill(rs.Resource().Attributes())
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	vllm(spans.AppendEmpty(), c)
	var m ptrace.ProtoMarshaler
	prefix, err := m.MarshalTraces(good)
	if err != nil {
		panic(err) // a span the generator made always encodes
	}
	ids := map[string]struct{ trace, span, parent int }{
		"trace_id_17_bytes":       {17, 8, 8},
		"trace_id_15_bytes":       {15, 8, 8},
		"trace_id_as_hex_text":    {32, 8, 8},
		"span_id_9_bytes":         {16, 9, 8},
		"span_id_7_bytes":         {16, 7, 8},
		"parent_span_id_9_bytes":  {16, 8, 9},
		"parent_span_id_16_bytes": {16, 8, 16},
		"trace_id_64_kib":         {64 << 10, 8, 8},
	}
	out := make(map[string][]byte, len(ids)+1)
	for name, n := range ids {
		// Span: trace_id 1, span_id 2, parent_span_id 4, name 5, start 7, end 8.
		var span []byte
		span = lenField(span, 1, filled(n.trace))
		span = lenField(span, 2, filled(n.span))
		span = lenField(span, 4, filled(n.parent))
		span = lenField(span, 5, []byte("llm_request"))
		span = fixed64Field(span, 7, uint64(c.end-2*sec))
		span = fixed64Field(span, 8, uint64(c.end))
		scopeSpans := lenField(nil, 2, span)                                   // ScopeSpans.spans
		resourceSpans := lenField(nil, 2, scopeSpans)                          // ResourceSpans.scope_spans
		out[name] = lenField(append([]byte(nil), prefix...), 1, resourceSpans) // ExportTraceServiceRequest.resource_spans
	}
	deepest := spans.AppendEmpty()
	vllm(deepest, c)
	deep(deepest.Attributes().PutEmptyMap("x.deep"), 2*DeepestMaps+1)
	if out["attribute_nested_33_maps"], err = m.MarshalTraces(good); err != nil {
		panic(err)
	}
	return out
}

func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

// lenField appends a length-delimited protobuf field.
func lenField(b []byte, field int, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func fixed64Field(b []byte, field int, v uint64) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|1)
	return binary.LittleEndian.AppendUint64(b, v)
}
