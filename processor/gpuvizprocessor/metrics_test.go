package gpuvizprocessor

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// throttleBatch is one GPU's nvidia.gpu.throttle.time points (and
// throttle.active flags, when active is set) at the given offsets from t0,
// each reason's later by skew: cumulative seconds per reason.
func throttleBatch(t0 time.Time, at []time.Duration, totals map[string][]float64, active map[string]int64, skew ...map[string]time.Duration) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("host.name", "node-1")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	sum := ms.AppendEmpty()
	sum.SetName("nvidia.gpu.throttle.time")
	dps := sum.SetEmptySum().DataPoints()
	for reason, vs := range totals {
		for i, v := range vs {
			dp := dps.AppendEmpty()
			var late time.Duration
			if len(skew) > 0 {
				late = skew[0][reason]
			}
			dp.SetTimestamp(pcommon.NewTimestampFromTime(t0.Add(at[i] + late)))
			dp.SetDoubleValue(v)
			dp.Attributes().PutStr("hw.id", "GPU-0")
			dp.Attributes().PutStr("nvidia.gpu.throttle.reason", reason)
		}
	}
	if active != nil {
		g := ms.AppendEmpty()
		g.SetName("nvidia.gpu.throttle.active")
		for reason, v := range active {
			dp := g.SetEmptyGauge().DataPoints().AppendEmpty()
			dp.SetTimestamp(pcommon.NewTimestampFromTime(t0.Add(at[len(at)-1])))
			dp.SetIntValue(v)
			dp.Attributes().PutStr("hw.id", "GPU-0")
			dp.Attributes().PutStr("nvidia.gpu.throttle.reason", reason)
		}
	}
	return md
}

func TestThrottleTimesBecomeMeasuredShares(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0) // in the past: a point stamped past the clock is refused
	ticks := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}
	for name, tc := range map[string]struct {
		totals         map[string][]float64
		skew           map[string]time.Duration
		power, thermal []float64 // shares of the intervals ending at ticks[1:]
	}{
		"power cap for 200 ms of one tick": {
			totals: map[string][]float64{"sw_power_cap": {10, 10, 10.2, 10.2}, "sw_thermal_slowdown": {3, 3, 3, 3}},
			power:  []float64{0, 0.8, 0}, thermal: []float64{0, 0, 0},
		},
		"power reasons add up, capped at the whole interval": {
			totals: map[string][]float64{"sw_power_cap": {0, 0.2, 0.45, 0.45}, "hw_power_brake": {0, 0.1, 0.2, 0.2}},
			power:  []float64{1, 1, 0},
		},
		"the reasons of one reading, µs apart, are measured once": {
			totals: map[string][]float64{"sw_power_cap": {0, 0.1, 0.1, 0.1}, "hw_power_brake": {0, 0.05, 0.05, 0.05}},
			skew:   map[string]time.Duration{"hw_power_brake": 3 * time.Microsecond},
			power:  []float64{0.6, 0, 0},
		},
		"thermal slowdown, sync boost ignored": {
			totals:  map[string][]float64{"hw_thermal_slowdown": {5, 5.05, 5.3, 5.55}, "sync_boost": {0, 0.25, 0.5, 0.75}},
			thermal: []float64{0.2, 1, 1},
		},
		"a driver reload resets the counters: the interval across it takes the next share": {
			totals: map[string][]float64{"sw_power_cap": {50, 50.1, 0.05, 0.1}},
			power:  []float64{0.4, 0.2, 0.2},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newTestCore(t)
			c.ingest.consume(context.Background(), throttleBatch(t0, ticks, tc.totals, nil, tc.skew))
			k := timeline.Key{Host: "node-1", GPU: "GPU-0"}
			assert.Equal(t, tc.power, signalValues(c, k, timeline.PowerThrottled, t0, ticks))
			assert.Equal(t, tc.thermal, signalValues(c, k, timeline.ThermalThrottled, t0, ticks))
		})
	}
}

// Shares do not depend on batches arriving in order: a late batch with
// older throttle times changes nothing already measured.
func TestLateThrottleTimesChangeNothing(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0) // in the past: a point stamped past the clock is refused
	ticks := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}
	c := newTestCore(t)
	k := timeline.Key{Host: "node-1", GPU: "GPU-0"}
	c.ingest.consume(context.Background(), throttleBatch(t0, ticks[2:], map[string][]float64{"sw_power_cap": {10.2, 10.4}}, nil))
	c.ingest.consume(context.Background(), throttleBatch(t0, ticks[:2], map[string][]float64{"sw_power_cap": {10, 10.1}}, nil))
	c.ingest.consume(context.Background(), throttleBatch(t0, []time.Duration{time.Second}, map[string][]float64{"sw_power_cap": {10.45}}, nil))
	got := signalValues(c, k, timeline.PowerThrottled, t0, append(ticks[2:], time.Second))
	assert.Equal(t, []float64{0.8, 0.2}, got)
}

