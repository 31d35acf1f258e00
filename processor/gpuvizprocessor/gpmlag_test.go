package gpuvizprocessor

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadatatest"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// feedGPMLag gives a gpmLag power samples every 20 ms and activity readings
// every tick over seconds, from a workload that switches between busy
// (tensor 0.9, 650 W) and idle (0, 120 W) at the edges (seconds), the
// readings describing it lag earlier than their stamps; noise W of jitter
// on the power.
func feedGPMLag(l *gpmLag, seconds float64, edges []float64, tick, lag time.Duration, noise float64) {
	t0 := time.Unix(1_700_000_000, 0)
	busyAt := func(s float64) float64 { // the busy share of [s-dt, s]
		busy := 0.0
		for i, e := range edges {
			if s > e {
				busy = float64(1 - i%2)
			}
		}
		return busy
	}
	mean := func(from, to float64) float64 {
		const dt = 0.001
		var sum float64
		n := 0
		for s := from + dt; s <= to+1e-9; s += dt {
			sum += busyAt(s)
			n++
		}
		return sum / float64(n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ticks := tick.Seconds()
	next := ticks
	for s := 0.02; s <= seconds; s += 0.02 {
		l.sampled(t0.Add(time.Duration(s*float64(time.Second))), 120+530*mean(s-0.02, s)+noise*rng.NormFloat64())
		for next <= s+1e-9 {
			described := next - lag.Seconds()
			b := mean(described-ticks, described)
			at := t0.Add(time.Duration(next * float64(time.Second)))
			l.read(gpmTensor, at, 0.9*b)
			l.read(gpmDRAM, at, 0.2+0.1*b)
			l.read(gpmSM, at, 0.95*b)
			next += ticks
		}
		l.learn()
	}
}

func TestGPMLagLearnsFromPowerEdges(t *testing.T) {
	// Edges 3 s apart, off the tick grid.
	var edges []float64
	for e := 2.13; e < 40; e += 3.07 {
		edges = append(edges, e)
	}
	for _, tc := range []struct {
		name      string
		tick, lag time.Duration
		noise     float64
		edges     []float64
		want      time.Duration // within 15 ms
	}{
		{"the H200's lag at 250 ms", 250 * time.Millisecond, 105 * time.Millisecond, 5, edges, 105 * time.Millisecond},
		{"no lag", 250 * time.Millisecond, 0, 5, edges, 0},
		{"a 1 s tick", time.Second, 60 * time.Millisecond, 5, edges, 60 * time.Millisecond},
		{"100 ms ticks", 100 * time.Millisecond, 150 * time.Millisecond, 5, edges, 150 * time.Millisecond},
		{"two edges are not enough", 250 * time.Millisecond, 105 * time.Millisecond, 5, edges[:2], 0},
		{"no edges: steady load", 250 * time.Millisecond, 105 * time.Millisecond, 5, []float64{0.5}, 0},
		{"power too noisy to hold a level", 250 * time.Millisecond, 105 * time.Millisecond, 150, edges, 0},
		{"a lag beyond belief is not taken", 250 * time.Millisecond, 450 * time.Millisecond, 5, edges, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l gpmLag
			feedGPMLag(&l, 42, tc.edges, tc.tick, tc.lag, tc.noise)
			assert.InDelta(t, float64(tc.want), float64(l.lag), float64(15*time.Millisecond), "learned %v from %d edges", l.lag, l.n)
			base := time.Unix(1_700_000_000, 0)
			assert.Equal(t, base.Add(-l.lag), l.stamp(base))
		})
	}
}

// What a GPU's lag keeps is bounded: gpmLagKeep of samples and readings,
// at most gpmLagPoints of each, whatever the rate.
func TestGPMLagStaysBounded(t *testing.T) {
	var l gpmLag
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 20_000 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		l.sampled(at, float64(i%7))
		l.read(gpmTensor, at, 0.5)
		l.learn()
	}
	assert.LessOrEqual(t, len(l.power), gpmLagPoints)
	assert.LessOrEqual(t, len(l.activity[gpmTensor]), gpmLagPoints)
	assert.GreaterOrEqual(t, l.power[0].t, t0.Add(20*time.Second-gpmLagKeep).UnixNano()-1)
}

