package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// tracesProcessor is the traces side: its core's span path recognises
// inference spans and holds their batch until they settle and the GPU
// energy covering them has arrived, then enriches it and passes it on from
// the core's release loop. Batches without inference spans pass straight
// through.
type tracesProcessor struct {
	handle
	next consumer.Traces
}

var _ consumer.Traces = (*tracesProcessor)(nil)

func (p *tracesProcessor) Start(ctx context.Context, host component.Host) error {
	return p.start(ctx, host)
}

// Shutdown releases everything this pipeline still holds (enriched with
// the samples there are) before letting go of the core: nothing is
// dropped, and a refusal by the next consumer is returned.
func (p *tracesProcessor) Shutdown(context.Context) error {
	return p.close(func() error {
		return p.core.spans.release(p.core.now(), func(b *heldBatch) bool { return b.next == p.next })
	})
}

func (p *tracesProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

func (p *tracesProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	return p.core.consumeTraces(ctx, td, p.next, p.accepting)
}
