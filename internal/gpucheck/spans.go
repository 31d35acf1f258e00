package gpucheck

import (
	"encoding/json"
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Span is one exported span, flattened: what the join analysis needs is the
// span's identity, its window and its attributes (the workload's own and
// those the gpuviz processor added). Attribute values keep their OTLP type:
// strings, booleans, int64 and float64 numbers, slices and maps as
// pcommon's AsRaw gives them. Numbers read back from a saved capture are
// float64 (JSON), which Float and Int accept alike.
type Span struct {
	Name          string         `json:"name"`
	TraceID       string         `json:"trace_id"`
	SpanID        string         `json:"span_id"`
	ParentSpanID  string         `json:"parent_span_id,omitempty"`
	StartUnixNano int64          `json:"start_unix_nano"`
	EndUnixNano   int64          `json:"end_unix_nano"`
	Attrs         map[string]any `json:"attributes"`
}

// Str is the string attribute key, or "" when absent or not a string.
func (s Span) Str(key string) string {
	v, _ := s.Attrs[key].(string)
	return v
}

// Float is the numeric attribute key; ok is false when it is absent, not a
// number, or NaN.
func (s Span) Float(key string) (float64, bool) {
	var f float64
	switch v := s.Attrs[key].(type) {
	case float64:
		f = v
	case int64:
		f = float64(v)
	case int:
		f = float64(v)
	case json.Number:
		var err error
		if f, err = v.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	return f, !math.IsNaN(f)
}

// FromTraces flattens every span of td. Resource and scope attributes are
// left out: the workload puts what the processor matches on (hw.id) on the
// span itself, and the processor writes its attributes there too.
func FromTraces(td ptrace.Traces) []Span {
	var spans []Span
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j).Spans()
			for k := 0; k < ss.Len(); k++ {
				sp := ss.At(k)
				attrs := make(map[string]any, sp.Attributes().Len())
				for key, val := range sp.Attributes().All() {
					attrs[key] = val.AsRaw()
				}
				out := Span{
					Name:          sp.Name(),
					TraceID:       traceIDString(sp.TraceID()),
					SpanID:        spanIDString(sp.SpanID()),
					StartUnixNano: int64(sp.StartTimestamp()),
					EndUnixNano:   int64(sp.EndTimestamp()),
					Attrs:         attrs,
				}
				if !sp.ParentSpanID().IsEmpty() {
					out.ParentSpanID = spanIDString(sp.ParentSpanID())
				}
				spans = append(spans, out)
			}
		}
	}
	return spans
}

// The IDs' String methods give lowercase hex, the spelling OTLP/JSON and
// the workload use.
func traceIDString(id pcommon.TraceID) string { return id.String() }
func spanIDString(id pcommon.SpanID) string   { return id.String() }

// AddTraces appends the spans of td.
func (c *Capture) AddTraces(td ptrace.Traces) {
	spans := FromTraces(td)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, spans...)
}

// Spans returns a copy of every span captured so far.
func (c *Capture) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}
