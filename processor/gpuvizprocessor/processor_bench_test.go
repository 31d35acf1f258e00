package gpuvizprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
)

// BenchmarkConsumeMetrics measures the metrics side: GPU data points
// learned into the timeline per second on one core (8 GPUs, 7 signals and
// the energy counter each, a scrape a second, timestamps moving forward).
func BenchmarkConsumeMetrics(b *testing.B) {
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Metrics.Enabled = false // the learning path alone
	mp, err := f.CreateMetrics(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	md := pmetric.NewMetrics()
	for g := range 8 {
		gpuMetrics("node-1", "GPU-"+string(rune('a'+g)), int64(g), start, time.Second, []sample{busy}).
			ResourceMetrics().MoveAndAppendTo(md.ResourceMetrics())
	}
	points := md.DataPointCount()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// Each pass is the next second's scrape.
		ts := pcommon.NewTimestampFromTime(start.Add(time.Duration(i) * time.Second))
		forEachNumberPoint(md, func(dp pmetric.NumberDataPoint) { dp.SetTimestamp(ts) })
		if err := mp.ConsumeMetrics(ctx, md); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(points)*float64(b.N)/b.Elapsed().Seconds(), "points/s")
}

func forEachNumberPoint(md pmetric.Metrics, f func(pmetric.NumberDataPoint)) {
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			m := ms.At(j)
			var dps pmetric.NumberDataPointSlice
			if m.Type() == pmetric.MetricTypeGauge {
				dps = m.Gauge().DataPoints()
			} else {
				dps = m.Sum().DataPoints()
			}
			for k := range dps.Len() {
				f(dps.At(k))
			}
		}
	}
}

// BenchmarkEnrich measures the traces side: vLLM spans recognised, matched
// to a GPU, enriched (statistics, bottleneck per sample interval, energy
// attribution, three phase spans) per second on one core. Each batch holds
// 100 concurrent 10 s requests on one GPU with 1 s samples.
func BenchmarkEnrich(b *testing.B) {
	b.Run("phase_spans", func(b *testing.B) { benchmarkEnrich(b, true) })
	b.Run("no_phase_spans", func(b *testing.B) { benchmarkEnrich(b, false) })
}

func benchmarkEnrich(b *testing.B, phaseSpans bool) {
	fac := &factory{cores: map[*Config]*core{}}
	cfg := createDefaultConfig()
	cfg.PhaseSpans = phaseSpans
	c, err := fac.coreFor(processortest.NewNopSettings(metadata.Type), cfg)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, now.Add(-60*time.Second), time.Second, repeat(busy, 61)))
	newBatch := func() *heldBatch {
		td := ptrace.NewTraces()
		for r := range 100 {
			vllmSpan(td, byte(r), now.Add(-50*time.Second+time.Duration(r)*300*time.Millisecond), 0.5, 0.5, 9, 200)
		}
		batch := &heldBatch{td: td, next: consumertest.NewNop()}
		rs := td.ResourceSpans().At(0)
		sl := rs.ScopeSpans().At(0).Spans()
		for k := range sl.Len() {
			req, _, _ := c.spans.recognizer.Recognize(sl.At(k), rs.Resource(), now)
			batch.spans = append(batch.spans, heldSpan{span: sl.At(k), siblings: sl, req: req})
		}
		c.spans.mu.Lock()
		memo := map[matchMemo]matched{}
		for i := range batch.spans {
			c.spans.matchSpan(&batch.spans[i], memo, now)
		}
		c.spans.mu.Unlock()
		return batch
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for range b.N {
		b.StopTimer()
		batch := newBatch()
		b.StartTimer()
		c.spans.mu.Lock()
		c.spans.enrich([]*heldBatch{batch}, now)
		c.spans.mu.Unlock()
		c.spans.annotateBatch(batch, nil, now)
		n += len(batch.spans)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "spans/s")
}
