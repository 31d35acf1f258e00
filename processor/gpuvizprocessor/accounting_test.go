package gpuvizprocessor

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pmetrictest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadatatest"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// acctRequest is one request of the accounting tests: a vLLM span on its
// own resource, the tenant attribute "team" on the span, the resource, or
// neither ("" leaves it out; a value of spanTeam "-" is the empty string).
type acctRequest struct {
	trace                   byte
	start, queue, prefill   float64
	decode                  float64
	model, spanTeam, rsTeam string
}

// acctSpans builds the requests' spans in one batch, in the given order.
func acctSpans(base time.Time, reqs []acctRequest, order []int) ptrace.Traces {
	td := ptrace.NewTraces()
	for _, i := range order {
		r := reqs[i]
		one := ptrace.NewTraces()
		sp := vllmSpan(one, r.trace, base.Add(time.Duration(r.start*float64(time.Second))), r.queue, r.prefill, r.decode, int64(10+5*int(r.trace)))
		if r.model != "" {
			sp.Attributes().PutStr("gen_ai.request.model", r.model)
		}
		switch r.spanTeam {
		case "":
		case "-":
			sp.Attributes().PutStr("team", "")
		default:
			sp.Attributes().PutStr("team", r.spanTeam)
		}
		if r.rsTeam != "" {
			one.ResourceSpans().At(0).Resource().Attributes().PutStr("team", r.rsTeam)
		}
		one.ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	return td
}

// acctPoint names one point of the accounting counters.
type acctPoint struct{ metric, use, model, tenant string }

// derived reads what a flush emitted: the accounting counters' points,
// gpuviz.gpu.energy by use, the correction and the bottleneck time summed
// over GPUs and labels.
type derived struct {
	acct       map[acctPoint]float64
	energy     map[string]float64
	correction float64
	labelled   float64
}

func readDerived(t *testing.T, md pmetric.Metrics) derived {
	t.Helper()
	d := derived{acct: map[acctPoint]float64{}, energy: map[string]float64{}}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				if m.Type() != pmetric.MetricTypeSum {
					continue
				}
				dps := m.Sum().DataPoints()
				for l := range dps.Len() {
					dp := dps.At(l)
					a := dp.Attributes()
					switch m.Name() {
					case "gpuviz.accounting.energy", "gpuviz.accounting.gpu_time":
						require.Equal(t, 3, a.Len(), "%s: %v", m.Name(), a.AsRaw())
						p := acctPoint{m.Name(), stringAttr(a, attrEnergyUse), stringAttr(a, attrModel), stringAttr(a, attrTenant)}
						_, dup := d.acct[p]
						require.False(t, dup, "two points of %v", p)
						d.acct[p] = dp.DoubleValue()
					case "gpuviz.gpu.energy":
						d.energy[stringAttr(a, attrEnergyUse)] += dp.DoubleValue()
					case "gpuviz.gpu.energy.correction":
						d.correction += dp.DoubleValue()
					case "gpuviz.gpu.bottleneck.time":
						d.labelled += dp.DoubleValue()
					}
				}
			}
		}
	}
	return d
}

// sum adds up the accounting points of metric with use ("" any).
func (d derived) sum(metric, use string) float64 {
	var s float64
	for p, v := range d.acct {
		if p.metric == metric && (use == "" || p.use == use) {
			s += v
		}
	}
	return s
}

// onlyAccounting keeps the accounting counters of md.
func onlyAccounting(md pmetric.Metrics) pmetric.Metrics {
	out := pmetric.NewMetrics()
	md.CopyTo(out)
	out.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		rm.ScopeMetrics().RemoveIf(func(sm pmetric.ScopeMetrics) bool {
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool { return !strings.HasPrefix(m.Name(), "gpuviz.accounting.") })
			return sm.Metrics().Len() == 0
		})
		return rm.ScopeMetrics().Len() == 0
	})
	return out
}

