package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/xpdata"
	"go.opentelemetry.io/collector/pdata/xpdata/pref"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// releaseTick is how often held spans are checked for release and the
// books finalised: a fraction of any sensible collection interval, and
// cheap when nothing is held.
const releaseTick = 200 * time.Millisecond

// core wires what the traces and the metrics side of one gpuviz processor
// ID share, and runs their lifecycle. Data flows one way: metrics → ingest
// → timeline; spans → recognise → hold → match → pipeline → annotate →
// emitter.
type core struct {
	cfg        *Config
	logger     *zap.Logger
	tel        *metadata.TelemetryBuilder
	store      *timeline.Store
	recognizer *inference.Recognizer
	ingest     *ingest
	analysis   *gpuAnalysis
	emitter    *emitter
	now        func() time.Time
	// ticker paces the release loop; tests that drive release themselves
	// on a virtual clock replace it with one that never fires.
	ticker     func() (<-chan time.Time, func())
	unregister func()
	id         component.ID
	// view is the live view's sink, attached at the first Start; nil
	// without a gpuviz_view extension. Set under mu and ingest.mu.
	view *viewSink

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
	// mu guards the held spans, the matcher's use, the pipeline's books
	// and prefills; ingest.mu is taken under it, never the other way.
	mu         sync.Mutex
	hold       hold
	matcher    matcher
	pipeline   *pipeline
	lastExpire time.Time
	// settleOpen is when the current settle group opened: spans arriving
	// within settle_window of it join it and are released together.
	settleOpen time.Time
	// warmingSaid: the log has said once that spans wait for warm-up.
	warmingSaid bool
	// prefills is a batch's matched prefills on their way to ingest
	// (ingest.prefilled), reused.
	prefills []prefill

	lifeMu  sync.Mutex
	users   int // components created on this core
	running int // components started and not yet shut down
	stop    chan struct{}
	done    chan struct{}
}

func newCore(set processor.Settings, cfg *Config, unregister func()) (*core, error) {
	recognizer, err := inference.NewRecognizer(cfg.recognizer())
	if err != nil {
		return nil, err
	}
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	store := timeline.New(cfg.timeline())
	an := newGPUAnalysis(cfg.Analysis.Enabled, cfg.analysis())
	c := &core{
		cfg: cfg, logger: set.Logger, tel: tel, store: store, recognizer: recognizer,
		ingest:   newIngest(store, an, tel, cfg.History.MaxSpan, cfg.History.AlignGPM),
		analysis: an,
		emitter:  newEmitter(set, cfg, store, an, time.Now()),
		now:      time.Now, ticker: realTicker, unregister: unregister, id: set.ID,
		hold:     hold{max: cfg.MaxPendingSpans},
		matcher:  matcher{store: store, order: cfg.Match.Order},
		pipeline: newPipeline(store, cfg),
	}
	if err := c.registerTelemetry(); err != nil {
		return nil, err
	}
	return c, nil
}

// handle is one component's view of the core: it knows whether that
// component started, so that Shutdown without Start is safe and the core's
// background work runs while any component is started.
type handle struct {
	core    *core
	started bool
}

func (h *handle) start(_ context.Context, host component.Host) error {
	c := h.core
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if h.started {
		return nil
	}
	h.started = true
	c.running++
	if c.running == 1 {
		c.setView(attachView(host, c.id, c.cfg.Attribution.Resolution, c.logger))
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.loop(c.stop, c.done)
	}
	return nil
}

func (h *handle) shutdown(context.Context) error {
	c := h.core
	c.lifeMu.Lock()
	var stop, done chan struct{}
	if h.started {
		h.started = false
		c.running--
		if c.running == 0 {
			stop, done = c.stop, c.done
			if v := c.setView(nil); v != nil {
				defer v.detach()
			}
		}
	}
	c.users--
	last := c.users == 0
	c.lifeMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	if last {
		c.unregister()
		c.tel.Shutdown()
	}
	return nil
}

