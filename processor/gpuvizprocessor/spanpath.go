package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/xpdata"
	"go.opentelemetry.io/collector/pdata/xpdata/pref"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// spanPath is the span side of a core: spans → recognise → hold → match →
// pipeline → annotate → forward, and the servers' running-request counts
// into the same books. The core drives it: consume from the traces
// pipeline, release and finalize from the release loop.
type spanPath struct {
	cfg        *Config
	logger     *zap.Logger
	tel        telemetry
	store      *timeline.Store
	recognizer *inference.Recognizer
	ingest     *ingest
	emitter    *emitter

	// releasing admits one release at a time, for its whole length: the
	// batches a release took are out of the hold while it hands them on,
	// and a pipeline's Shutdown must not return (its next consumer then
	// shuts down) while the loop still has some of that pipeline's to hand.
	releasing sync.Mutex
	// results holds a release's span results until its batches leave, and
	// phaseResults their phases' statistics with phase spans on (guarded by
	// releasing); reused while spans are held, as at 20,000 spans/s a
	// release's results are megabytes. They keep no pdata.
	results      []spanResult
	phaseResults []phaseStats
	// mu guards the held spans, the matcher's use, the pipeline's books,
	// prefills and view; ingest.mu is taken under it, never the other way.
	mu       sync.Mutex
	hold     hold
	matcher  matcher
	pipeline *pipeline
	// settleOpen is when the current settle group opened: spans arriving
	// within settle_window of it join it and are released together.
	settleOpen time.Time
	// settledAtTick is each GPU's Settled time at the last tick
	// (finalize): how far a settle group's opening finalizes.
	settledAtTick map[timeline.Key]time.Time
	// prefills is a batch's matched prefills on their way to ingest
	// (ingest.prefilled), reused.
	prefills []prefill
	// view is the live view's sink; nil without a gpuviz_view extension.
	view *viewSink
}

func newSpanPath(cfg *Config, logger *zap.Logger, tel telemetry, store *timeline.Store, recognizer *inference.Recognizer, in *ingest, em *emitter) *spanPath {
	p := newPipeline(store, cfg)
	return &spanPath{
		cfg: cfg, logger: logger, tel: tel, store: store, recognizer: recognizer, ingest: in, emitter: em,
		hold:     hold{cfg: cfg, store: store, ingest: in, pipeline: p, logger: logger},
		matcher:  matcher{store: store, order: cfg.Match.Order},
		pipeline: p, settledAtTick: map[timeline.Key]time.Time{},
	}
}

// setView installs v as the live view's sink (nil: none) here, in the
// ingest and in the pipeline, and returns the one it replaces.
func (s *spanPath) setView(v *viewSink) *viewSink {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ingest.mu.Lock()
	defer s.ingest.mu.Unlock()
	old := s.view
	s.view, s.ingest.view = v, v
	s.pipeline.onFreeze, s.pipeline.onFinal = nil, nil
	if v != nil {
		s.pipeline.onFreeze, s.pipeline.onFinal = v.label, v.final
	}
	return old
}

// pending is how many spans the hold holds.
func (s *spanPath) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hold.n
}

// finalize makes final the bins the books may close and, with expire, has
// the timeline, ingest, the books and the live view's sink forget the GPUs
// gone quiet by now, all under the lock, so that no round sees the
// timeline without a GPU whose books it still has.
func (s *spanPath) finalize(now time.Time, expire bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := s.store.GPUs("")
	if !s.hold.groupOpen(now) {
		// While a settle group is open its spans are admitted as they
		// come: a bin turning final between two of them would see one
		// and not the other, whichever came first. consume finalizes as a
		// group opens instead, as far as this tick could.
		s.pipeline.finalize(keys, nil)
	}
	clear(s.settledAtTick)
	for _, k := range keys {
		if t, ok := s.store.Settled(k); ok {
			s.settledAtTick[k] = t
		}
	}
	if expire {
		s.store.Expire(now)
		s.ingest.forget()
		s.pipeline.forget()
		if s.view != nil {
			s.view.forget(func(k timeline.Key) bool {
				_, ok := s.store.Newest(k)
				return ok
			})
		}
	}
}

// books returns every GPU's books for the emitter.
func (s *spanPath) books() []gpuBooks {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]gpuBooks, 0, len(s.pipeline.books))
	for k, b := range s.pipeline.books {
		out = append(out, gpuBooks{key: k, backend: s.ingest.backend(k), totals: b.Totals(), current: b.Label(b.FinalTo() - 1)})
	}
	return out
}

// matchMemo remembers, within one batch, the GPUs of spans that name none
// themselves: the spans of one resource match alike.
type matchMemo struct {
	host                          string
	pid                           int64
	podUID, podNamespace, podName string
	slurmJob                      string
}

type matched struct {
	set    *gpuSet
	method string
}

