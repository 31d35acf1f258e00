package score

import (
	"encoding/hex"
	"fmt"
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// Attributes the processor writes (processor/gpuvizprocessor/enrich.go).
const (
	attrFamily        = "gpuviz.request.family"
	attrEnergy        = "gpuviz.energy"
	attrBottleneck    = "gpuviz.bottleneck"
	attrPrefillEnergy = "gpuviz.phase.prefill.energy"
	attrDecodeEnergy  = "gpuviz.phase.decode.energy"
	attrPrefillLabel  = "gpuviz.phase.prefill.bottleneck"
	attrDecodeLabel   = "gpuviz.phase.decode.bottleneck"
)

// What tells aggregate spans apart: the processor writes no mark of its
// own on them, so these are its recogniser's family and span names
// (processor/gpuvizprocessor/internal/inference).
const (
	familyTGI         = "tgi"
	familyTriton      = "triton"
	tritonComputeSpan = "compute"
)

// Coverage is how many of the truth's requests came out enriched.
type Coverage struct {
	Requests int `json:"requests"`
	// Aborted requests were still running when the episode ended: the load
	// generator sends no span for them.
	Aborted int `json:"aborted"`
	// WithSpan: requests, aborted ones aside, whose trace has an exported
	// span; Enriched: those whose trace has an enriched request span.
	WithSpan int `json:"with_span"`
	Enriched int `json:"enriched"`
	// Share is Enriched over the requests that were not aborted.
	Share float64 `json:"share"`
	// ExtraEnriched counts enriched request spans beyond the first in one
	// trace (a GenAI client span enriched as well as the server span).
	ExtraEnriched int `json:"extra_enriched"`
	// UnknownTraces are exported traces no truth request has.
	UnknownTraces int `json:"unknown_traces"`
}

// request is one truth request and what the export holds of it.
type request struct {
	truth   *infersim.TruthRequest
	aborted bool
	// server is the span whose ID is the truth's span_id, else the enriched
	// request span: the window the naive baseline knows.
	server    ptrace.Span
	hasServer bool
	// span is the enriched request span gpuviz's estimate is read from.
	span     ptrace.Span
	enriched bool
	// traceEnergy is gpuviz.energy summed over every enriched request span
	// of the trace, extras included: what gpuviz attributed to the trace.
	traceEnergy float64
}

// indexSpans groups every exported span by trace.
func indexSpans(traces []ptrace.Traces) map[pcommon.TraceID][]ptrace.Span {
	idx := map[pcommon.TraceID][]ptrace.Span{}
	for _, td := range traces {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					idx[s.TraceID()] = append(idx[s.TraceID()], s)
				}
			}
		}
	}
	return idx
}

// matchRequests finds each truth request's spans, in the truth's order.
func matchRequests(truth *infersim.Truth, idx map[pcommon.TraceID][]ptrace.Span) ([]request, Coverage, error) {
	reqs := make([]request, len(truth.Requests))
	cov := Coverage{Requests: len(truth.Requests)}
	seen := make(map[pcommon.TraceID]bool, len(truth.Requests))
	for i := range truth.Requests {
		tr := &truth.Requests[i]
		tid, sid, err := parseIDs(tr)
		if err != nil {
			return nil, Coverage{}, err
		}
		if seen[tid] {
			return nil, Coverage{}, fmt.Errorf("truth request %s: trace ID used by another request", tr.TraceID)
		}
		seen[tid] = true
		r := request{truth: tr, aborted: tr.Finish == infersim.FinishAbort}
		if r.aborted {
			cov.Aborted++
		} else {
			cov.ExtraEnriched += r.attach(idx[tid], sid)
			if len(idx[tid]) > 0 {
				cov.WithSpan++
			}
			if r.enriched {
				cov.Enriched++
			}
		}
		reqs[i] = r
	}
	for tid := range idx {
		if !seen[tid] {
			cov.UnknownTraces++
		}
	}
	if n := cov.Requests - cov.Aborted; n > 0 {
		cov.Share = float64(cov.Enriched) / float64(n)
	}
	return reqs, cov, nil
}

// attach picks the request's server span and enriched request span from
// its trace's spans and returns the number of extra enriched request spans.
func (r *request) attach(spans []ptrace.Span, serverID pcommon.SpanID) (extras int) {
	n := 0
	for _, s := range spans {
		isServer := s.SpanID() == serverID
		if isServer {
			r.server, r.hasServer = s, true
		}
		e := number(s.Attributes(), attrEnergy)
		if math.IsNaN(e) || !isRequestSpan(s) {
			continue
		}
		n++
		r.traceEnergy += e
		if !r.enriched || isServer {
			r.span, r.enriched = s, true
		}
	}
	if !r.hasServer && r.enriched {
		r.server, r.hasServer = r.span, true
	}
	return max(n-1, 0)
}

// isRequestSpan tells a span the processor enriched as a request from its
// phase spans (no family) and from aggregate spans, which report the energy
// of a whole batch step or compute span and would count it twice.
func isRequestSpan(s ptrace.Span) bool {
	fam, ok := s.Attributes().Get(attrFamily)
	if !ok {
		return false
	}
	switch fam.Str() {
	case familyTGI:
		switch s.Name() {
		case "prefill", "decode", "infer":
			return false
		}
	case familyTriton:
		return s.Name() != tritonComputeSpan
	}
	return true
}

// number reads a numeric attribute; NaN when there is none.
func number(m pcommon.Map, key string) float64 {
	v, ok := m.Get(key)
	switch {
	case !ok:
		return math.NaN()
	case v.Type() == pcommon.ValueTypeDouble:
		return v.Double()
	case v.Type() == pcommon.ValueTypeInt:
		return float64(v.Int())
	}
	return math.NaN()
}

// label reads a string attribute.
func label(m pcommon.Map, key string) (string, bool) {
	v, ok := m.Get(key)
	if !ok || v.Type() != pcommon.ValueTypeStr {
		return "", false
	}
	return v.Str(), true
}

func parseIDs(tr *infersim.TruthRequest) (pcommon.TraceID, pcommon.SpanID, error) {
	var tid pcommon.TraceID
	var sid pcommon.SpanID
	if err := decodeID(tid[:], tr.TraceID); err != nil {
		return tid, sid, fmt.Errorf("truth request trace_id %q: %w", tr.TraceID, err)
	}
	if err := decodeID(sid[:], tr.SpanID); err != nil {
		return tid, sid, fmt.Errorf("truth request %s: span_id %q: %w", tr.TraceID, tr.SpanID, err)
	}
	return tid, sid, nil
}

func decodeID(dst []byte, s string) error {
	if hex.DecodedLen(len(s)) != len(dst) {
		return fmt.Errorf("want %d hex digits", 2*len(dst))
	}
	_, err := hex.Decode(dst, []byte(s))
	return err
}
