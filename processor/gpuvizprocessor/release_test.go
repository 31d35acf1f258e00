package gpuvizprocessor

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// spanCounter records, each time a batch is handed on, how many spans
// every batch of the release has at that moment.
type spanCounter struct {
	batches []ptrace.Traces
	seen    [][]int
}

func (s *spanCounter) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (s *spanCounter) ConsumeTraces(context.Context, ptrace.Traces) error {
	counts := make([]int, len(s.batches))
	for i, td := range s.batches {
		counts[i] = td.SpanCount()
	}
	s.seen = append(s.seen, counts)
	return nil
}

// A release computes its settle group's results together but writes them
// (phase spans, attributes) batch by batch as each leaves: the batches
// still to go are as they came, so a release of many batches never holds
// all their enriched output at once.
func TestReleaseWritesEachBatchAsItLeaves(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, nil)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	*now = base.Add(21 * time.Second)
	next := &spanCounter{}
	for i := range 3 {
		td := ptrace.NewTraces()
		vllmSpan(td, byte(i+1), base.Add(time.Duration(2+i)*time.Second), 0.2, 0.5, 4, 100)
		next.batches = append(next.batches, td)
		require.NoError(t, c.consumeTraces(context.Background(), td, next))
	}
	for step := range 8 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	// One llm_request span came in each batch; each leaves with its three
	// phase spans (queue, prefill, decode).
	require.Len(t, next.seen, 3, "one release of the three batches")
	assert.Equal(t, [][]int{{4, 1, 1}, {4, 4, 1}, {4, 4, 4}}, next.seen)
}

// gcWatcher, each time a batch is handed on, collects garbage and records
// which of the release's earlier batches are still alive. It keeps no
// batch itself.
type gcWatcher struct {
	held  []weak.Pointer[heldBatch]
	alive [][]bool
}

func (w *gcWatcher) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (w *gcWatcher) ConsumeTraces(context.Context, ptrace.Traces) error {
	runtime.GC()
	alive := make([]bool, len(w.alive))
	for i := range alive {
		alive[i] = w.held[i].Value() != nil
	}
	w.alive = append(w.alive, alive)
	return nil
}

// A batch handed on is let go of at once, not when the whole release is
// done: with the phase spans and attributes written on it, a release's
// batches would otherwise all stay alive until the last has left.
func TestReleaseLetsGoOfEachBatchItHandsOn(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, nil)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
	*now = base.Add(21 * time.Second)
	next := &gcWatcher{}
	for i := range 3 {
		td := ptrace.NewTraces()
		vllmSpan(td, byte(i+1), base.Add(time.Duration(2+i)*time.Second), 0.2, 0.5, 4, 100)
		require.NoError(t, c.consumeTraces(context.Background(), td, next))
	}
	c.mu.Lock()
	for _, b := range c.hold.batches {
		next.held = append(next.held, weak.Make(b))
	}
	c.mu.Unlock()
	require.Len(t, next.held, 3)
	for step := range 8 {
		c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	assert.Equal(t, [][]bool{{}, {false}, {false, false}}, next.alive)
}
