package gpuvizprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
)

// A client's view of a request (a GenAI span of kind CLIENT) takes no
// share and is not a request present on the GPU: over seconds nobody ran
// in, it must read the label the bottleneck-time counter counts (idle), not
// host_bound.
func TestAClientSpanOverAnIdleGPUReadsIdleAsTheCounterDoes(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	quiet := sample{util: 0.02, tensor: 0, dram: 0.01, powerW: 90, memUsed: 60e9}
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(quiet, 21)))
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "app")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("chat llama")
	sp.SetKind(ptrace.SpanKindClient)
	sp.SetTraceID(pcommon.TraceID{1, 1})
	sp.SetSpanID(pcommon.SpanID{1, 2})
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(base.Add(5 * time.Second)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(base.Add(8 * time.Second)))
	sp.Attributes().PutStr("gen_ai.operation.name", "chat")
	sp.Attributes().PutStr("gen_ai.request.model", "llama")
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	for step := range 8 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	var label string
	for _, out := range sink.AllTraces() {
		forEachSpan(out, func(sp ptrace.Span) {
			l, ok := sp.Attributes().Get(attrBottleneck)
			require.True(t, ok)
			label = l.Str()
		})
	}
	books := c.spans.books()
	require.Len(t, books, 1)
	got := books[0].totals.Seconds
	assert.InDelta(t, 0, got.Of(bottleneck.HostBound), 1e-9, "nobody was present: the counter says idle")
	assert.Equal(t, string(bottleneck.Idle), label, "the span reads what the counter counts")
}