// goldenRequests: tenants on the span, on the resource, on neither, an
// empty span value falling back to the resource; with max_tenants 2 and
// max_models 2 the third tenant and model are "other".
var goldenRequests = []acctRequest{
	{trace: 1, start: 2, queue: 0.5, prefill: 0.5, decode: 3, model: "llama-8b", spanTeam: "search"},
	{trace: 2, start: 3, prefill: 0.5, decode: 4, model: "llama-8b", rsTeam: "ads"},
	{trace: 3, start: 4, prefill: 0.5, decode: 2, model: "llama-70b", spanTeam: "-", rsTeam: "ads"},
	{trace: 4, start: 5, prefill: 0.25, decode: 5, model: "llama-8b"},
	{trace: 5, start: 6, prefill: 0.25, decode: 3, model: "mistral-7b", spanTeam: "billing"},
	{trace: 6, start: 12, prefill: 0.5, decode: 2, model: "llama-70b", spanTeam: "search", rsTeam: "ads"},
}

// TestAccountingGolden pins the accounting counters one flush emits for
// requests of several tenants and models on one GPU, and checks what the
// golden file cannot: the tenant rules, and that the counters reconcile
// with gpuviz.gpu.energy and gpuviz.gpu.bottleneck.time.
func TestAccountingGolden(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, sink := virtualCore(t, func(cfg *Config) {
		cfg.Attribution.FinalizeAfter = 5 * time.Second
		cfg.Metrics.MaxModels = 2
		cfg.Metrics.Accounting = AccountingConfig{TenantAttribute: "team", MaxTenants: 2}
	})
	samples := make([]sample, 41)
	for i := range samples {
		switch {
		case i > 20 && i <= 30: // nobody runs: idle
			samples[i] = sample{util: 0.02, powerW: 90, memUsed: 60e9}
		case i%2 == 0:
			samples[i] = sample{util: 1, tensor: 0.7, dram: 0.3, powerW: 650, memUsed: 70e9}
		default:
			samples[i] = busy
		}
	}
	*now = base.Add(41 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, samples))
	require.NoError(t, c.consumeTraces(context.Background(), acctSpans(base, goldenRequests, []int{0, 1, 2, 3, 4, 5}), sink, started))
	for step := range 10 {
		c.tick(base.Add(41*time.Second + time.Duration(step)*time.Second))
	}
	require.Len(t, spanEnergies(t, sink), len(goldenRequests))
	firstFlushStart := c.emitter.lastTS
	md := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), md, base.Add(60*time.Second))

	got := onlyAccounting(md)
	path := filepath.Join("testdata", "accounting_metrics.yaml")
	if *update {
		require.NoError(t, golden.WriteMetrics(t, path, got))
	}
	want, err := golden.ReadMetrics(path)
	require.NoError(t, err)
	// The golden file keeps points sorted and no times (the start is the
	// emitter's creation, on the wall clock); the points are at the flush.
	require.NoError(t, pmetrictest.CompareMetrics(want, got, pmetrictest.IgnoreTimestamp(), pmetrictest.IgnoreStartTimestamp(), pmetrictest.IgnoreMetricDataPointsOrder()))
	ms := got.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range ms.Len() {
		dps := ms.At(i).Sum().DataPoints()
		for j := range dps.Len() {
			assert.Equal(t, pcommon.NewTimestampFromTime(base.Add(60*time.Second)), dps.At(j).Timestamp())
			assert.Equal(t, firstFlushStart, dps.At(j).StartTimestamp(), "all from before the first flush")
		}
	}

	d := readDerived(t, md)
	tenants, models := map[string]bool{}, map[string]bool{}
	for p := range d.acct {
		if p.use == "requests" {
			tenants[p.tenant], models[p.model] = true, true
		}
	}
	assert.Equal(t, map[string]bool{"search": true, "ads": true, "unknown": true, "other": true}, tenants)
	assert.Equal(t, map[string]bool{"llama-8b": true, "llama-70b": true, "other": true}, models)
	// The third request's empty span value falls back to its resource's
	// ads; the sixth's span value wins over its resource's.
	assert.Contains(t, d.acct, acctPoint{"gpuviz.accounting.energy", "requests", "llama-70b", "ads"})
	assert.Contains(t, d.acct, acctPoint{"gpuviz.accounting.energy", "requests", "llama-70b", "search"})
	assert.Contains(t, d.acct, acctPoint{"gpuviz.accounting.energy", "requests", "other", "other"}, "billing's mistral: both past their bounds")

	// Reconciled with the books: the requests' energy is what the spans
	// carry and what gpuviz.gpu.energy{requests} books; idle alike.
	var spans float64
	for _, e := range spanEnergies(t, sink) {
		spans += e
	}
	const eps = 1e-6
	assert.InDelta(t, spans, d.sum("gpuviz.accounting.energy", "requests"), eps)
	assert.InDelta(t, d.energy["requests"], d.sum("gpuviz.accounting.energy", "requests"), eps)
	assert.InDelta(t, d.energy["idle"], d.sum("gpuviz.accounting.energy", "idle"), eps)
	assert.Greater(t, d.energy["idle"], 10*90.0, "the quiet seconds, and the busy ones no request ran in, are idle")
	// Within one settle group nothing needs correcting: the requests'
	// GPU-seconds are the busy time, and with idle the labelled time.
	assert.InDelta(t, 0, d.correction, eps)
	assert.InDelta(t, d.labelled, d.sum("gpuviz.accounting.gpu_time", ""), eps)
	// Queue time holds no GPU: busy from 2.5 s to 10.25 s and 12 s to
	// 14.5 s, in 100 ms bins.
	assert.InDelta(t, 10.3, d.sum("gpuviz.accounting.gpu_time", "requests"), eps)
}

