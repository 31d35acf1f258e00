package gpuvizprocessor

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

var update = flag.Bool("update", false, "rewrite golden files from the current output")

// familySpans builds one request of each family as the servers emit them
// (see ../../shared reference and internal/inference), one after the other
// on one GPU: vLLM, a GenAI-convention client span, a TGI handler span and
// its batch-level prefill step, a Triton model span with its compute span.
func familySpans(base time.Time) ptrace.Traces {
	td := ptrace.NewTraces()
	ts := func(s float64) pcommon.Timestamp {
		return pcommon.NewTimestampFromTime(base.Add(time.Duration(s * float64(time.Second))))
	}
	newSpan := func(service, name string, trace byte, start, end float64) ptrace.Span {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", service)
		s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		s.SetName(name)
		s.SetTraceID(pcommon.TraceID{trace, 1})
		s.SetSpanID(pcommon.SpanID{trace, 2})
		s.SetStartTimestamp(ts(start))
		s.SetEndTimestamp(ts(end))
		return s
	}

	v := newSpan("vllm", "llm_request", 1, 0, 4)
	v.Attributes().PutDouble("gen_ai.latency.time_in_queue", 0.5)
	v.Attributes().PutDouble("gen_ai.latency.time_in_model_prefill", 0.5)
	v.Attributes().PutDouble("gen_ai.latency.time_in_model_decode", 3)
	v.Attributes().PutInt("gen_ai.usage.prompt_tokens", 900)
	v.Attributes().PutInt("gen_ai.usage.completion_tokens", 300)

	g := newSpan("chat-app", "chat llama-3.1-70b", 2, 5, 8)
	g.Attributes().PutStr("gen_ai.operation.name", "chat")
	g.Attributes().PutStr("gen_ai.request.model", "llama-3.1-70b")
	g.Attributes().PutDouble("gen_ai.response.time_to_first_chunk", 0.75)
	g.Attributes().PutInt("gen_ai.usage.input_tokens", 400)
	g.Attributes().PutInt("gen_ai.usage.output_tokens", 150)

	h := newSpan("text-generation-inference.router", "chat_completions", 3, 9, 12)
	h.Attributes().PutStr("validation_time", "1.5ms")
	h.Attributes().PutStr("queue_time", "498.5ms")
	h.Attributes().PutStr("inference_time", "2.5s")
	h.Attributes().PutStr("total_time", "3s")
	p := newSpan("text-generation-inference.router", "prefill", 4, 9.5, 10)
	p.Attributes().PutStr("code.namespace", "text_generation_router_v3::backend")
	p.Attributes().PutInt("batch_size", 4)

	m := newSpan("triton", "llama", 5, 13, 16)
	m.Attributes().PutStr("triton.model_name", "llama")
	m.Attributes().PutInt("triton.model_version", 1)
	for _, e := range []struct {
		name string
		at   float64
	}{{"REQUEST_START", 13}, {"QUEUE_START", 13.1}, {"REQUEST_END", 16}} {
		ev := m.Events().AppendEmpty()
		ev.SetName(e.name)
		ev.SetTimestamp(ts(e.at))
	}
	cs := newSpan("triton", "compute", 5, 13.5, 15.9)
	cs.SetParentSpanID(m.SpanID())
	cs.SetSpanID(pcommon.SpanID{5, 3})
	for _, e := range []struct {
		name string
		at   float64
	}{{"COMPUTE_START", 13.5}, {"COMPUTE_INPUT_END", 13.6}, {"COMPUTE_OUTPUT_START", 15.8}, {"COMPUTE_END", 15.9}} {
		ev := cs.Events().AppendEmpty()
		ev.SetName(e.name)
		ev.SetTimestamp(ts(e.at))
	}
	return td
}

// TestEnrichedSpansGolden pins what every span family gets from the
// processor, against a fixture GPU whose signals change every second.
func TestEnrichedSpansGolden(t *testing.T) {
	for on, file := range map[string]string{ResultsOnRequest: "enriched_spans.yaml", ResultsOnChild: "child_spans.yaml"} {
		t.Run(on, func(t *testing.T) { testEnrichedSpansGolden(t, on, file) })
	}
}

