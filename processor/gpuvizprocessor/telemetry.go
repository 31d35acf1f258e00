package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// registerTelemetry registers the processor's observable gauges.
func (c *core) registerTelemetry() error {
	if err := c.tel.RegisterProcessorGpuvizGpusCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(int64(c.store.Len()))
		return nil
	}); err != nil {
		return err
	}
	if err := c.tel.RegisterProcessorGpuvizGpmLagCallback(func(_ context.Context, o metric.Float64Observer) error {
		c.ingest.gpmLags(func(k timeline.Key, lag time.Duration) {
			o.Observe(lag.Seconds(), metric.WithAttributes(attribute.String("hw.id", k.GPU)))
		})
		return nil
	}); err != nil {
		return err
	}
	return c.tel.RegisterProcessorGpuvizPendingSpansCallback(func(_ context.Context, o metric.Int64Observer) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		o.Observe(int64(c.hold.n))
		return nil
	})
}

func (c *core) countUnenriched(ctx context.Context, reason string, n int) {
	c.tel.ProcessorGpuvizSpansUnenriched.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", reason)))
}

func (c *core) countEnriched(ctx context.Context, spans, phaseSpans int) {
	if spans > 0 {
		c.tel.ProcessorGpuvizSpansEnriched.Add(ctx, int64(spans))
	}
	if phaseSpans > 0 {
		c.tel.ProcessorGpuvizPhaseSpansAdded.Add(ctx, int64(phaseSpans))
	}
}

// recordHold records how long batch b was held, at its first release at
// now.
func (c *core) recordHold(b *heldBatch, now time.Time) {
	c.tel.ProcessorGpuvizHoldDuration.Record(context.Background(), now.Sub(b.arrived).Seconds())
}

func (c *core) countRefused(spans int) {
	c.tel.ProcessorGpuvizSpansRefused.Add(context.Background(), int64(spans))
}