// A randomised workload: what the accounting books over every tenant, idle
// and unsampled is what gpuviz.gpu.energy books (conservation), its time
// with the seconds' correction is the bottleneck time, and no series
// depends on the order in which the spans arrive, or their batching,
// within the settle window (order independence).
func TestAccountingConservesAndIsOrderIndependent(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 14))
		ratio := []float64{1, 0.5}[seed%2]
		samples := repeat(busy, 61)
		for i := range samples {
			samples[i].powerW = 100 + 550*rng.Float64()
			samples[i].util = rng.Float64()
		}
		teams := []string{"search", "ads", "billing", "infra"}
		reqs := make([]acctRequest, 10)
		for i := range reqs {
			r := acctRequest{trace: byte(i + 1), start: 1 + 20*rng.Float64(), queue: rng.Float64(), prefill: 0.05 + 0.5*rng.Float64(), decode: 0.5 + 6*rng.Float64()}
			r.model = []string{"llama-8b", "llama-70b"}[rng.IntN(2)]
			switch team := teams[rng.IntN(len(teams))]; rng.IntN(3) {
			case 0:
				r.spanTeam = team
			case 1:
				r.rsTeam = team
			} // else no tenant
			reqs[i] = r
		}
		run := func(order []int, oneBatch bool) (derived, []gpuBooks) {
			c, now, sink := virtualCore(t, func(cfg *Config) {
				cfg.Attribution.FinalizeAfter = 5 * time.Second
				cfg.Attribution.SamplingRatio = ratio
				cfg.Metrics.Accounting.TenantAttribute = "team"
			})
			*now = base.Add(61 * time.Second)
			c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, samples))
			if oneBatch {
				require.NoError(t, c.consumeTraces(context.Background(), acctSpans(base, reqs, order), sink, started))
			} else {
				for n, i := range order { // 0.4 s apart: all within the 5 s window
					*now = base.Add(61*time.Second + time.Duration(n)*400*time.Millisecond)
					require.NoError(t, c.consumeTraces(context.Background(), acctSpans(base, reqs, []int{i}), sink, started))
				}
			}
			for step := range 12 {
				c.tick(base.Add(66*time.Second + time.Duration(step)*time.Second))
			}
			require.Len(t, spanEnergies(t, sink), len(reqs))
			md := pmetric.NewMetrics()
			c.flushMetrics(context.Background(), md, base.Add(80*time.Second))
			return readDerived(t, md), c.spans.books()
		}
		d, books := run(rng.Perm(len(reqs)), true)
		require.Len(t, books, 1)
		tot := books[0].totals
		const eps = 1e-6
		for _, use := range []string{"requests", "idle", "unsampled"} {
			assert.InDelta(t, d.energy[use], d.sum("gpuviz.accounting.energy", use), eps, "seed %d: %s", seed, use)
		}
		assert.InDelta(t, tot.Measured, d.sum("gpuviz.accounting.energy", "")+d.correction, eps, "seed %d: every joule once", seed)
		assert.InDelta(t, d.labelled, d.sum("gpuviz.accounting.gpu_time", "")+tot.CorrectionSeconds, eps, "seed %d: every second once", seed)
		assert.InDelta(t, tot.IdleSeconds, d.sum("gpuviz.accounting.gpu_time", "idle"), eps)
		assert.InDelta(t, tot.UnsampledSeconds, d.sum("gpuviz.accounting.gpu_time", "unsampled"), eps)
		if ratio < 1 {
			assert.Positive(t, d.sum("gpuviz.accounting.energy", "unsampled"))
		}
		for _, oneBatch := range []bool{true, false} {
			for range 3 {
				order := rng.Perm(len(reqs))
				got, _ := run(order, oneBatch)
				require.Equal(t, len(d.acct), len(got.acct), "seed %d, order %v", seed, order)
				for p, v := range d.acct {
					require.Contains(t, got.acct, p)
					assert.InDelta(t, v, got.acct[p], 1e-9*math.Max(1, v), "seed %d, order %v, one batch %v: %v", seed, order, oneBatch, p)
				}
			}
		}
	}
}