// consume recognises td's inference spans and admits td to the hold
// (results_on: child, its children in its place, td handed on at once),
// matching them to their GPUs; it returns the batch admitted, nil where
// td went on (no inference span, no GPU data yet, or the hold full). What
// passes un-enriched is counted once taken: a refusal goes back to the
// sender, whose retry is counted then.
func (s *spanPath) consume(ctx context.Context, td ptrace.Traces, next consumer.Traces, now time.Time) (*heldBatch, error) {
	var spans []heldSpan
	var malformed []string // reasons, one a malformed span
	rss := td.ResourceSpans()
	total, seen := td.SpanCount(), 0
	for i := range rss.Len() {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := range sss.Len() {
			sl := sss.At(j).Spans()
			for k := range sl.Len() {
				span := sl.At(k)
				req, verdict, reason := s.recognizer.Recognize(span, rs.Resource(), now)
				seen++
				switch verdict {
				case inference.Recognized:
					if spans == nil { // room for every span left: clipped below
						spans = make([]heldSpan, 0, total-seen+1)
					}
					tenant := tenantOf(s.cfg.Metrics.Accounting.TenantAttribute, span.Attributes(), rs.Resource().Attributes())
					spans = append(spans, heldSpan{span: span, siblings: sl, req: req, tenant: tenant})
				case inference.Malformed:
					malformed = append(malformed, reason)
				}
			}
		}
	}
	if len(spans) == 0 {
		return nil, s.passOn(ctx, td, next, malformed, "", 0)
	}
	if cap(spans) > len(spans)+len(spans)/4 { // held a while: keep no slack
		spans = slices.Clone(spans)
	}
	if s.store.Len() == 0 {
		// No GPU metrics have come through (yet): nothing to wait for.
		return nil, s.passOn(ctx, td, next, malformed, "no_gpu", len(spans))
	}
	handedOn := s.cfg.ResultsOn == ResultsOnChild
	if handedOn {
		children := childSpans(td, spans)
		if err := next.ConsumeTraces(ctx, td); err != nil {
			return nil, err // nothing admitted
		}
		s.tel.malformed(ctx, malformed)
		malformed = nil
		td = children
	}
	b := &heldBatch{td: td, next: next, info: client.FromContext(ctx), spans: spans, arrived: now, deadline: now.Add(s.cfg.MaxWait)}
	s.mu.Lock()
	if !s.hold.admit(b) {
		s.mu.Unlock()
		if handedOn {
			s.tel.unenriched(ctx, "overflow", len(spans))
			return nil, nil // the children carry nothing yet
		}
		return nil, s.passOn(ctx, td, next, malformed, "overflow", len(spans))
	}
	// The batch outlives this call: under pdata.useProtoPooling the
	// service returns its memory to the pool when the call returns unless
	// it is referenced (as the batch processor does); forward lets go.
	pref.RefTraces(td)
	if s.settleOpen.IsZero() || now.Sub(s.settleOpen) >= s.cfg.Attribution.SettleWindow {
		// A new settle group: the books move on as far as the last tick
		// could take them, before any of its spans is admitted, and not
		// again until it closes (finalize).
		s.pipeline.finalize(s.store.GPUs(""), s.settledAtTick)
		s.settleOpen = now
	}
	b.group, b.settles = s.settleOpen, s.settleOpen.Add(s.cfg.Attribution.SettleWindow)
	memo := map[matchMemo]matched{}
	s.prefills = s.prefills[:0]
	for i := range b.spans {
		hs := &b.spans[i]
		s.matchSpan(hs, memo, b.settles)
		if s.cfg.History.AlignGPM {
			s.prefills = appendPrefill(s.prefills, hs)
		}
	}
	s.ingest.prefilled(s.prefills)
	s.mu.Unlock()
	s.tel.malformed(ctx, malformed)
	return b, nil
}

// passOn hands td on un-enriched and, once taken, counts its malformed
// spans and the n passed for reason ("" none).
func (s *spanPath) passOn(ctx context.Context, td ptrace.Traces, next consumer.Traces, malformed []string, reason string, n int) error {
	if err := next.ConsumeTraces(ctx, td); err != nil {
		return err
	}
	s.tel.malformed(ctx, malformed)
	if n > 0 {
		s.tel.unenriched(ctx, reason, n)
	}
	return nil
}

// appendPrefill appends a matched span's prefill, where it has one with a
// prompt, for its GPUs' GPM lag.
func appendPrefill(ps []prefill, hs *heldSpan) []prefill {
	if hs.set == nil || !hs.takesShare() || hs.req.InputTokens <= 0 {
		return ps
	}
	for _, ph := range hs.req.Phases {
		if ph.Name == inference.PhasePrefill {
			return append(ps, prefill{keys: hs.set.keys, start: ph.Start.UnixNano(), end: ph.End.UnixNano(), tokens: float64(hs.req.InputTokens)})
		}
	}
	return ps
}

