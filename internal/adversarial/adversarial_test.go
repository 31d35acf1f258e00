package adversarial

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor"
)

func TestGeneratorIsDeterministicAndCoversTheTable(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a, b := NewGenerator(7), NewGenerator(7)
	var m ptrace.ProtoMarshaler
	for range 3 {
		x, err := m.MarshalTraces(a.Batch(500, now))
		require.NoError(t, err)
		y, err := m.MarshalTraces(b.Batch(500, now))
		require.NoError(t, err)
		require.Equal(t, x, y, "one seed, one sequence")
	}
	other, err := m.MarshalTraces(NewGenerator(8).Batch(500, now))
	require.NoError(t, err)
	first, err := m.MarshalTraces(NewGenerator(7).Batch(500, now))
	require.NoError(t, err)
	assert.NotEqual(t, first, other, "another seed, other IDs and order")

	g := NewGenerator(1)
	seen := map[string]int{}
	seqs := map[int64]bool{}
	EachSpan(g.Batch(g.CycleLen(), now), func(_ pcommon.Resource, _ pcommon.InstrumentationScope, sp ptrace.Span) {
		c, seq, ok := CaseOf(sp)
		require.True(t, ok)
		seen[c.Name]++
		assert.False(t, seqs[seq], "sequence numbers are unique")
		seqs[seq] = true
	})
	for _, c := range Cases() {
		assert.Equal(t, c.PerCycle, seen[c.Name], c.Name)
	}
	reasons := map[string]bool{}
	families := map[string]map[Outcome]bool{}
	for _, c := range Cases() {
		if c.Outcome == Malformed {
			reasons[c.Reason] = true
		}
		if families[c.Family] == nil {
			families[c.Family] = map[Outcome]bool{}
		}
		families[c.Family][c.Outcome] = true
	}
	assert.Len(t, reasons, 10, "every reason the recognisers give: %v", reasons)
	for _, f := range []string{"vllm", "trtllm", "sglang", "tgi", "triton", "genai"} {
		assert.True(t, families[f][Enriched] && families[f][Malformed], "%s has well-formed and malformed cases", f)
	}
}

// gpuMetrics is what a gpuviz receiver sends for one GPU: utilisation,
// power and an energy counter integrating it, every 100 ms over
// [from, to].
func gpuMetrics(from, to time.Time) pmetric.Metrics {
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	series := func(name string, sum bool) pmetric.NumberDataPointSlice {
		m := ms.AppendEmpty()
		m.SetName(name)
		if sum {
			return m.SetEmptySum().DataPoints()
		}
		return m.SetEmptyGauge().DataPoints()
	}
	util, power, energy := series("hw.gpu.utilization", false), series("hw.power", false), series("hw.energy", true)
	const step, watts = 100 * time.Millisecond, 400.0
	for i, at := 0, from; !at.After(to); i, at = i+1, at.Add(step) {
		for _, p := range []struct {
			dps pmetric.NumberDataPointSlice
			v   float64
		}{{util, 0.9}, {power, watts}, {energy, 1e6 + watts*step.Seconds()*float64(i)}} {
			dp := p.dps.AppendEmpty()
			dp.SetTimestamp(pcommon.NewTimestampFromTime(at))
			dp.SetDoubleValue(p.v)
			dp.Attributes().PutStr("hw.id", "GPU-adversarial-0")
		}
	}
	return md
}

// counts returns a counter's values by its reason attribute ("" without).
func counts(t *testing.T, tel *componenttest.Telemetry, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := tel.GetMetric(name)
	if err != nil {
		return out // never incremented
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		reason, _ := dp.Attributes.Value("reason")
		out[reason.AsString()] += dp.Value
	}
	return out
}

