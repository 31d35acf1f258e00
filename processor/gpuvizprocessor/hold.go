package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// heldBatch is a batch of traces waiting for its spans to settle and for
// the GPU energy covering them.
type heldBatch struct {
	td   ptrace.Traces
	next consumer.Traces
	// info is the client's metadata from the context the batch came in
	// with, handed on with it.
	info  client.Info
	spans []heldSpan
	// size is every span of td, recognised or not, as admitted: what the
	// batch counts against max_pending_spans.
	size int
	// arrived is when the batch came; deadline when it is let go without
	// its GPU data: arrived + max_wait, then once extended to arrived +
	// core.wait (the source's sample spacing), see core.ready.
	arrived  time.Time
	deadline time.Time
	extended bool
	// group is when its settle group opened (see core.release).
	group time.Time
	// enriched: released once and refused by the next consumer; it waits
	// to be offered again until retryUntil.
	enriched   bool
	retryUntil time.Time
}

// heldSpan is one recognised inference span of a held batch.
type heldSpan struct {
	span     ptrace.Span
	siblings ptrace.SpanSlice // where its phase spans go
	req      inference.Request
	tenant   string // metrics.accounting.tenant_attribute's value, "" none
	// The GPUs it matched, decided once they are known.
	set    *gpuSet
	method string
	// pieces are its cost on the GPUs, admitted to their books once
	// matched; nil for a span that takes no share. They live in pieceBuf.
	pieces   []attribution.Piece
	pieceBuf [inference.MaxPhases]attribution.Piece
	life     float64 // its life factor in the books: 1 as admitted, then its release round's (pipeline.reweigh)
	// result is its result from the release's round (in core.results),
	// and phaseStats its phases' statistics (in core.phaseResults) with
	// phase spans on, until annotateBatch writes them; nil for a span left
	// un-enriched.
	result     *spanResult
	phaseStats *phaseStats
	backend    string // its GPUs' backend, with result
}

// keys returns the span's GPUs; none while it has not matched.
func (hs *heldSpan) keys() []timeline.Key {
	if hs.set == nil {
		return nil
	}
	return hs.set.keys
}

// takesShare reports whether the span is a request the GPUs served: not an
// aggregate of others (a batch step) nor a client's view of one.
func (hs *heldSpan) takesShare() bool { return !hs.req.Aggregate && !hs.req.Client }

// hold is the bounded queue of held batches. Its bound counts every span
// of a held batch, not only the inference spans: the batch is held whole,
// and a sender mixing one inference span into batches of others would
// otherwise hold many times the bound.
type hold struct {
	max     int
	n       int // spans held
	batches []*heldBatch
}

// admit queues b; false when its spans would exceed the bound.
func (h *hold) admit(b *heldBatch) bool {
	b.size = b.td.SpanCount()
	if h.n+b.size > h.max {
		return false
	}
	h.batches = append(h.batches, b)
	h.n += b.size
	return true
}

// roomToWait reports whether the hold is at most half full: only then do
// batches wait beyond their settle group and energy, for their GPUs' fits
// to warm up or for long requests' neighbours, so that those waits never
// fill it.
func (h *hold) roomToWait() bool { return h.n <= h.max/2 }

// take removes and returns the batches ready says to release, in arrival
// order.
func (h *hold) take(ready func(*heldBatch) bool) []*heldBatch {
	var out []*heldBatch
	keep := h.batches[:0]
	for _, b := range h.batches {
		if ready(b) {
			out = append(out, b)
			h.n -= b.size
		} else {
			keep = append(keep, b)
		}
	}
	clear(h.batches[len(keep):])
	h.batches = keep
	return out
}

// requeue puts back a batch the next consumer refused; false when there is
// no room (it is then refused for good).
func (h *hold) requeue(b *heldBatch) bool { return h.admit(b) }

// requestSpanName names the child span a request's results go on with
// results_on: child.
const requestSpanName = "gpu.request"

// childSpans gives each recognised span of td (spans, in td's order) a
// child span gpu.request on the same trace, under a copy of its resource
// and the processor's own scope, carrying the request's model
// (gen_ai.request.model), and points the held span at it: results
// and phase spans are written there at release. It returns the children,
// held in place of td, which goes on at once (results_on: child).
func childSpans(td ptrace.Traces, spans []heldSpan) ptrace.Traces {
	out := ptrace.NewTraces()
	next := 0
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len() && next < len(spans); i++ {
		rs := rss.At(i)
		var children ptrace.SpanSlice
		started := false
		sss := rs.ScopeSpans()
		for j := range sss.Len() {
			sl := sss.At(j).Spans()
			for k := 0; k < sl.Len() && next < len(spans); k++ {
				hs := &spans[next]
				if sl.At(k) != hs.span {
					continue
				}
				next++
				if !started {
					crs := out.ResourceSpans().AppendEmpty()
					rs.Resource().CopyTo(crs.Resource())
					css := crs.ScopeSpans().AppendEmpty()
					css.Scope().SetName(metadata.ScopeName)
					children, started = css.Spans(), true
				}
				child := children.AppendEmpty()
				child.SetName(requestSpanName)
				child.SetKind(ptrace.SpanKindInternal)
				child.SetTraceID(hs.span.TraceID())
				child.SetParentSpanID(hs.span.SpanID())
				child.SetSpanID(newSpanID())
				child.SetStartTimestamp(hs.span.StartTimestamp())
				child.SetEndTimestamp(hs.span.EndTimestamp())
				if hs.req.Model != "" {
					// What queries group the results by, where the request says.
					child.Attributes().PutStr(attrModel, hs.req.Model)
				}
				hs.span, hs.siblings = child, children
			}
		}
	}
	return out
}

// dropBareChildren removes from td, a batch childSpans made, the children
// that got no results (their spans were not enriched, counted why), and
// the resources left without spans.
func dropBareChildren(td ptrace.Traces) {
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		spans := rs.ScopeSpans().At(0).Spans()
		spans.RemoveIf(func(s ptrace.Span) bool {
			_, annotated := s.Attributes().Get(attrFamily)
			return s.Name() == requestSpanName && !annotated
		})
		return spans.Len() == 0
	})
}
