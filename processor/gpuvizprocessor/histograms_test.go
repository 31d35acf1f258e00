package gpuvizprocessor

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// A request histogram's point counts every request since the series
// started, not the requests since the last flush: its second flush, after
// one request before each, counts two, from the same start time. It must
// say so (cumulative): a backend reading it as delta would add the first
// request again at every flush.
func TestRequestHistogramsAreCumulative(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	h := newHistograms(10 * time.Minute)
	k := histKey{host: "node-1", model: "llama", label: bottleneck.MemoryBound}
	start := pcommon.NewTimestampFromTime(base)
	h.observe(histEnergy, k, 3, exemplar{}, base.Add(time.Second), start)
	first := pmetric.NewMetricSlice()
	h.appendTo(first, "node-1", pcommon.NewTimestampFromTime(base.Add(10*time.Second)))
	h.observe(histEnergy, k, 30, exemplar{}, base.Add(11*time.Second), pcommon.NewTimestampFromTime(base.Add(10*time.Second)))
	second := pmetric.NewMetricSlice()
	h.appendTo(second, "node-1", pcommon.NewTimestampFromTime(base.Add(20*time.Second)))

	for n, ms := range []pmetric.MetricSlice{first, second} {
		require.Equal(t, 1, ms.Len(), "only the energy histogram has values")
		m := ms.At(0)
		assert.Equal(t, "gpuviz.request.energy", m.Name())
		require.Equal(t, pmetric.MetricTypeHistogram, m.Type())
		assert.Equal(t, pmetric.AggregationTemporalityCumulative, m.Histogram().AggregationTemporality(),
			"flush %d: the points count from the series' start", n+1)
		require.Equal(t, 1, m.Histogram().DataPoints().Len())
		assert.Equal(t, start, m.Histogram().DataPoints().At(0).StartTimestamp(), "flush %d: one start for the series' life", n+1)
	}
	dp := second.At(0).Histogram().DataPoints().At(0)
	assert.Equal(t, uint64(2), dp.Count(), "both requests, not only the one since the first flush")
	assert.Equal(t, 33.0, dp.Sum())
	var inBuckets uint64
	for _, c := range dp.BucketCounts().AsRaw() {
		inBuckets += c
	}
	assert.Equal(t, dp.Count(), inBuckets)
}

// Exemplars are the first requests of each flush interval, at most
// exemplarsPerSeries of them a series: later requests of the interval add
// none (keeping them would cost memory and export bytes for every request
// of a busy series), and the next interval starts a fresh list.
func TestExemplarsAreTheFirstRequestsOfTheInterval(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	h := newHistograms(10 * time.Minute)
	k := histKey{host: "node-1", model: "llama", label: bottleneck.ComputeBound}
	since := pcommon.NewTimestampFromTime(base)
	const requests = exemplarsPerSeries + 3
	for i := range requests {
		ex := exemplar{traceID: pcommon.TraceID{byte(i + 1)}, spanID: pcommon.SpanID{byte(i + 1)}, ts: base.Add(time.Duration(i) * time.Second)}
		h.observe(histEnergy, k, float64(i+1), ex, base.Add(time.Duration(i)*time.Second), since)
	}
	ms := pmetric.NewMetricSlice()
	n := h.appendTo(ms, "node-1", pcommon.NewTimestampFromTime(base.Add(time.Minute)))
	require.Equal(t, 1, ms.Len())
	dp := ms.At(0).Histogram().DataPoints().At(0)
	assert.Equal(t, uint64(requests), dp.Count(), "every request counted")
	exs := dp.Exemplars()
	require.Equal(t, exemplarsPerSeries, exs.Len(), "at most exemplarsPerSeries exemplars a series")
	assert.Equal(t, int64(exemplarsPerSeries), n, "appendTo reports what went out")
	for i := range exs.Len() {
		assert.Equal(t, pcommon.SpanID{byte(i + 1)}, exs.At(i).SpanID(), "exemplar %d is the interval's request %d", i, i+1)
		assert.Equal(t, float64(i+1), exs.At(i).DoubleValue())
		assert.Equal(t, pcommon.NewTimestampFromTime(base.Add(time.Duration(i)*time.Second)), exs.At(i).Timestamp(), "exemplar %d is stamped when its request was", i)
	}

	// The next interval: its own first request is an exemplar again.
	h.observe(histEnergy, k, 50, exemplar{traceID: pcommon.TraceID{99}, spanID: pcommon.SpanID{99}}, base.Add(61*time.Second), since)
	ms = pmetric.NewMetricSlice()
	h.appendTo(ms, "node-1", pcommon.NewTimestampFromTime(base.Add(2*time.Minute)))
	exs = ms.At(0).Histogram().DataPoints().At(0).Exemplars()
	require.Equal(t, 1, exs.Len(), "the earlier interval's exemplars went out with it")
	assert.Equal(t, pcommon.SpanID{99}, exs.At(0).SpanID())
}