// matchSpan decides a span's GPUs, once they are known, and admits its
// cost to their books as of at (its settle group's close); the caller
// holds s.mu. memo may be nil.
func (s *spanPath) matchSpan(hs *heldSpan, memo map[matchMemo]matched, at time.Time) {
	if hs.set != nil {
		return
	}
	hinted := len(hs.req.GPUIDs) > 0 || len(hs.req.GPUIndexes) > 0
	mk := matchMemo{hs.req.Host, hs.req.PID, hs.req.PodUID, hs.req.PodNamespace, hs.req.PodName, hs.req.SlurmJobID}
	m, ok := memo[mk]
	if !ok || hinted {
		keys, method := s.matcher.match(hs.req)
		if len(keys) == 0 {
			return
		}
		m = matched{set: s.pipeline.set(keys), method: method}
		if !hinted && memo != nil {
			memo[mk] = m
		}
	}
	hs.set, hs.method = m.set, m.method
	s.pipeline.admit(hs, at)
}

// release enriches and forwards the held batches that are ready, or that
// force says to let go, and offers again those the next consumer refused;
// it returns the refusals of the batches forced out. The batches of one
// settle group go together, once all are ready: their spans share GPU
// energy as if they had arrived at once.
func (s *spanPath) release(now time.Time, force func(*heldBatch) bool) error {
	s.releasing.Lock()
	defer s.releasing.Unlock()
	s.mu.Lock()
	waiting := map[time.Time]bool{} // settle groups with a batch not ready
	settled := map[*gpuSet]time.Time{}
	var warming map[*gpuSet]bool
	if s.cfg.Attribution.WarmupWait > 0 && s.hold.roomToWait() && !s.pipeline.ledger.Learned() {
		// Held for the fits only while the hold is at most half full.
		warming = map[*gpuSet]bool{}
	}
	match := func(hs *heldSpan, at time.Time) { s.matchSpan(hs, nil, at) }
	for _, b := range s.hold.batches {
		if !b.enriched && !waiting[b.group] && !s.hold.ready(b, now, settled, warming, match) {
			waiting[b.group] = true
		}
	}
	ready := s.hold.take(func(b *heldBatch) bool { return b.enriched || force(b) || !waiting[b.group] })
	s.enrich(ready, now)
	if s.hold.n == 0 {
		// Nothing left to release: let the results buffers go once these
		// batches leave, so that an idle collector returns them.
		s.results, s.phaseResults = nil, nil
	}
	v := s.view
	s.mu.Unlock()
	var errs []error
	for i, b := range ready {
		if !b.enriched {
			s.annotateBatch(b, v, now)
			if s.cfg.ResultsOn == ResultsOnChild {
				dropBareChildren(b.td)
			}
			b.enriched = true
			s.tel.held(b, now)
		}
		if b.td.SpanCount() == 0 {
			pref.UnrefTraces(b.td) // children only, none of them enriched
		} else {
			final := force(b)
			if err := s.forward(now, b, final); err != nil && final {
				errs = append(errs, err)
			}
		}
		// Handed on (or back in the hold): its spans, now grown by what
		// annotateBatch wrote, must not live on through this release's
		// slice once the next consumer is done with them.
		ready[i] = nil
	}
	return errors.Join(errs...)
}

// enrich runs the pipeline over the spans of the batches released at now
// (those not enriched before) and keeps each span's result on it
// (heldSpan.result, in s.results) for annotateBatch; the caller holds
// s.mu. The results are computed together, as the settle group's
// fairness needs, but written batch by batch just before each leaves, so
// that one batch's phase spans and attributes exist at a time rather than
// a whole release's: at 20,000 vLLM spans/s a release is tens of
// thousands of spans, and what annotate adds to each (three phase spans,
// some 30 attributes) is about 3 KB against a spanResult's 152 B (and,
// with phase spans, 352 B of phaseStats).
func (s *spanPath) enrich(batches []*heldBatch, now time.Time) {
	var spans []*heldSpan
	for _, b := range batches {
		if b.enriched {
			continue
		}
		for i := range b.spans {
			s.matchSpan(&b.spans[i], nil, b.settles)
			spans = append(spans, &b.spans[i])
		}
	}
	if len(spans) == 0 {
		return
	}
	// Sized to the release, reused; a much larger one left by a burst is
	// let go.
	s.results = sized(s.results, len(spans))
	results := s.results[:len(spans)]
	var phaseResults []phaseStats
	if s.cfg.PhaseSpans {
		s.phaseResults = sized(s.phaseResults, len(spans))
		phaseResults = s.phaseResults[:len(spans)]
	}
	s.pipeline.round(spans, now, results, phaseResults)
	ctx := context.Background()
	backends := map[*gpuSet]string{}
	enriched, phases := 0, 0
	for i, hs := range spans {
		switch {
		case hs.set == nil:
			s.tel.unenriched(ctx, "no_gpu", 1)
			continue
		case !results[i].ok:
			s.tel.unenriched(ctx, "no_samples", 1)
			continue
		}
		backend, ok := backends[hs.set]
		if !ok {
			backend = s.backendOf(hs.set.keys)
			backends[hs.set] = backend
		}
		hs.result, hs.backend = &results[i], backend
		if phaseResults != nil {
			hs.phaseStats = &phaseResults[i]
		}
		enriched++
		if s.cfg.PhaseSpans {
			phases += len(hs.req.Phases)
		}
	}
	s.tel.enriched(ctx, enriched, phases)
}

