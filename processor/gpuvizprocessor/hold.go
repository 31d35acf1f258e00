package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

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
	// hold.wait (the source's sample spacing), see hold.ready.
	arrived  time.Time
	deadline time.Time
	extended bool
	// passed counts the leading spans found past their wait by an earlier
	// tick (matched, past their running hold, their GPUs' energy in): ready
	// goes on from the first still waiting, so that a batch's spans are
	// looked at about once, not once a tick for as long as it is held.
	passed int
	// group is when its settle group opened (see spanPath.release), and
	// settles when it closes (group + settle_window): its spans' costs are
	// admitted to the books as of then, whatever order and batches they
	// came in, so that the group's spans share as if they came together.
	group, settles time.Time
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
	// result is its result from the release's round (in spanPath.results),
	// and phaseStats its phases' statistics (in spanPath.phaseResults) with
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

// hold is the bounded queue of held batches, and when each may go. Its
// bound counts every span of a held batch, not only the inference spans:
// the batch is held whole, and a sender mixing one inference span into
// batches of others would otherwise hold many times the bound.
type hold struct {
	n       int // spans held, at most cfg.MaxPendingSpans
	batches []*heldBatch

	// What admit and ready read: the knobs, whether the GPUs' data is in,
	// and whether their books still learn or wait for long requests.
	cfg      *Config
	store    *timeline.Store
	ingest   *ingest
	pipeline *pipeline
	logger   *zap.Logger
	// warmingSaid: the log has said once that spans wait for warm-up.
	warmingSaid bool
}

// admit queues b, counted at the spans it came with; false when they would
// exceed the bound.
func (h *hold) admit(b *heldBatch) bool {
	b.size = b.td.SpanCount()
	return h.put(b)
}

// put queues b at its size as admitted, also when the next consumer
// refused it and it grew by its phase spans meanwhile (what annotate adds
// is within the bound's bytes a span, Config.MaxPendingSpans); false when
// there is no room.
func (h *hold) put(b *heldBatch) bool {
	if h.n+b.size > h.cfg.MaxPendingSpans {
		return false
	}
	h.batches = append(h.batches, b)
	h.n += b.size
	return true
}

// groupOpen reports whether the newest settle group holds a batch, not
// released yet, whose group has not closed by now: more of its spans may
// come. Batches come in arrival order, and those offered again after a
// refusal are released already.
func (h *hold) groupOpen(now time.Time) bool {
	for i := len(h.batches) - 1; i >= 0; i-- {
		if b := h.batches[i]; !b.enriched {
			return now.Before(b.settles)
		}
	}
	return false
}

// roomToWait reports whether the hold is at most half full: only then do
// batches wait beyond their settle group and energy, for their GPUs' fits
// to warm up or for long requests' neighbours, so that those waits never
// fill it.
func (h *hold) roomToWait() bool { return h.n <= h.cfg.MaxPendingSpans/2 }

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

// ready reports whether every span of the batch has matched (match tries
// those not matched yet), its settle group has closed, its GPUs' energy is
// in up to its end, their fits are not warming up and, where their
// forecasts fell short, its spans have waited their runningHold; a span
// once past its wait is not waited for again (heldBatch.passed). The
// caller holds the span path's lock. settled caches the sets' settled
// times for one release, warming the sets' warm-up (nil: no group is
// warming, or the hold is too full to wait for one).
func (h *hold) ready(b *heldBatch, now time.Time, settled map[*gpuSet]time.Time, warming map[*gpuSet]bool, match func(*heldSpan, time.Time)) bool {
	if now.Before(b.group.Add(h.cfg.Attribution.SettleWindow)) && now.Before(b.deadline) {
		return false
	}
	if warming != nil && now.Before(b.arrived.Add(h.cfg.Attribution.WarmupWait)) && h.warms(b, now, warming) {
		return false
	}
	if !now.Before(b.deadline) {
		if b.extended {
			return true
		}
		b.extended = true
		if b.deadline = b.arrived.Add(h.wait(b)); !now.Before(b.deadline) {
			return true
		}
	}
	if now.Before(b.settles) {
		return false
	}
	holdLong := h.roomToWait()
	for ; b.passed < len(b.spans); b.passed++ {
		hs := &b.spans[b.passed]
		match(hs, b.settles)
		if hs.set == nil {
			return false
		}
		if holdLong && h.pipeline.holdsLong(hs.set) {
			if until := hs.req.End.Add(runningHold(hs.req)); now.Before(until) {
				// Past max_wait if need be, up to the longest hold.
				if last := b.arrived.Add(h.cfg.maxHold()); last.Before(until) {
					until = last
				}
				if b.deadline.Before(until) {
					b.deadline = until
				}
				return false
			}
		}
		t, ok := settled[hs.set]
		if !ok {
			// A GPU the receiver reports failed is not waited for: it
			// sends nothing until it answers again.
			keys := h.ingest.answering(hs.set.keys)
			t = noneToWaitFor
			if len(keys) > 0 {
				t, _ = h.store.SettledAll(keys) // zero when a GPU has no energy yet
			}
			// A GPU the receiver and dcgm-exporter both feed has arrived
			// only once the slower source's sample after the span has.
			if d, _, ok := h.ingest.dcgmLag(keys); ok && d.Before(t) {
				t = d
			}
			settled[hs.set] = t
		}
		// Energy to the end of the bin the span ends in: the books
		// freeze a bin once its energy is in.
		w := int64(h.cfg.Attribution.Resolution)
		if t.Before(time.Unix(0, (floorDiv(hs.req.End.UnixNano()-1, w)+1)*w)) {
			return false
		}
	}
	return true
}