func TestMeasuredSharesReplaceTheFlags(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0) // in the past: a point stamped past the clock is refused
	c := newTestCore(t)
	k := timeline.Key{Host: "node-1", GPU: "GPU-0"}
	// Flags alone, a scrape a second: the flag of the moment is all there is.
	c.ingest.consume(context.Background(), throttleBatch(t0, []time.Duration{0}, nil, map[string]int64{"sw_power_cap": 1}))
	c.ingest.consume(context.Background(), throttleBatch(t0, []time.Duration{time.Second}, nil, map[string]int64{"sw_power_cap": 1}))
	flags := []time.Duration{0, time.Second}
	assert.Equal(t, []float64{1}, signalValues(c, k, timeline.PowerThrottled, t0, flags))
	// Then throttle times too: the flag at the last tick is dropped.
	at := []time.Duration{2 * time.Second, 2250 * time.Millisecond}
	c.ingest.consume(context.Background(), throttleBatch(t0, at, map[string][]float64{"sw_power_cap": {1, 1.05}}, map[string]int64{"sw_power_cap": 1}))
	assert.Equal(t, []float64{0.2}, signalValues(c, k, timeline.PowerThrottled, t0, at))
}

func newTestCore(t *testing.T) *core {
	t.Helper()
	fac := &factory{cores: map[*Config]*core{}}
	c, err := fac.coreFor(processortest.NewNopSettings(metadata.Type), createDefaultConfig())
	require.NoError(t, err)
	return c
}

// signalValues are a signal's time-weighted means over the intervals
// between consecutive ticks (offsets from t0), nil when it covers none.
func signalValues(c *core, k timeline.Key, sig timeline.Signal, t0 time.Time, ticks []time.Duration) []float64 {
	var out []float64
	for i := 1; i < len(ticks); i++ {
		st := c.spans.store.Window(k, t0.Add(ticks[i-1]), t0.Add(ticks[i])).Stats[sig]
		if st.Seconds > 0 {
			out = append(out, math.Round(st.Mean*1e4)/1e4) // µs of skew are below this
		}
	}
	return out
}

// gpuSums are the points of the cumulative sum name, by hw.id and the
// point's other attributes.
func gpuSums(md pmetric.Metrics, name string) map[string]pmetric.NumberDataPoint {
	out := map[string]pmetric.NumberDataPoint{}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if ms.At(j).Name() != name {
				continue
			}
			dps := ms.At(j).Sum().DataPoints()
			for d := range dps.Len() {
				out[fmt.Sprint(dps.At(d).Attributes().AsRaw())] = dps.At(d)
			}
		}
	}
	return out
}

// A GPU forgotten when quiet (history.retention) and seen again has new
// books from 0: its cumulative series start again at the flush before, as
// a reset must, rather than fall under their first start time.
func TestAGPUSeenAgainRestartsItsSeries(t *testing.T) {
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	c, now, _ := virtualCore(t, func(cfg *Config) { cfg.Attribution.FinalizeAfter = 5 * time.Second })
	*now = base.Add(81 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, base, time.Second, repeat(busy, 81)))
	for step := range 5 {
		c.tick(base.Add(81*time.Second + time.Duration(step)*time.Second))
	}
	first := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), first, base.Add(90*time.Second))

	later := base.Add(15 * time.Minute)
	*now = later
	c.tick(later)
	require.Zero(t, c.spans.store.Len(), "forgotten")
	*now = later.Add(21 * time.Second)
	c.ingest.consume(context.Background(), gpuMetrics("node-1", "GPU-a", 0, later, time.Second, repeat(busy, 21)))
	for step := range 5 {
		c.tick(later.Add(21*time.Second + time.Duration(step)*time.Second))
	}
	second := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), second, later.Add(30*time.Second))
	for _, name := range []string{"gpuviz.gpu.energy", "gpuviz.gpu.bottleneck.time"} {
		before, after := gpuSums(first, name), gpuSums(second, name)
		require.NotEmpty(t, before, name)
		for k, p1 := range before {
			p2, ok := after[k]
			require.True(t, ok, "%s %s", name, k)
			assert.Equal(t, p1.Timestamp(), p2.StartTimestamp(), "%s %s: starts again at the flush before", name, k)
			assert.NotEqual(t, p1.StartTimestamp(), p2.StartTimestamp(), "%s %s", name, k)
		}
	}
	// A third flush keeps the new start.
	third := pmetric.NewMetrics()
	c.flushMetrics(context.Background(), third, later.Add(40*time.Second))
	for k, p := range gpuSums(third, "gpuviz.gpu.energy") {
		assert.Equal(t, gpuSums(second, "gpuviz.gpu.energy")[k].StartTimestamp(), p.StartTimestamp(), k)
	}
}