func TestTenantOf(t *testing.T) {
	for name, tc := range map[string]struct {
		attr           string
		span, resource map[string]any
		want           string
	}{
		"on the span":                     {"team", map[string]any{"team": "search"}, nil, "search"},
		"on the resource":                 {"team", nil, map[string]any{"team": "ads"}, "ads"},
		"the span's wins":                 {"team", map[string]any{"team": "search"}, map[string]any{"team": "ads"}, "search"},
		"an empty span value falls back":  {"team", map[string]any{"team": ""}, map[string]any{"team": "ads"}, "ads"},
		"missing":                         {"team", map[string]any{"other": "x"}, map[string]any{"service.name": "vllm"}, ""},
		"an integer by its string form":   {"project.id", map[string]any{"project.id": 42}, nil, "42"},
		"none configured: no tenant":      {"", map[string]any{"team": "search"}, map[string]any{"team": "ads"}, ""},
		"a resource attribute by its key": {"k8s.namespace.name", nil, map[string]any{"k8s.namespace.name": "team-a"}, "team-a"},
	} {
		t.Run(name, func(t *testing.T) {
			span, resource := pcommon.NewMap(), pcommon.NewMap()
			require.NoError(t, span.FromRaw(tc.span))
			require.NoError(t, resource.FromRaw(tc.resource))
			assert.Equal(t, tc.want, tenantOf(tc.attr, span, resource))
		})
	}
}

// The tenant and model bounds: the first max values of a host keep their
// names, later ones are "other" (folded), "unknown" and "other" take no
// slot, hosts are bounded apart, and a value idle for the expiry frees its
// slot.
func TestBoundedValues(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	type step struct {
		host, value string
		at          time.Duration
		want        string
		folded      bool
	}
	for name, tc := range map[string]struct {
		max   int
		steps []step
	}{
		"max_tenants 1": {1, []step{
			{"n1", "search", 0, "search", false},
			{"n1", "ads", 0, "other", true},
			{"n1", "search", 0, "search", false},
			{"n1", "", 0, "unknown", false},
			{"n1", "billing", 0, "other", true},
			{"n2", "ads", 0, "ads", false}, // per host
		}},
		"missing is unknown, and takes no slot": {2, []step{
			{"n1", "", 0, "unknown", false},
			{"n1", "a", 0, "a", false},
			{"n1", "b", 0, "b", false},
			{"n1", "c", 0, "other", true},
			{"n1", "", 0, "unknown", false},
		}},
		"overflow, then a freed slot": {2, []step{
			{"n1", "a", 0, "a", false},
			{"n1", "b", 5 * time.Minute, "b", false},
			{"n1", "c", 5 * time.Minute, "other", true},
			{"n1", "c", 11 * time.Minute, "c", false}, // a idle for 11 minutes: gone
			{"n1", "a", 11 * time.Minute, "other", true},
		}},
		"a tenant called other is other": {1, []step{
			{"n1", "other", 0, "other", false},
			{"n1", "a", 0, "a", false},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			b := newBoundedValues(tc.max)
			for i, s := range tc.steps {
				b.expire(base.Add(s.at), 10*time.Minute)
				got, folded := b.fold(s.host, s.value, base.Add(s.at))
				assert.Equal(t, s.want, got, "step %d", i)
				assert.Equal(t, s.folded, folded, "step %d", i)
			}
		})
	}
	b := newBoundedValues(4)
	long, _ := b.fold("n1", strings.Repeat("é", 200), base) // 400 bytes
	assert.Len(t, long, maxValueBytes)
	assert.True(t, strings.HasPrefix(strings.Repeat("é", 200), long), "cut at a character")
}