// The whole table, twice over, through the gpuviz processor: nothing
// panics, every span comes out, the well-formed ones enriched with their
// phase spans, the others identical to what went in, and the malformed
// ones counted by reason.
func TestTableThroughTheProcessor(t *testing.T) {
	f := gpuvizprocessor.NewFactory()
	cfg := f.CreateDefaultConfig().(*gpuvizprocessor.Config)
	cfg.Attribution.SettleWindow = 0
	cfg.Attribution.FinalizeAfter = time.Second
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	set := processor.Settings{ID: component.NewID(f.Type()), TelemetrySettings: tel.NewTelemetrySettings(), BuildInfo: component.NewDefaultBuildInfo()}
	sink := new(consumertest.TracesSink)
	tp, err := f.CreateTraces(context.Background(), set, cfg, sink)
	require.NoError(t, err)
	mp, err := f.CreateMetrics(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	host := componenttest.NewNopHost()
	require.NoError(t, tp.Start(context.Background(), host))
	require.NoError(t, mp.Start(context.Background(), host))
	t.Cleanup(func() {
		require.NoError(t, tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})

	now := time.Now()
	require.NoError(t, mp.ConsumeMetrics(context.Background(), gpuMetrics(now.Add(-30*time.Second), now)))
	g := NewGenerator(1)
	sent := map[int64]ptrace.Traces{}
	var enriched, phases int
	malformed := map[string]int64{}
	for range 2 * g.CycleLen() / 250 {
		td := g.Batch(250, now)
		EachSpan(td, func(res pcommon.Resource, scope pcommon.InstrumentationScope, sp ptrace.Span) {
			c, seq, _ := CaseOf(sp)
			sent[seq] = Single(res, scope, sp)
			switch {
			case c.Unenriched != "":
				malformed[c.Unenriched]++
			case c.Outcome == Enriched:
				enriched++
				phases += c.Phases
			case c.Outcome == Malformed:
				malformed["malformed_"+c.Reason]++
			}
		})
		require.NoError(t, tp.ConsumeTraces(context.Background(), td))
	}
	require.Eventually(t, func() bool { return sink.SpanCount() >= len(sent)+phases }, time.Minute, 20*time.Millisecond,
		"every span out, with the phase spans of the enriched ones")
	time.Sleep(300 * time.Millisecond) // a release tick: nothing more comes
	require.Equal(t, len(sent)+phases, sink.SpanCount())

	out := map[int64]bool{}
	gotPhases := 0
	for _, td := range sink.AllTraces() {
		EachSpan(td, func(res pcommon.Resource, scope pcommon.InstrumentationScope, sp ptrace.Span) {
			c, seq, ok := CaseOf(sp)
			if !ok {
				gotPhases++
				return
			}
			require.False(t, out[seq], "span %d came out twice", seq)
			out[seq] = true
			assert.NoError(t, Check(c, sent[seq], Single(res, scope, sp)))
			family, enrichedSpan := sp.Attributes().Get("gpuviz.request.family")
			if c.Outcome == Enriched && c.Unenriched == "" {
				assert.True(t, enrichedSpan, "%s enriched", c.Name)
				assert.Equal(t, c.Family, family.AsString(), c.Name)
			} else {
				assert.False(t, enrichedSpan, "%s not enriched", c.Name)
			}
		})
	}
	assert.Len(t, out, len(sent))
	assert.Equal(t, phases, gotPhases)

	unenriched := counts(t, tel, "otelcol_processor_gpuviz_spans_unenriched")
	assert.Equal(t, malformed, unenriched, "malformed spans counted by reason, those with no samples no_samples, and nothing else unenriched")
	assert.Equal(t, map[string]int64{"": int64(enriched)}, counts(t, tel, "otelcol_processor_gpuviz_spans_enriched"))
	assert.Equal(t, map[string]int64{"": int64(phases)}, counts(t, tel, "otelcol_processor_gpuviz_phase_spans_added"))
}

// What a collector must refuse whole, pdata refuses to decode; the
// deepest attribute the table nests decodes.
func TestRefusedRequestsDoNotDecode(t *testing.T) {
	reqs := RefusedRequests(time.Now())
	require.Len(t, reqs, 9)
	for name, body := range reqs {
		assert.Error(t, ptraceotlp.NewExportRequest().UnmarshalProto(body), name)
	}
	var m ptrace.ProtoMarshaler
	var u ptrace.ProtoUnmarshaler
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	deep(sp.Attributes().PutEmptyMap("x.deep"), DeepestMaps)
	b, err := m.MarshalTraces(td)
	require.NoError(t, err)
	_, err = u.UnmarshalTraces(b)
	assert.NoError(t, err)
}