// A value on a bucket's bound is counted in that bucket (OTLP's buckets
// are (bounds[i-1], bounds[i]]), not the next: 10 J in (5, 10].
func TestRequestHistogramBoundsAreInclusive(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	h := newHistograms(10 * time.Minute)
	k := histKey{host: "node-1", model: "llama", label: bottleneck.ComputeBound}
	h.observe(histEnergy, k, 10, exemplar{}, base, pcommon.NewTimestampFromTime(base))
	h.observe(histEnergy, k, 10.5, exemplar{}, base, pcommon.NewTimestampFromTime(base))
	ms := pmetric.NewMetricSlice()
	h.appendTo(ms, "node-1", pcommon.NewTimestampFromTime(base.Add(time.Second)))
	dp := ms.At(0).Histogram().DataPoints().At(0)
	i := slices.Index(dp.ExplicitBounds().AsRaw(), 10)
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, uint64(1), dp.BucketCounts().At(i), "10 J is in (5, 10]")
	assert.Equal(t, uint64(1), dp.BucketCounts().At(i+1), "10.5 J is in (10, 20]")
}

// A gateway's histograms go out per host: each host's resource carries
// its own requests' series alone.
func TestRequestHistogramsGoOutUnderTheirHost(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	h := newHistograms(10 * time.Minute)
	since := pcommon.NewTimestampFromTime(base)
	h.observe(histEnergy, histKey{host: "node-1", model: "llama", label: bottleneck.ComputeBound}, 3, exemplar{traceID: pcommon.TraceID{1}, spanID: pcommon.SpanID{1}}, base, since)
	h.observe(histEnergy, histKey{host: "node-2", model: "qwen", label: bottleneck.MemoryBound}, 30, exemplar{traceID: pcommon.TraceID{2}, spanID: pcommon.SpanID{2}}, base, since)
	assert.Equal(t, []string{"node-1", "node-2"}, h.hosts())
	for _, tc := range []struct {
		host, model string
		sum         float64
	}{{"node-1", "llama", 3}, {"node-2", "qwen", 30}} {
		ms := pmetric.NewMetricSlice()
		assert.Equal(t, int64(1), h.appendTo(ms, tc.host, pcommon.NewTimestampFromTime(base.Add(time.Second))), "%s's exemplar alone", tc.host)
		require.Equal(t, 1, ms.Len())
		dps := ms.At(0).Histogram().DataPoints()
		require.Equal(t, 1, dps.Len(), "%s's series alone", tc.host)
		model, _ := dps.At(0).Attributes().Get(attrModel)
		assert.Equal(t, tc.model, model.Str())
		assert.Equal(t, tc.sum, dps.At(0).Sum())
	}
}

// forEachMetric calls f with each metric of md.
func forEachMetric(md pmetric.Metrics, f func(pmetric.Metric)) {
	for _, rm := range md.ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				f(m)
			}
		}
	}
}

// emittedExemplars calls f with each exemplar of md's derived metrics and
// the point it is on.
func emittedExemplars(md pmetric.Metrics, f func(metric string, start, ts pcommon.Timestamp, ex pmetric.Exemplar)) {
	forEachMetric(md, func(m pmetric.Metric) {
		switch m.Type() {
		case pmetric.MetricTypeSum:
			for _, dp := range m.Sum().DataPoints().All() {
				for _, ex := range dp.Exemplars().All() {
					f(m.Name(), dp.StartTimestamp(), dp.Timestamp(), ex)
				}
			}
		case pmetric.MetricTypeHistogram:
			for _, dp := range m.Histogram().DataPoints().All() {
				for _, ex := range dp.Exemplars().All() {
					f(m.Name(), dp.StartTimestamp(), dp.Timestamp(), ex)
				}
			}
		}
	})
}