// Requests folded into "other" are counted in the processor's telemetry,
// by dimension, and charged there: nothing is lost.
func TestFoldedRequestsAreCounted(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, now, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), func(cfg *Config) {
		cfg.Metrics.MaxModels = 1
		cfg.Metrics.Accounting.MaxTenants = 1
	})
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	*now = base
	key := []timeline.Key{{Host: "node-1", GPU: "GPU-a"}}
	for i, r := range []struct{ model, tenant string }{{"a", "x"}, {"b", "x"}, {"a", "y"}, {"c", "z"}, {"", ""}} {
		c.emitter.record(requestRecord{keys: key, model: r.model, tenant: r.tenant, energy: float64(i + 1), energyKnown: true, gpuSeconds: 1, label: bottleneck.MemoryBound, end: base}, base)
	}
	md := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), md, base.Add(time.Second))
	metadatatest.AssertEqualProcessorGpuvizRequestsFolded(t, tel, []metricdata.DataPoint[int64]{
		{Attributes: attribute.NewSet(attribute.String("dimension", "model")), Value: 2},
		{Attributes: attribute.NewSet(attribute.String("dimension", "tenant")), Value: 2},
	}, metricdatatest.IgnoreTimestamp())
	d := readDerived(t, md)
	assert.Equal(t, map[acctPoint]float64{
		{"gpuviz.accounting.energy", "requests", "a", "x"}:                  1,
		{"gpuviz.accounting.energy", "requests", "other", "x"}:              2,
		{"gpuviz.accounting.energy", "requests", "a", "other"}:              3,
		{"gpuviz.accounting.energy", "requests", "other", "other"}:          4,
		{"gpuviz.accounting.energy", "requests", "unknown", "unknown"}:      5,
		{"gpuviz.accounting.energy", "idle", "idle", "idle"}:                0,
		{"gpuviz.accounting.energy", "unsampled", "unsampled", "unsampled"}: 0,
	}, filterMetric(d.acct, "gpuviz.accounting.energy"))
}

func filterMetric(points map[acctPoint]float64, metric string) map[acctPoint]float64 {
	out := map[acctPoint]float64{}
	for p, v := range points {
		if p.metric == metric {
			out[p] = v
		}
	}
	return out
}