// sized returns buf if it holds n, else a new one of n: a buffer sized to
// the release and reused, a much larger one left by a burst let go.
func sized[T any](buf []T, n int) []T {
	if cap(buf) < n || cap(buf) > 2*n+1024 {
		return make([]T, n)
	}
	return buf
}

// annotateBatch writes the results enrich kept on b's spans and hands the
// requests to the emitter and the view (v, nil without one). The batch is
// out of the hold: only this release touches it, so s.mu is not held.
func (s *spanPath) annotateBatch(b *heldBatch, v *viewSink, now time.Time) {
	var mb xpdata.MapBuilder
	for i := range b.spans {
		hs := &b.spans[i]
		r := hs.result
		if r == nil {
			continue
		}
		ps := hs.phaseStats
		hs.result, hs.phaseStats = nil, nil
		rec, ok := annotate(hs, r, ps, hs.backend, &mb)
		if !ok {
			continue
		}
		if s.cfg.Metrics.Enabled {
			s.emitter.record(rec, now)
		}
		if v != nil {
			v.request(&rec)
		}
	}
}

// backendOf names the backends of a set of GPUs' data ("simulated"; two,
// comma-separated, if the set mixes them).
func (s *spanPath) backendOf(keys []timeline.Key) string {
	var names string
	for _, k := range keys {
		names = unionBackends(names, s.ingest.backend(k))
	}
	return names
}

// forward hands an enriched batch to the next consumer with the client's
// metadata. A retryable refusal puts it back in the hold, to be offered
// again each tick until release_retry has passed; a permanent one, a full
// hold, or final (shutdown) counts it refused and is returned.
func (s *spanPath) forward(now time.Time, b *heldBatch, final bool) error {
	ctx := client.NewContext(context.Background(), b.info)
	err := b.next.ConsumeTraces(ctx, b.td)
	if err == nil {
		pref.UnrefTraces(b.td)
		return nil
	}
	if b.retryUntil.IsZero() {
		b.retryUntil = now.Add(s.cfg.ReleaseRetry)
	}
	if !final && !consumererror.IsPermanent(err) && now.Before(b.retryUntil) {
		s.mu.Lock()
		ok := s.hold.put(b) // no room: refused for good
		s.mu.Unlock()
		if ok {
			return nil
		}
	}
	n := b.td.SpanCount()
	s.logger.Warn("the next consumer refused enriched traces", zap.Error(err), zap.Int("spans", n))
	s.tel.refused(n)
	if s.cfg.Metrics.Enabled {
		refused := make(map[pcommon.SpanID]bool, len(b.spans))
		for i := range b.spans {
			refused[b.spans[i].span.SpanID()] = true
		}
		s.emitter.dropExemplars(refused)
	}
	pref.UnrefTraces(b.td)
	return err
}

// matchEngines matches each count's server to its GPUs, as a span of its
// resource would be, hands the counts to the pipeline, and counts what
// became of them; a stale server is taken out of its GPU set's sum. A
// count (or staleness marker) stamped after latest is not taken, as a GPU
// point is not: it would keep every later count of its server out as older
// until the clocks caught up.
func (s *spanPath) matchEngines(ctx context.Context, counts []engineCount, latest time.Time) {
	outcomes := map[string]int64{}
	s.mu.Lock()
	for _, ec := range counts {
		if ec.ts > latest.UnixNano() {
			if !ec.stale {
				outcomes[countFuture]++
			}
			continue
		}
		req := s.recognizer.Placement(ec.resource, time.Unix(0, ec.ts))
		keys, _ := s.matcher.match(req)
		if len(keys) == 0 {
			if !ec.stale {
				outcomes[countUnmatched]++
			}
			continue
		}
		if ec.stale { // no count: the server's last leaves its set's sum
			s.pipeline.engines.stale(s.pipeline.set(keys).name, ec.source, ec.ts)
			continue
		}
		outcomes[s.pipeline.running(s.pipeline.set(keys), ec.source, ec.ts, ec.n)]++
	}
	s.mu.Unlock()
	s.tel.engineCounts(ctx, outcomes)
}
