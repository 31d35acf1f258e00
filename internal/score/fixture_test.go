package score

import (
	"encoding/hex"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

const (
	t0 = int64(1_700_000_000) * int64(time.Second)
	ms = int64(time.Millisecond)
)

// fixture builds a truth and the traces exported for it by hand.
type fixture struct {
	truth infersim.Truth
	td    ptrace.Traces
	spans ptrace.SpanSlice
}

func newFixture(engines ...infersim.TruthEngine) *fixture {
	td := ptrace.NewTraces()
	return &fixture{
		truth: infersim.Truth{Header: infersim.TruthHeader{Scenario: "test", GPUModel: "H200", BinWidthNS: 100 * ms, Engines: engines}},
		td:    td,
		spans: td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans(),
	}
}

// engine is an engine of the fixture's header.
func engine(match string, gpus ...int) infersim.TruthEngine {
	return infersim.TruthEngine{Name: "vllm", Family: infersim.FamilyVLLM, Match: match, GPUs: gpus}
}

// bins appends consecutive 100 ms bins on gpu from start, one per label,
// each drawing energy J, idle J of it idle.
func (f *fixture) bins(gpu int, start int64, energy, idle float64, labels ...string) {
	for i, l := range labels {
		f.truth.Bins = append(f.truth.Bins, infersim.TruthBin{GPU: gpu, Start: start + int64(i)*100*ms, Label: l, Energy: energy, Idle: idle})
	}
}

// request appends r as request id: its trace ID is traceID(id), its server
// span's ID spanID(id).
func (f *fixture) request(id byte, r infersim.TruthRequest) {
	tid, sid := traceID(id), spanID(id)
	r.TraceID, r.SpanID = hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:])
	if r.Finish == "" {
		r.Finish = infersim.FinishStop
	}
	f.truth.Requests = append(f.truth.Requests, r)
}

// span appends a span of trace traceID(trace).
func (f *fixture) span(trace, id byte, name string, start, end int64, attrs map[string]any) {
	s := f.spans.AppendEmpty()
	s.SetTraceID(traceID(trace))
	s.SetSpanID(spanID(id))
	s.SetName(name)
	s.SetStartTimestamp(pcommon.Timestamp(start))
	s.SetEndTimestamp(pcommon.Timestamp(end))
	if err := s.Attributes().FromRaw(attrs); err != nil {
		panic(err)
	}
}

func (f *fixture) score(t *testing.T, opts Options) Report {
	t.Helper()
	rep, err := Score(&f.truth, []ptrace.Traces{f.td}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func traceID(id byte) pcommon.TraceID { return pcommon.TraceID{0: 0xab, 15: id} }
func spanID(id byte) pcommon.SpanID   { return pcommon.SpanID{0: 0xcd, 7: id} }
