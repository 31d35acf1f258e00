package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// tracesProcessor is the traces side: it recognises inference spans and
// holds their batch until the GPU samples covering the spans have arrived,
// then enriches it and passes it on from the core's release loop. Batches
// without inference spans pass straight through.
type tracesProcessor struct {
	handle
	next consumer.Traces
}

var _ consumer.Traces = (*tracesProcessor)(nil)

func (p *tracesProcessor) Start(ctx context.Context, host component.Host) error {
	return p.start(ctx, host)
}

// Shutdown releases everything this pipeline still holds (enriched with
// the samples there are) before letting go of the core: nothing is dropped.
func (p *tracesProcessor) Shutdown(ctx context.Context) error {
	p.core.release(p.core.now(), func(b *heldBatch) bool { return b.next == p.next })
	return p.shutdown(ctx)
}

func (p *tracesProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

func (p *tracesProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	return p.core.consumeTraces(ctx, td, p.next)
}

// heldBatch is a batch of traces waiting for GPU samples.
type heldBatch struct {
	td       ptrace.Traces
	next     consumer.Traces
	spans    []heldSpan
	deadline time.Time
}

// heldSpan is one recognised inference span of a held batch.
type heldSpan struct {
	span     ptrace.Span
	siblings ptrace.SpanSlice // where its phase spans go
	req      inference.Request
	// The GPUs it matched, once it matched some: kept, so that waiting
	// and enriching do not match it again.
	keys   []timeline.Key
	method string
}

// gpus returns the span's GPUs, matching it if it has not matched yet.
func (c *core) gpus(hs *heldSpan) ([]timeline.Key, string) {
	if len(hs.keys) == 0 {
		hs.keys, hs.method = c.match(hs.req)
	}
	return hs.keys, hs.method
}

func (c *core) consumeTraces(ctx context.Context, td ptrace.Traces, next consumer.Traces) error {
	now := c.now()
	var spans []heldSpan
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := range sss.Len() {
			sl := sss.At(j).Spans()
			for k := range sl.Len() {
				span := sl.At(k)
				req, verdict, reason := c.recognizer.Recognize(span, rs.Resource(), now)
				switch verdict {
				case inference.Recognized:
					spans = append(spans, heldSpan{span: span, siblings: sl, req: req})
				case inference.Malformed:
					c.countUnenriched(ctx, "malformed_"+reason, 1)
				}
			}
		}
	}
	if len(spans) == 0 {
		return next.ConsumeTraces(ctx, td)
	}
	if c.store.Len() == 0 {
		// No GPU metrics have come through (yet): nothing to wait for.
		c.countUnenriched(ctx, "no_gpu", len(spans))
		return next.ConsumeTraces(ctx, td)
	}
	c.mu.Lock()
	if c.heldN+len(spans) > c.cfg.MaxPendingSpans {
		c.mu.Unlock()
		c.countUnenriched(ctx, "overflow", len(spans))
		return next.ConsumeTraces(ctx, td)
	}
	c.held = append(c.held, &heldBatch{td: td, next: next, spans: spans, deadline: now.Add(c.cfg.MaxWait)})
	c.heldN += len(spans)
	running := c.running > 0
	c.mu.Unlock()
	if !running {
		// Not started (or already stopped): there is no release loop.
		c.release(now, func(b *heldBatch) bool { return b.next == next })
	}
	return nil
}

// release enriches and forwards the held batches that are ready — samples
// cover all their spans, their wait is over, or force says so — together,
// so that requests released at once share GPU energy between them.
func (c *core) release(now time.Time, force func(*heldBatch) bool) {
	c.mu.Lock()
	var ready []*heldBatch
	keep := c.held[:0]
	for _, b := range c.held {
		if force(b) || !now.Before(b.deadline) || c.covered(b) {
			ready = append(ready, b)
			c.heldN -= len(b.spans)
		} else {
			keep = append(keep, b)
		}
	}
	clear(c.held[len(keep):])
	c.held = keep
	c.mu.Unlock()
	if len(ready) == 0 {
		return
	}
	c.enrich(context.Background(), ready)
	for _, b := range ready {
		if err := b.next.ConsumeTraces(context.Background(), b.td); err != nil {
			c.logger.Warn("the next consumer refused enriched traces", zap.Error(err), zap.Int("spans", b.td.SpanCount()))
		}
	}
}

// covered reports whether every span of the batch has GPU energy (samples,
// for a GPU without an energy counter) at or after its end on every GPU it
// matched. A span that matches no GPU yet waits: the GPU metrics may be on
// their way.
func (c *core) covered(b *heldBatch) bool {
	for i := range b.spans {
		keys, _ := c.gpus(&b.spans[i])
		if len(keys) == 0 {
			return false
		}
		for _, k := range keys {
			settled, ok := c.store.Settled(k)
			if !ok || settled.Before(b.spans[i].req.End) {
				return false
			}
		}
	}
	return true
}

func (c *core) countUnenriched(ctx context.Context, reason string, n int) {
	c.tel.ProcessorGpuvizSpansUnenriched.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", reason)))
}