// runningHold is how long after it ended a span of req waits where its
// GPUs' forecasts of the weight still to come fall short or its GPUs wait
// for their host (pipeline.holdsLong): its running time (prefill and
// decode, not its queue). The requests it shared bins with, which run about
// as long, have then mostly reported. It is held at most the longest hold
// (Config.maxHold) after it arrived, and only while the hold is at most
// half full (docs/attribution.md, "Long requests").
func runningHold(req inference.Request) time.Duration {
	start := req.Start
	for _, ph := range req.Phases {
		if ph.Name == inference.PhaseQueue {
			start = ph.End
		}
	}
	return req.End.Sub(start)
}

// warms reports whether a span of b matched GPUs whose fits are warming
// up (pipeline.warming): until the books have learned how a bin's
// activity predicts its final weight, the split falls back to the arrival
// curve, which errs most in a collector's first minute (docs/attribution.md,
// "Warming up"). ready holds such a batch for at most
// attribution.warmup_wait after it arrived, and after its GPUs first had
// to wait. memo caches the sets' answers for one release; the caller
// holds the span path's lock.
func (h *hold) warms(b *heldBatch, now time.Time, memo map[*gpuSet]bool) bool {
	var last *gpuSet
	for i := range b.spans {
		set := b.spans[i].set
		if set == nil || set == last {
			continue
		}
		last = set
		w, ok := memo[set]
		if !ok {
			w = h.pipeline.warming(set, now)
			memo[set] = w
		}
		if w {
			if !h.warmingSaid {
				h.warmingSaid = true
				h.logger.Info("holding inference spans while their GPUs' energy books learn to read GPU activity, as after every start (attribution.warmup_wait)",
					zap.Duration("at_most", h.cfg.Attribution.WarmupWait))
			}
			return true
		}
	}
	return false
}

// noneToWaitFor settles a span all of whose GPUs are reported failed.
var noneToWaitFor = time.Unix(1<<40, 0)

// wait is the longest a batch is held for its GPUs' data: max_wait, or,
// where a matched GPU's source sends less often, two of its sample spacings
// (timeline.Store.Spacing): a dcgm-exporter scraped every 30 s sends the
// sample after a span's end up to 30 s after it, and a scrape may be late.
// It is at most two history.max_span (beyond max_span a sample describes
// nothing anyway); a GPU whose spacing is not known yet (a source's first
// point) does not extend it, nor do spans not matched yet. The caller
// holds the span path's lock.
func (h *hold) wait(b *heldBatch) time.Duration {
	w := h.cfg.MaxWait
	seen := map[*gpuSet]bool{}
	for i := range b.spans {
		set := b.spans[i].set
		if set == nil || seen[set] {
			continue
		}
		seen[set] = true
		if spacing, ok := h.store.Spacing(set.keys); ok {
			w = max(w, 2*spacing)
		}
		if _, spacing, ok := h.ingest.dcgmLag(set.keys); ok {
			w = max(w, 2*spacing)
		}
	}
	return min(w, h.cfg.maxHold())
}

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