// setView installs v as the live view's sink (nil: none) in the ingest
// and the pipeline and returns the one it replaces.
func (c *core) setView(v *viewSink) *viewSink {
	c.mu.Lock()
	c.ingest.mu.Lock()
	old := c.view
	c.view, c.ingest.view = v, v
	c.pipeline.onFreeze, c.pipeline.onFinal = nil, nil
	if v != nil {
		c.pipeline.onFreeze, c.pipeline.onFinal = v.label, v.final
	}
	c.ingest.mu.Unlock()
	c.mu.Unlock()
	return old
}

func (c *core) isRunning() bool {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	return c.running > 0
}

// loop runs tick until stopped.
func (c *core) loop(stop, done chan struct{}) {
	defer close(done)
	tick, stopTicker := c.ticker()
	defer stopTicker()
	for {
		select {
		case <-stop:
			return
		case <-tick:
			c.tick(c.now())
		}
	}
}

func realTicker() (<-chan time.Time, func()) {
	t := time.NewTicker(releaseTick)
	return t.C, t.Stop
}

// tick releases the held spans that are ready, finalises the books, and
// once a minute forgets GPUs that went quiet.
func (c *core) tick(now time.Time) {
	c.release(now, func(*heldBatch) bool { return false })
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pipeline.finalize(c.store.GPUs(""))
	if now.Sub(c.lastExpire) > time.Minute {
		c.store.Expire(now)
		c.ingest.forget()
		c.pipeline.forget()
		c.lastExpire = now
	}
}

// processMetrics is the metrics side: it learns the timeline from the GPU
// metrics passing through (which it never changes) and, every
// metrics.interval, appends the derived metrics.
func (c *core) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	c.ingest.consume(ctx, md)
	if counts := engineCounts(md, nil); len(counts) > 0 {
		c.matchEngines(ctx, counts)
	}
	if c.cfg.Metrics.Enabled {
		c.flushMetrics(ctx, md, c.now())
	}
	return md, nil
}

// books returns every GPU's books for the emitter.
func (c *core) books() []gpuBooks {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]gpuBooks, 0, len(c.pipeline.books))
	for k, b := range c.pipeline.books {
		out = append(out, gpuBooks{key: k, backend: c.ingest.backend(k), totals: b.Totals(), current: b.Label(b.FinalTo() - 1)})
	}
	return out
}

// matchMemo remembers, within one batch, the GPUs of spans that name none
// themselves: the spans of one resource match alike.
type matchMemo struct {
	host                          string
	pid                           int64
	podUID, podNamespace, podName string
}

type matched struct {
	set    *gpuSet
	method string
}