// The processor reports each GPU's learned lag in its telemetry, for the
// GPUs that send power samples or learned it from the spans, so an
// operator sees what it moves GPM by.
func TestGPMLagIsReported(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	c, _, _ := virtualCoreWith(t, metadatatest.NewSettings(tel), nil)
	c.ingest.mu.Lock()
	sampled := c.ingest.state(timeline.Key{Host: "node-1", GPU: "GPU-a"})
	sampled.powerSamplesAt, sampled.gpm.lag = 1, 105*time.Millisecond
	c.ingest.state(timeline.Key{Host: "node-1", GPU: "GPU-b"}) // no power samples: no lag to learn
	fromSpans := c.ingest.state(timeline.Key{Host: "node-1", GPU: "GPU-c"})
	fromSpans.gpm.prefills.ok, fromSpans.gpm.lag = true, 80*time.Millisecond
	c.ingest.mu.Unlock()
	metadatatest.AssertEqualProcessorGpuvizGpmLag(t, tel, []metricdata.DataPoint[float64]{
		{Attributes: attribute.NewSet(attribute.String("hw.id", "GPU-a")), Value: 0.105},
		{Attributes: attribute.NewSet(attribute.String("hw.id", "GPU-c")), Value: 0.08},
	}, metricdatatest.IgnoreTimestamp())
}

// FuzzGPMLag feeds a GPU's lag any sequence of power samples, activity
// readings and spans' prefills (times out of order, repeated or far
// apart; values NaN, infinite, negative): nothing panics, the lag stays
// within what is believed, and what is kept stays sorted and bounded.
func FuzzGPMLag(f *testing.F) {
	f.Add([]byte{0, 20, 100, 1, 250, 90, 4, 0, 0, 0, 20, 10, 2, 0, 50})
	f.Add([]byte{0, 255, 255, 3, 0, 0, 0, 1, 7, 4, 4, 4})
	f.Fuzz(func(t *testing.T, events []byte) {
		var l gpmLag
		at := int64(1_700_000_000) * int64(time.Second)
		values := []float64{0, 0.5, 1, 120, 650, -1, math.NaN(), math.Inf(1), math.Inf(-1), 1e300}
		for i := 0; i+2 < len(events); i += 3 {
			// Steps of -1.27 s to +1.28 s in 10 ms.
			at += (int64(events[i+1]) - 127) * int64(10*time.Millisecond)
			v := values[int(events[i+2])%len(values)]
			ts := time.Unix(0, at)
			switch events[i] % 6 {
			case 0:
				l.sampled(ts, 100+v*500)
			case 1, 2, 3:
				l.read(int(events[i]%6)-1, ts, v)
			case 4:
				l.learn()
			case 5: // a prefill ending at ts, as long as the next step
				l.prefills.prefilled(spreadPrefill(at-int64(events[i+1])*int64(time.Millisecond), at, v*1000, nil))
			}
		}
		l.learn()
		require.GreaterOrEqual(t, l.lag, time.Duration(0))
		require.LessOrEqual(t, l.lag, gpmLagMax)
		require.LessOrEqual(t, len(l.prefills.tokens), prefillCells)
		for _, points := range [][]gpmPoint{l.power, l.activity[gpmTensor], l.activity[gpmDRAM], l.activity[gpmSM], l.prefills.readings} {
			require.LessOrEqual(t, len(points), gpmLagPoints)
			require.True(t, slices.IsSortedFunc(points, func(a, b gpmPoint) int { return cmp.Compare(a.t, b.t) }))
		}
	})
}