// Counters never go back while a series stays; a series created after a
// flush starts at that flush; one without requests for idle_expiry is
// dropped and, when it comes back, starts again from 0 at the flush before
// (a reset to Prometheus); idle follows the books by what they added, and
// a book that starts over (a GPU forgotten and seen again: any of its
// totals lower) adds from 0.
func TestAccountingSeriesLifecycle(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	e := newEmitter(processortest.NewNopSettings(metadata.Type), cfg, nil, newGPUAnalysis(false, cfg.analysis()), base)
	key := timeline.Key{Host: "node-1", GPU: "GPU-a"}
	rec := func(tenant string, j float64, at time.Time) {
		e.record(requestRecord{keys: []timeline.Key{key}, model: "m", tenant: tenant, energy: j, energyKnown: true, gpuSeconds: j / 100, end: at}, at)
	}
	books := func(idle float64) []gpuBooks {
		b := gpuBooks{key: key}
		b.totals.Measured, b.totals.Idle, b.totals.IdleSeconds = 10*idle, idle, idle/100
		return []gpuBooks{b}
	}
	type point struct {
		value float64
		start pcommon.Timestamp
	}
	flush := func(at time.Time, gpus []gpuBooks) map[acctPoint]point {
		md := pmetric.NewMetrics()
		e.emit(md, at, gpus)
		out := map[acctPoint]point{}
		rms := md.ResourceMetrics()
		for i := range rms.Len() {
			ms := rms.At(i).ScopeMetrics().At(0).Metrics()
			for j := range ms.Len() {
				if m := ms.At(j); m.Name() == "gpuviz.accounting.energy" {
					for k := range m.Sum().DataPoints().Len() {
						dp := m.Sum().DataPoints().At(k)
						a := dp.Attributes()
						out[acctPoint{m.Name(), stringAttr(a, attrEnergyUse), stringAttr(a, attrModel), stringAttr(a, attrTenant)}] = point{dp.DoubleValue(), dp.StartTimestamp()}
					}
				}
			}
		}
		return out
	}
	ts := pcommon.NewTimestampFromTime
	a := acctPoint{"gpuviz.accounting.energy", "requests", "m", "unknown"}
	b := acctPoint{"gpuviz.accounting.energy", "requests", "m", "b"}
	idle := acctPoint{"gpuviz.accounting.energy", "idle", "idle", "idle"}

	rec("", 5, base)
	p := flush(base.Add(10*time.Second), books(100))
	assert.Equal(t, point{5, ts(base)}, p[a], "from the emitter's start")
	assert.Equal(t, point{100, ts(base)}, p[idle])
	rec("", 2, base.Add(15*time.Second))
	rec("b", 1, base.Add(15*time.Second))
	p = flush(base.Add(20*time.Second), books(150))
	assert.Equal(t, point{7, ts(base)}, p[a], "cumulative")
	assert.Equal(t, point{1, ts(base.Add(10 * time.Second))}, p[b], "starts at the flush before its first request")
	assert.Equal(t, point{150, ts(base)}, p[idle])
	// The book starts over (lower totals): its 30 J are new.
	p = flush(base.Add(30*time.Second), books(30))
	assert.Equal(t, point{180, ts(base)}, p[idle], "never back")
	// a idles past idle_expiry (10 minutes) while b goes on.
	rec("b", 1, base.Add(9*time.Minute))
	p = flush(base.Add(10*time.Minute+30*time.Second), books(30))
	assert.NotContains(t, p, a, "dropped")
	assert.Equal(t, point{2, ts(base.Add(10 * time.Second))}, p[b])
	rec("", 3, base.Add(11*time.Minute))
	p = flush(base.Add(11*time.Minute+10*time.Second), books(40))
	assert.Equal(t, point{3, ts(base.Add(10*time.Minute + 30*time.Second))}, p[a], "back from 0, at a new start")
	assert.Equal(t, point{190, ts(base)}, p[idle], "the host's idle stays while its GPU is in the books")
	// A new book that has already measured more than the old one, its idle
	// still less: new too.
	restarted := books(10)
	restarted[0].totals.Measured = 5000
	p = flush(base.Add(11*time.Minute+20*time.Second), restarted)
	assert.Equal(t, point{200, ts(base)}, p[idle], "never back")
	// The GPU gone from the books and no request for idle_expiry: the host goes.
	p = flush(base.Add(25*time.Minute), nil)
	assert.Empty(t, p)
}

// acctSeriesBytes, the per-series cost docs/attribution.md's bound is
// built on, is what a series takes: measured over many series of one host.
func TestAccountingSeriesBytes(t *testing.T) {
	const n = 20_000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%05d", i)
	}
	a := newAccounting(processortest.NewNopSettings(metadata.Type), time.Hour)
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	a.add("node-1", "m", "warm", 1, 1, base, 0) // the host's own
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, name := range names {
		a.add("node-1", "m", name, 1, 1, base, 0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perSeries := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f B a series", perSeries)
	// 92–128 B from 9,000 to 33,000 series, as the map's table fills.
	assert.Less(t, perSeries, float64(acctSeriesBytes), "update acctSeriesBytes and docs/attribution.md")
	assert.Greater(t, perSeries, float64(acctSeriesBytes)/3, "update acctSeriesBytes and docs/attribution.md")
	runtime.KeepAlive(a)
}

// A host's request series stay marked with its GPUs' backend in a flush
// in which its GPUs have no books (they come and go independently).
func TestRequestSeriesOfAHostWithoutBooksStayMarked(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	cfg := createDefaultConfig()
	e := newEmitter(processortest.NewNopSettings(metadata.Type), cfg, nil, newGPUAnalysis(false, cfg.analysis()), base)
	e.record(requestRecord{keys: []timeline.Key{{Host: "node-1", GPU: "GPU-a"}}, model: "m", energy: 5, energyKnown: true,
		gpuSeconds: 0.05, end: base, backend: "simulated"}, base)
	md := pmetric.NewMetrics()
	e.emit(md, base.Add(10*time.Second), nil)
	require.Equal(t, 1, md.ResourceMetrics().Len())
	res := md.ResourceMetrics().At(0).Resource().Attributes()
	assert.Equal(t, "node-1", stringAttr(res, "host.name"))
	assert.Equal(t, "simulated", stringAttr(res, "gpuviz.backend"), "simulated data stays marked")

	// Once the host's series expire, so does what the emitter knew of it.
	e.emit(pmetric.NewMetrics(), base.Add(cfg.Metrics.IdleExpiry+time.Minute), nil)
	assert.Empty(t, e.backends)
}

// A request's series count as used when the collector recorded it, not at
// the request's end: a host whose clock runs two minutes behind, under a
// one-minute idle_expiry, still has its requests charged (they were
// expired before their first flush).
func TestRequestSeriesOfAHostClockBehindAreCharged(t *testing.T) {
	collector := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	host := collector.Add(-2 * time.Minute) // the host's clock
	c, now, sink := virtualCore(t, func(cfg *Config) {
		cfg.Attribution.FinalizeAfter = 5 * time.Second
		cfg.Metrics.IdleExpiry = time.Minute
	})
	*now = collector.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, host, time.Second, repeat(busy, 21)))
	td := ptrace.NewTraces()
	vllmSpan(td, 1, host.Add(5*time.Second), 0.5, 0.5, 3, 50)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("host.name", "node-1")
	require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
	for step := range 8 {
		c.tick(collector.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	energies := spanEnergies(t, sink)
	require.Len(t, energies, 1)
	md := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), md, collector.Add(30*time.Second))
	d := readDerived(t, md)
	assert.InDelta(t, energies[1], d.sum("gpuviz.accounting.energy", "requests"), 1e-6)
	assert.InDelta(t, energies[1], d.energy["requests"], 1e-6, "as the books attributed")
}

