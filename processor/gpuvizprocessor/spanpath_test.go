package gpuvizprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadatatest"
)

// twoGPUsOnNode1 is a core that has seen 21 s of GPU-a and GPU-b busy on
// node-1 from base, GPU-a's data marked backend a and GPU-b's b ("": not
// marked).
func twoGPUsOnNode1(t *testing.T, a, b string) (*core, time.Time, *consumertest.TracesSink) {
	t.Helper()
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(21 * time.Second)
	for i, gpu := range []struct{ id, backend string }{{"GPU-a", a}, {"GPU-b", b}} {
		md := gpuMetrics("node-1", gpu.id, int64(i), base, time.Second, repeat(busy, 21))
		if gpu.backend != "" {
			md.ResourceMetrics().At(0).Resource().Attributes().PutStr("gpuviz.backend", gpu.backend)
		}
		c.ingest.consume(context.Background(), md)
	}
	return c, base, sink
}

// spanGPUs returns each llm_request span's gpuviz.gpu.ids by trace ID byte.
func spanGPUs(sink *consumertest.TracesSink) map[byte][]any {
	out := map[byte][]any{}
	for _, td := range sink.AllTraces() {
		forEachSpan(td, func(sp ptrace.Span) {
			if v, ok := sp.Attributes().Get(attrGPUIDs); ok && sp.Name() == "llm_request" {
				out[sp.TraceID()[0]] = v.Slice().AsRaw()
			}
		})
	}
	return out
}

// The spans of one resource that name no GPU match alike, and are matched
// once per batch; a span that names its GPU takes that one, neither taking
// nor giving the resource's match to the spans around it.
func TestASpanNamingItsGPUKeepsItAndLeavesTheOthersTheirs(t *testing.T) {
	c, base, sink := twoGPUsOnNode1(t, "", "")
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50).Attributes().PutStr("gpu.uuid", "GPU-a")
	vllmSpan(td, 2, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	vllmSpan(td, 3, base.Add(5*time.Second), 0.5, 0.5, 3, 50).Attributes().PutStr("gpu.uuid", "GPU-b")
	vllmSpan(td, 4, base.Add(6*time.Second), 0.5, 0.5, 3, 50)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	c.tick(base.Add(27 * time.Second))
	assert.Equal(t, map[byte][]any{
		1: {"GPU-a"},
		2: {"GPU-a", "GPU-b"},
		3: {"GPU-b"},
		4: {"GPU-a", "GPU-b"},
	}, spanGPUs(sink))
}

// A request on a real GPU and a simulated one is marked with both
// backends: the simulated half of its energy is not passed off as
// measured.
func TestASpanOnARealAndASimulatedGPUIsMarkedWithBoth(t *testing.T) {
	c, base, sink := twoGPUsOnNode1(t, "nvml", "simulated")
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	c.tick(base.Add(27 * time.Second))
	spans := spanAttrs(t, sink, "llm_request")
	require.Len(t, spans, 1)
	assert.Equal(t, []any{"GPU-a", "GPU-b"}, spans[0][attrGPUIDs])
	assert.Equal(t, "nvml,simulated", spans[0][attrBackend])
	for _, phase := range []string{"gpu.queue", "gpu.prefill", "gpu.decode"} {
		children := spanAttrs(t, sink, phase)
		require.Len(t, children, 1, phase)
		assert.Equal(t, "nvml,simulated", children[0][attrBackend], phase)
	}
}

// A span whose GPUs are known but have no sample in its window (it ran
// before their first) goes on un-enriched, counted no_samples: it carries
// no gpuviz. attribute, as it would carry nothing known.
func TestASpanBeforeItsGPUsFirstSampleGoesOnUnenriched(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCoreWith(t, metadatatest.NewSettings(tel), func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(41 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base.Add(20*time.Second), time.Second, repeat(busy, 21)))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)  // [5 s, 9 s]: before the first sample
	vllmSpan(td, 2, base.Add(25*time.Second), 0.5, 0.5, 3, 50) // [25 s, 29 s]
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	for step := range 10 {
		c.tick(base.Add(41*time.Second + time.Duration(step)*time.Second))
	}
	gpuviz := map[byte]int{}
	for _, td := range sink.AllTraces() {
		forEachSpan(td, func(sp ptrace.Span) {
			for k := range sp.Attributes().All() {
				if len(k) > 7 && k[:7] == "gpuviz." {
					gpuviz[sp.TraceID()[0]]++
				}
			}
		})
	}
	assert.Zero(t, gpuviz[1], "nothing written on the span without samples")
	assert.Positive(t, gpuviz[2])
	assert.Equal(t, int64(1), counted(t, tel, "otelcol_processor_gpuviz_spans_unenriched"))
	assert.Equal(t, int64(1), counted(t, tel, "otelcol_processor_gpuviz_spans_enriched"))
}

// The phase spans added are counted only where phase spans are on.
func TestPhaseSpansAreCountedOnlyWhenAdded(t *testing.T) {
	for _, on := range []bool{true, false} {
		tel := componenttest.NewTelemetry()
		t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
		c, base, sink := func() (*core, time.Time, *consumertest.TracesSink) {
			base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
			c, now, sink := virtualCoreWith(t, metadatatest.NewSettings(tel), func(cfg *Config) { cfg.PhaseSpans = on })
			*now = base.Add(21 * time.Second)
			c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 21)))
			return c, base, sink
		}()
		td := ptrace.NewTraces()
		vllmSpan(td, 1, base.Add(5*time.Second), 0.5, 0.5, 3, 50)
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 12 {
			c.tick(base.Add(21*time.Second + time.Duration(step)*time.Second))
		}
		want := int64(0)
		if on {
			want = 3
		}
		require.Equal(t, int64(1), counted(t, tel, "otelcol_processor_gpuviz_spans_enriched"))
		assert.Equal(t, want, counted(t, tel, "otelcol_processor_gpuviz_phase_spans_added"), "phase spans %v", on)
		assert.Equal(t, int(1+want), sink.SpanCount())
	}
}

// A batch arriving settle_window after its group opened opens the next
// group: the group has closed, and its batches may already have gone.
func TestABatchArrivingAsItsGroupClosesOpensTheNext(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, nil)
	*now = base.Add(30 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 31)))
	for i, at := range []time.Duration{30 * time.Second, 30*time.Second + c.cfg.Attribution.SettleWindow} {
		*now = base.Add(at)
		td := ptrace.NewTraces()
		vllmSpan(td, byte(i+1), base.Add(5*time.Second+time.Duration(i)*time.Second), 0.5, 0.5, 3, 50)
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	}
	c.tick(*now)
	assert.Equal(t, map[byte][]any{1: {"GPU-a"}}, spanGPUs(sink), "the first group's batch alone")
	c.tick(now.Add(c.cfg.Attribution.SettleWindow))
	assert.Len(t, spanGPUs(sink), 2, "the second once its own group closed")
}