// Edges that read the readings a little ahead of power (stamp jitter: a
// lag of -30 ms, within what is believed of one edge) still count, and
// give a lag of 0: never a negative one, which would stamp readings later
// than the tick that took them.
func TestGPMLagIsNeverNegative(t *testing.T) {
	var edges []float64
	for e := 2.13; e < 40; e += 3.07 {
		edges = append(edges, e)
	}
	var l gpmLag
	feedGPMLag(&l, 42, edges, 250*time.Millisecond, -30*time.Millisecond, 5)
	assert.True(t, l.fromEdges, "the edges agree, read from %d", l.n)
	assert.Equal(t, time.Duration(0), l.lag)
}

// Once the power edges agree, their lag stands: the readings after it are
// stamped back by the edges' lag, not the one the spans' prefills read.
func TestGPMLagFromEdgesOutranksTheSpans(t *testing.T) {
	var edges []float64
	for e := 2.13; e < 40; e += 3.07 {
		edges = append(edges, e)
	}
	var l gpmLag
	servePrefillsFrom(&l.prefills, int64(1_699_999_000)*int64(time.Second), 5, 250*time.Millisecond, 40*time.Millisecond, true, 1)
	require.True(t, l.prefills.ok)
	feedGPMLag(&l, 42, edges, 250*time.Millisecond, 105*time.Millisecond, 5)
	require.True(t, l.fromEdges)
	// The next batch's readings, before its power samples are learned from.
	at := time.Unix(1_700_000_042, 250_000_000)
	l.read(gpmTensor, at, 0.5)
	assert.InDelta(t, float64(105*time.Millisecond), float64(l.lag), float64(15*time.Millisecond), "read %v", l.lag)
	assert.Equal(t, at.Add(-l.lag), l.stamp(at))
}

// Once the edges' lag stands, the spans' prefills and the tensor readings
// are no longer fed to the prefills' lag: nothing reads it again, and its
// correlation costs a span's prefill a pass per GPU.
func TestGPMLagFromEdgesStopsFeedingThePrefills(t *testing.T) {
	in := newIngest(nil, nil, telemetry{}, createDefaultConfig(), time.Now)
	keys := []timeline.Key{{Host: "node", GPU: "edges"}, {Host: "node", GPU: "prefills"}}
	t0 := int64(1_700_000_000) * int64(time.Second)
	for _, k := range keys {
		in.state(k).gpm.read(gpmTensor, time.Unix(0, t0), 0.5)
	}
	edges := in.state(keys[0])
	edges.gpm.fromEdges = true
	in.prefilled([]prefill{{keys: keys, start: t0 - int64(time.Second), end: t0 - int64(800*time.Millisecond), tokens: 2000}})
	assert.True(t, edges.gpm.prefills.tokens == nil, "a GPU whose edges agree")
	assert.True(t, in.state(keys[1]).gpm.prefills.tokens != nil, "a GPU still reading the prefills")
	edges.gpm.read(gpmTensor, time.Unix(0, t0+int64(250*time.Millisecond)), 0.6)
	assert.Len(t, edges.gpm.prefills.readings, 1, "readings after the edges agree")
	assert.Equal(t, 0.6, edges.gpm.activity[gpmTensor][1].v, "the edges still read it")
}

// An edge is placed within the power sample it falls in by that sample's
// mean (the share of its stretch at the new level, at the stretch's
// end): edges anywhere within their 20 ms samples read the lag within
// 5 ms.
func TestGPMLagPlacesEdgesWithinTheirSample(t *testing.T) {
	var edges []float64
	for e := 2.121; e < 40; e += 3.083 { // 0.15 of a sample further on each time
		edges = append(edges, e)
	}
	for _, lag := range []time.Duration{105 * time.Millisecond, 60 * time.Millisecond} {
		var l gpmLag
		feedGPMLag(&l, 42, edges, 250*time.Millisecond, lag, 5)
		require.True(t, l.fromEdges)
		assert.InDelta(t, float64(lag), float64(l.lag), float64(5*time.Millisecond), "learned %v from %d edges", l.lag, l.n)
	}
}