func (c *core) consumeTraces(ctx context.Context, td ptrace.Traces, next consumer.Traces) error {
	now := c.now()
	var spans []heldSpan
	rss := td.ResourceSpans()
	total, seen := td.SpanCount(), 0
	for i := range rss.Len() {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := range sss.Len() {
			sl := sss.At(j).Spans()
			for k := range sl.Len() {
				span := sl.At(k)
				req, verdict, reason := c.recognizer.Recognize(span, rs.Resource(), now)
				seen++
				switch verdict {
				case inference.Recognized:
					if spans == nil { // room for every span left: clipped below
						spans = make([]heldSpan, 0, total-seen+1)
					}
					tenant := tenantOf(c.cfg.Metrics.Accounting.TenantAttribute, span.Attributes(), rs.Resource().Attributes())
					spans = append(spans, heldSpan{span: span, siblings: sl, req: req, tenant: tenant})
				case inference.Malformed:
					c.countUnenriched(ctx, "malformed_"+reason, 1)
				}
			}
		}
	}
	if len(spans) == 0 {
		return next.ConsumeTraces(ctx, td)
	}
	if cap(spans) > len(spans)+len(spans)/4 { // held a while: keep no slack
		spans = slices.Clone(spans)
	}
	if c.store.Len() == 0 {
		// No GPU metrics have come through (yet): nothing to wait for.
		c.countUnenriched(ctx, "no_gpu", len(spans))
		return next.ConsumeTraces(ctx, td)
	}
	handedOn := c.cfg.ResultsOn == ResultsOnChild
	if handedOn {
		children := childSpans(td, spans)
		if err := next.ConsumeTraces(ctx, td); err != nil {
			return err // nothing admitted: the sender's retry is not counted twice
		}
		td = children
	}
	b := &heldBatch{td: td, next: next, info: client.FromContext(ctx), spans: spans, arrived: now, deadline: now.Add(c.cfg.MaxWait)}
	c.mu.Lock()
	if !c.hold.admit(b) {
		c.mu.Unlock()
		c.countUnenriched(ctx, "overflow", len(spans))
		if handedOn {
			return nil // the children carry nothing yet
		}
		return next.ConsumeTraces(ctx, td)
	}
	// The batch outlives this call: under pdata.useProtoPooling the
	// service returns its memory to the pool when the call returns unless
	// it is referenced (as the batch processor does); forward lets go.
	pref.RefTraces(td)
	if c.settleOpen.IsZero() || now.Sub(c.settleOpen) >= c.cfg.Attribution.SettleWindow {
		c.settleOpen = now
	}
	b.group = c.settleOpen
	memo := map[matchMemo]matched{}
	c.prefills = c.prefills[:0]
	for i := range b.spans {
		hs := &b.spans[i]
		c.matchSpan(hs, memo, now)
		if c.cfg.History.AlignGPM {
			c.prefills = appendPrefill(c.prefills, hs)
		}
	}
	c.ingest.prefilled(c.prefills)
	c.mu.Unlock()
	if !c.isRunning() {
		// Not started (or already stopped): there is no release loop.
		c.release(now, func(x *heldBatch) bool { return x == b })
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
// cost to their books at now; the caller holds c.mu. memo may be nil.
func (c *core) matchSpan(hs *heldSpan, memo map[matchMemo]matched, now time.Time) {
	if hs.set != nil {
		return
	}
	hinted := len(hs.req.GPUIDs) > 0 || len(hs.req.GPUIndexes) > 0
	mk := matchMemo{hs.req.Host, hs.req.PID, hs.req.PodUID, hs.req.PodNamespace, hs.req.PodName}
	m, ok := memo[mk]
	if !ok || hinted {
		keys, method := c.matcher.match(hs.req)
		if len(keys) == 0 {
			return
		}
		m = matched{set: c.pipeline.set(keys), method: method}
		if !hinted && memo != nil {
			memo[mk] = m
		}
	}
	hs.set, hs.method = m.set, m.method
	c.pipeline.admit(hs, now)
}

// ready reports whether every span of the batch has matched, its settle
// group has closed, its GPUs' energy is in up to its end, their fits are
// not warming up and, where their forecasts fell short, its spans have
// waited their runningHold; the caller holds c.mu. settled caches the sets'
// settled times for one release, warming the sets' warm-up (nil: no group
// is warming, or the hold is too full to wait for one).
func (c *core) ready(b *heldBatch, now time.Time, settled map[*gpuSet]time.Time, warming map[*gpuSet]bool) bool {
	if now.Before(b.group.Add(c.cfg.Attribution.SettleWindow)) && now.Before(b.deadline) {
		return false
	}
	if warming != nil && now.Before(b.arrived.Add(c.cfg.Attribution.WarmupWait)) && c.warms(b, now, warming) {
		return false
	}
	if !now.Before(b.deadline) {
		if b.extended {
			return true
		}
		b.extended = true
		if b.deadline = b.arrived.Add(c.wait(b)); !now.Before(b.deadline) {
			return true
		}
	}
	if now.Before(b.group.Add(c.cfg.Attribution.SettleWindow)) {
		return false
	}
	holdLong := c.hold.roomToWait()
	for i := range b.spans {
		hs := &b.spans[i]
		c.matchSpan(hs, nil, now)
		if hs.set == nil {
			return false
		}
		if holdLong && c.pipeline.holdsLong(hs.set) {
			if until := hs.req.End.Add(runningHold(hs.req)); now.Before(until) {
				// Past max_wait if need be, up to the longest hold.
				if last := b.arrived.Add(c.cfg.maxHold()); last.Before(until) {
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
			keys := c.ingest.answering(hs.set.keys)
			t = noneToWaitFor
			if len(keys) > 0 {
				t, _ = c.store.SettledAll(keys) // zero when a GPU has no energy yet
			}
			// A GPU the receiver and dcgm-exporter both feed has arrived
			// only once the slower source's sample after the span has.
			if d, _, ok := c.ingest.dcgmLag(keys); ok && d.Before(t) {
				t = d
			}
			settled[hs.set] = t
		}
		if t.Before(hs.req.End) {
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
// to wait. memo caches the sets' answers for one release;
// the caller holds c.mu.
func (c *core) warms(b *heldBatch, now time.Time, memo map[*gpuSet]bool) bool {
	var last *gpuSet
	for i := range b.spans {
		set := b.spans[i].set
		if set == nil || set == last {
			continue
		}
		last = set
		w, ok := memo[set]
		if !ok {
			w = c.pipeline.warming(set, now)
			memo[set] = w
		}
		if w {
			if !c.warmingSaid {
				c.warmingSaid = true
				c.logger.Info("holding inference spans while their GPUs' energy books learn to read GPU activity, as after every start (attribution.warmup_wait)",
					zap.Duration("at_most", c.cfg.Attribution.WarmupWait))
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
// holds c.mu.
func (c *core) wait(b *heldBatch) time.Duration {
	w := c.cfg.MaxWait
	seen := map[*gpuSet]bool{}
	for i := range b.spans {
		set := b.spans[i].set
		if set == nil || seen[set] {
			continue
		}
		seen[set] = true
		if spacing, ok := c.store.Spacing(set.keys); ok {
			w = max(w, 2*spacing)
		}
		if _, spacing, ok := c.ingest.dcgmLag(set.keys); ok {
			w = max(w, 2*spacing)
		}
	}
	return min(w, c.cfg.maxHold())
}

// release enriches and forwards the held batches that are ready, or that
// force says to let go, and offers again those the next consumer refused.
// The batches of one settle group go together, once all are ready: their
// spans share GPU energy as if they had arrived at once.
func (c *core) release(now time.Time, force func(*heldBatch) bool) {
	c.releasing.Lock()
	defer c.releasing.Unlock()
	c.mu.Lock()
	waiting := map[time.Time]bool{} // settle groups with a batch not ready
	settled := map[*gpuSet]time.Time{}
	var warming map[*gpuSet]bool
	if c.cfg.Attribution.WarmupWait > 0 && c.hold.roomToWait() && !c.pipeline.ledger.Learned() {
		// Held for the fits only while the hold is at most half full.
		warming = map[*gpuSet]bool{}
	}
	for _, b := range c.hold.batches {
		if !b.enriched && !waiting[b.group] && !c.ready(b, now, settled, warming) {
			waiting[b.group] = true
		}
	}
	ready := c.hold.take(func(b *heldBatch) bool { return b.enriched || force(b) || !waiting[b.group] })
	c.enrich(ready, now)
	if c.hold.n == 0 {
		// Nothing left to release: let the results buffers go once these
		// batches leave, so that an idle collector returns them.
		c.results, c.phaseResults = nil, nil
	}
	v := c.view
	c.mu.Unlock()
	for i, b := range ready {
		if !b.enriched {
			c.annotateBatch(b, v)
			if c.cfg.ResultsOn == ResultsOnChild {
				dropBareChildren(b.td)
			}
			b.enriched = true
			c.recordHold(b, now)
		}
		if b.td.SpanCount() == 0 {
			pref.UnrefTraces(b.td) // children only, none of them enriched
		} else {
			c.forward(now, b, force(b))
		}
		// Handed on (or back in the hold): its spans, now grown by what
		// annotateBatch wrote, must not live on through this release's
		// slice once the next consumer is done with them.
		ready[i] = nil
	}
}

// enrich runs the pipeline over the spans of the batches released at now
// (those not enriched before) and keeps each span's result on it
// (heldSpan.result, in c.results) for annotateBatch; the caller holds
// c.mu. The results are computed together, as the settle group's
// fairness needs, but written batch by batch just before each leaves, so
// that one batch's phase spans and attributes exist at a time rather than
// a whole release's: at 20,000 vLLM spans/s a release is tens of
// thousands of spans, and what annotate adds to each (three phase spans,
// some 30 attributes) is about 3 KB against a spanResult's 152 B (and,
// with phase spans, 352 B of phaseStats).
func (c *core) enrich(batches []*heldBatch, now time.Time) {
	var spans []*heldSpan
	for _, b := range batches {
		if b.enriched {
			continue
		}
		for i := range b.spans {
			c.matchSpan(&b.spans[i], nil, now)
			spans = append(spans, &b.spans[i])
		}
	}
	if len(spans) == 0 {
		return
	}
	// Sized to the release, reused; a much larger one left by a burst is
	// let go.
	c.results = sized(c.results, len(spans))
	results := c.results[:len(spans)]
	var phaseResults []phaseStats
	if c.cfg.PhaseSpans {
		c.phaseResults = sized(c.phaseResults, len(spans))
		phaseResults = c.phaseResults[:len(spans)]
	}
	c.pipeline.round(spans, now, results, phaseResults)
	ctx := context.Background()
	backends := map[*gpuSet]string{}
	enriched, phases := 0, 0
	for i, hs := range spans {
		switch {
		case hs.set == nil:
			c.countUnenriched(ctx, "no_gpu", 1)
			continue
		case !results[i].ok:
			c.countUnenriched(ctx, "no_samples", 1)
			continue
		}
		backend, ok := backends[hs.set]
		if !ok {
			backend = c.backendOf(hs.set.keys)
			backends[hs.set] = backend
		}
		hs.result, hs.backend = &results[i], backend
		if phaseResults != nil {
			hs.phaseStats = &phaseResults[i]
		}
		enriched++
		if c.cfg.PhaseSpans {
			phases += len(hs.req.Phases)
		}
	}
	c.countEnriched(ctx, enriched, phases)
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
// out of the hold: only this release touches it, so c.mu is not held.
func (c *core) annotateBatch(b *heldBatch, v *viewSink) {
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
		if c.cfg.Metrics.Enabled {
			c.emitter.record(rec)
		}
		if v != nil {
			v.request(&rec)
		}
	}
}

// backendOf names the backends of a set of GPUs' data ("simulated"; two,
// comma-separated, if the set mixes them).
func (c *core) backendOf(keys []timeline.Key) string {
	var names []string
	for _, k := range keys {
		for b := range strings.SplitSeq(c.ingest.backend(k), ",") {
			if b != "" && !containsString(names, b) {
				names = append(names, b)
			}
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// forward hands an enriched batch to the next consumer with the client's
// metadata. A retryable refusal puts it back in the hold, to be offered
// again each tick until release_retry has passed; a permanent one, a full
// hold, or final (shutdown) counts it refused.
func (c *core) forward(now time.Time, b *heldBatch, final bool) {
	ctx := client.NewContext(context.Background(), b.info)
	err := b.next.ConsumeTraces(ctx, b.td)
	if err == nil {
		pref.UnrefTraces(b.td)
		return
	}
	if b.retryUntil.IsZero() {
		b.retryUntil = now.Add(c.cfg.ReleaseRetry)
	}
	if !final && !consumererror.IsPermanent(err) && now.Before(b.retryUntil) {
		c.mu.Lock()
		ok := c.hold.requeue(b)
		c.mu.Unlock()
		if ok {
			return
		}
	}
	n := b.td.SpanCount()
	c.logger.Warn("the next consumer refused enriched traces", zap.Error(err), zap.Int("spans", n))
	c.countRefused(n)
	pref.UnrefTraces(b.td)
}