// A request span without a trace or span ID (all zeros, which a sender
// may send) is counted, but no exemplar links to it: the Prometheus
// exporter would write one with no trace_id, linking nowhere, in place of
// a request's that does link.
func TestARequestWithoutIDsMakesNoExemplar(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	e := newEmitter(processortest.NewNopSettings(metadata.Type), cfg, nil, newGPUAnalysis(false, cfg.analysis()), base)
	key := timeline.Key{Host: "node-1", GPU: "GPU-a"}
	at := base.Add(5 * time.Second)
	for _, ids := range []struct {
		trace pcommon.TraceID
		span  pcommon.SpanID
	}{{}, {trace: pcommon.TraceID{1}}, {span: pcommon.SpanID{2}}, {pcommon.TraceID{3}, pcommon.SpanID{3}}} {
		e.record(requestRecord{keys: []timeline.Key{key}, model: "m", label: bottleneck.ComputeBound, energy: 5, energyKnown: true,
			perToken: 0.1, busy: 1, seconds: 1, traceID: ids.trace, spanID: ids.span, end: at}, at)
	}
	md := pmetric.NewMetrics()
	b := gpuBooks{key: key}
	b.totals.Seconds.Add(bottleneck.ComputeBound, 1)
	n := e.emit(md, base.Add(10*time.Second), []gpuBooks{b})
	on := map[string]int{}
	emittedExemplars(md, func(metric string, _, _ pcommon.Timestamp, ex pmetric.Exemplar) {
		on[metric]++
		assert.Equal(t, pcommon.TraceID{3}, ex.TraceID(), metric)
		assert.Equal(t, pcommon.SpanID{3}, ex.SpanID(), metric)
	})
	assert.Equal(t, map[string]int{"gpuviz.gpu.bottleneck.time": 1, "gpuviz.request.energy": 1,
		"gpuviz.request.energy_per_output_token": 1, "gpuviz.request.gpu_busy_time": 1}, on, "the request with both IDs alone")
	assert.Equal(t, int64(4), n)
	var count uint64
	forHistogram(md, "gpuviz.request.energy", func(dp pmetric.HistogramDataPoint) { count += dp.Count() })
	assert.Equal(t, uint64(4), count, "every request counted")
}

// forHistogram calls f with each point of md's histogram name.
func forHistogram(md pmetric.Metrics, name string, f func(pmetric.HistogramDataPoint)) {
	forEachMetric(md, func(m pmetric.Metric) {
		if m.Name() == name {
			for _, dp := range m.Histogram().DataPoints().All() {
				f(dp)
			}
		}
	})
}

// An exemplar lies within the interval of the point it is on: a request
// held across a flush (ended before its new series started) or from a
// host whose clock runs ahead (ended after the flush) is stamped at the
// interval's bound; one that ended within it keeps its end.
func TestExemplarsLieWithinTheirPointsInterval(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	e := newEmitter(processortest.NewNopSettings(metadata.Type), cfg, nil, newGPUAnalysis(false, cfg.analysis()), base)
	key := timeline.Key{Host: "node-1", GPU: "GPU-a"}
	b := gpuBooks{key: key}
	b.totals.Seconds.Add(bottleneck.ComputeBound, 1)
	e.emit(pmetric.NewMetrics(), base.Add(10*time.Second), []gpuBooks{b})

	ends := map[byte]time.Time{
		1: base.Add(8 * time.Second),  // before the flush at 10 s, released after it
		2: base.Add(12 * time.Second), // within
		3: base.Add(25 * time.Second), // after the flush at 20 s: its host's clock ahead
	}
	for id := range byte(3) {
		id++
		e.record(requestRecord{keys: []timeline.Key{key}, model: "m", label: bottleneck.ComputeBound, energy: 5, energyKnown: true,
			perToken: 0.1, busy: 1, seconds: 1, traceID: pcommon.TraceID{id}, spanID: pcommon.SpanID{id}, end: ends[id]}, base.Add(15*time.Second))
	}
	b.totals.Seconds.Add(bottleneck.ComputeBound, 1)
	md := pmetric.NewMetrics()
	e.emit(md, base.Add(20*time.Second), []gpuBooks{b})
	on := map[string]int{}
	emittedExemplars(md, func(metric string, start, ts pcommon.Timestamp, ex pmetric.Exemplar) {
		on[metric]++
		assert.LessOrEqual(t, start, ex.Timestamp(), "%s: request %d's exemplar before its point's start", metric, ex.TraceID()[0])
		assert.LessOrEqual(t, ex.Timestamp(), ts, "%s: request %d's exemplar after its point", metric, ex.TraceID()[0])
		if ex.TraceID()[0] == 2 {
			assert.Equal(t, pcommon.NewTimestampFromTime(ends[2]), ex.Timestamp(), "%s: stamped when the request ended", metric)
		}
	})
	assert.Equal(t, map[string]int{"gpuviz.gpu.bottleneck.time": 3, "gpuviz.request.energy": 3,
		"gpuviz.request.energy_per_output_token": 3, "gpuviz.request.gpu_busy_time": 3}, on)
}