// Once the arrival curve has learned (20 requests), spans of one settle
// group arriving one at a time in different orders must still get the
// same energies.
func TestOrderIndependenceOnceTheArrivalCurveLearned(t *testing.T) {
	for _, gpm := range []bool{true, false} {
		for _, training := range []int{24, 240} {
			t.Run(fmt.Sprint("gpm=", gpm, ",training=", training), func(t *testing.T) { orderOnceLearned(t, training, gpm) })
		}
	}
}

func orderOnceLearned(t *testing.T, training int, gpm bool) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	type shape struct{ start, prefill, decode float64 }
	shapes := []shape{{40, 0.3, 9}, {42, 0.2, 6}, {44, 0.5, 12}, {47, 0.3, 5}, {50, 0.4, 8}}
	run := func(order []int) map[byte]float64 {
		c, now, sink := virtualCore(t, nil)
		*now = base.Add(81 * time.Second)
		md := gpuMetrics("", "GPU-a", 0, base, time.Second, repeat(busy, 81))
		if !gpm {
			withoutGPM(md)
		}
		c.ingest.consume(context.Background(), md)
		// Short requests first, their own settle group: the curve learns.
		td := ptrace.NewTraces()
		for i := range training {
			vllmSpan(td, byte(100+i%150), base.Add(time.Duration(1+i)*time.Second/time.Duration(training/24)), 0, 0.1, 0.2, 5)
		}
		require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		for step := range 7 {
			c.tick(base.Add(81*time.Second + time.Duration(step)*time.Second))
		}
		for n, i := range order {
			s := shapes[i]
			one := ptrace.NewTraces()
			vllmSpan(one, byte(i+1), base.Add(time.Duration(s.start*float64(time.Second))), 0, s.prefill, s.decode, int64(20+30*i))
			*now = base.Add(88*time.Second + time.Duration(n)*time.Second) // within the 5 s window
			require.NoError(t, c.consumeTraces(context.Background(), one, sink, started))
		}
		for step := range 8 {
			c.tick(base.Add(93*time.Second + time.Duration(step)*time.Second))
		}
		return spanEnergies(t, sink)
	}
	want := run([]int{0, 1, 2, 3, 4})
	worst := 0.0
	for _, order := range [][]int{{4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}} {
		got := run(order)
		for id := byte(1); id <= byte(len(shapes)); id++ {
			rel := (got[id] - want[id]) / want[id]
			worst = max(worst, math.Abs(rel))
		}
	}
	assert.Less(t, worst, 1e-9, "energies depend on the order of arrival within the settle window")
}

// withoutGPM drops the tensor and DRAM activity: a GPU before Hopper.
func withoutGPM(md pmetric.Metrics) {
	ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	ms.RemoveIf(func(m pmetric.Metric) bool {
		return m.Name() == "nvidia.gpu.tensor.activity" || m.Name() == "nvidia.gpu.dram.activity"
	})
}
