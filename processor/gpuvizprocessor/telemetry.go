package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// telemetry records the processor's own metrics (declared in
// metadata.yaml) for ingest, the span side and the core.
type telemetry struct{ b *metadata.TelemetryBuilder }

// gauges are what the observable gauges read at each collection.
type gauges struct {
	gpus         func() int
	gpmLags      func(func(timeline.Key, time.Duration))
	pendingSpans func() int
}

// register registers the observable gauges.
func (t telemetry) register(g gauges) error {
	if err := t.b.RegisterProcessorGpuvizGpusCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(int64(g.gpus()))
		return nil
	}); err != nil {
		return err
	}
	if err := t.b.RegisterProcessorGpuvizGpmLagCallback(func(_ context.Context, o metric.Float64Observer) error {
		g.gpmLags(func(k timeline.Key, lag time.Duration) {
			o.Observe(lag.Seconds(), metric.WithAttributes(attribute.String("hw.id", k.GPU)))
		})
		return nil
	}); err != nil {
		return err
	}
	return t.b.RegisterProcessorGpuvizPendingSpansCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(int64(g.pendingSpans()))
		return nil
	})
}

// points counts the GPU points one metrics batch taught the timeline and
// those it refused, by reason.
func (t telemetry) points(ctx context.Context, learned int64, refused map[string]int64) {
	if learned > 0 {
		t.b.ProcessorGpuvizGpuPoints.Add(ctx, learned)
	}
	for reason, n := range refused {
		t.b.ProcessorGpuvizGpuPointsRefused.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
}

func (t telemetry) unenriched(ctx context.Context, reason string, n int) {
	t.b.ProcessorGpuvizSpansUnenriched.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", reason)))
}

// malformed counts a malformed span passed through for each of reasons.
func (t telemetry) malformed(ctx context.Context, reasons []string) {
	for _, r := range reasons {
		t.unenriched(ctx, "malformed_"+r, 1)
	}
}

func (t telemetry) enriched(ctx context.Context, spans, phaseSpans int) {
	if spans > 0 {
		t.b.ProcessorGpuvizSpansEnriched.Add(ctx, int64(spans))
	}
	if phaseSpans > 0 {
		t.b.ProcessorGpuvizPhaseSpansAdded.Add(ctx, int64(phaseSpans))
	}
}

// held records how long batch b was held, at its first release at now.
func (t telemetry) held(b *heldBatch, now time.Time) {
	t.b.ProcessorGpuvizHoldDuration.Record(context.Background(), now.Sub(b.arrived).Seconds())
}

func (t telemetry) refused(spans int) {
	t.b.ProcessorGpuvizSpansRefused.Add(context.Background(), int64(spans))
}

// flushed counts what a flush of the derived metrics attached and folded.
func (t telemetry) flushed(ctx context.Context, f flushed) {
	if f.exemplars > 0 {
		t.b.ProcessorGpuvizExemplarsAttached.Add(ctx, f.exemplars)
	}
	if f.foldedModels > 0 {
		t.b.ProcessorGpuvizRequestsFolded.Add(ctx, f.foldedModels, metric.WithAttributes(attribute.String("dimension", "model")))
	}
	if f.foldedTenants > 0 {
		t.b.ProcessorGpuvizRequestsFolded.Add(ctx, f.foldedTenants, metric.WithAttributes(attribute.String("dimension", "tenant")))
	}
}

// engineCounts counts what became of the servers' running-request counts,
// by outcome.
func (t telemetry) engineCounts(ctx context.Context, outcomes map[string]int64) {
	for outcome, n := range outcomes {
		t.b.ProcessorGpuvizEngineCounts.Add(ctx, n, metric.WithAttributes(attribute.String("outcome", outcome)))
	}
}