// testEnrichedSpansGolden checks what the processor hands on with
// results_on set to on against file: with child, the children, after the
// spans as they came.
func testEnrichedSpansGolden(t *testing.T, on, file string) {
	p := newPipelines(t, func(c *Config) { c.ResultsOn = on })
	// A fixed moment: every timestamp in the golden file is reproducible.
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC) // in the past: spans ending in the future are malformed
	samples := make([]sample, 25)
	for i := range samples {
		// Alternating compute-heavy and memory-heavy seconds, power to match.
		if i%2 == 0 {
			samples[i] = sample{util: 1, tensor: 0.7, dram: 0.3, powerW: 650, memUsed: 70e9}
		} else {
			samples[i] = sample{util: 0.9, tensor: 0.15, dram: 0.85, powerW: 420, memUsed: 72e9}
		}
	}
	require.NoError(t, p.metrics.ConsumeMetrics(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base.Add(-2*time.Second), time.Second, samples)))
	require.NoError(t, p.traces.ConsumeTraces(context.Background(), familySpans(base)))
	sent := familySpans(base)
	batches := 1
	if on == ResultsOnChild {
		batches = 2
	}
	require.Eventually(t, func() bool { return len(p.spans.AllTraces()) == batches }, 5*time.Second, 10*time.Millisecond)
	if on == ResultsOnChild {
		require.NoError(t, ptracetest.CompareTraces(sent, p.spans.AllTraces()[0]), "the spans as they came")
	}

	got := p.spans.AllTraces()[batches-1]
	pinChildIDs(got)
	path := filepath.Join("testdata", file)
	if *update {
		require.NoError(t, golden.WriteTraces(t, path, got))
	}
	want, err := golden.ReadTraces(path)
	require.NoError(t, err)
	// Phase spans get random span IDs; everything else is pinned.
	require.NoError(t, ptracetest.CompareTraces(want, got, ptracetest.IgnoreSpanID(), ptracetest.IgnoreSpansOrder()))
	// A golden file can pin the wrong thing: every request span (vLLM,
	// GenAI, TGI handler, Triton model) and both aggregate spans (TGI
	// prefill step, Triton compute) must have been enriched.
	names := []string{"llm_request", "chat llama-3.1-70b", "chat_completions", "prefill", "llama", "compute"}
	if on == ResultsOnChild {
		// Their results went on a child each.
		require.Len(t, spanAttrs(t, p.spans, requestSpanName), len(names))
		names = []string{requestSpanName}
	}
	for _, name := range names {
		attrs := spanAttrs(t, p.spans, name)
		require.NotEmpty(t, attrs, name)
		for _, a := range attrs {
			assert.Contains(t, a, "gpuviz.energy", name)
			assert.Contains(t, a, "gpuviz.bottleneck", name)
		}
	}
}

// pinChildIDs gives each gpu.request span a span ID made from its parent's
// (the request span's, last byte flipped), in place of its random one, and
// its phase spans that parent: a golden file can then pin where each hangs.
func pinChildIDs(td ptrace.Traces) {
	pinned := map[pcommon.SpanID]pcommon.SpanID{}
	spans := func(fn func(ptrace.Span)) {
		for i := range td.ResourceSpans().Len() {
			sss := td.ResourceSpans().At(i).ScopeSpans()
			for j := range sss.Len() {
				for k := range sss.At(j).Spans().Len() {
					fn(sss.At(j).Spans().At(k))
				}
			}
		}
	}
	spans(func(s ptrace.Span) {
		if s.Name() == requestSpanName {
			id := s.ParentSpanID()
			id[7] ^= 0xff
			pinned[s.SpanID()] = id
			s.SetSpanID(id)
		}
	})
	spans(func(s ptrace.Span) {
		if id, ok := pinned[s.ParentSpanID()]; ok {
			s.SetParentSpanID(id)
		}
	})
}
