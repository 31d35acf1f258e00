package gpuvizprocessor

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// servePrefills plays minutes of serving to a prefillLag: prompts of 100 to
// 4,000 tokens prefilled at random, each in 20 to 120 ms, its span coming
// 0.5 to 10 s after it; a tensor reading every tick shows the prefills
// running lag before it (related: false, a GPU that does something else)
// over a decode floor, with noise.
func servePrefills(l *prefillLag, minutes float64, tick, lag time.Duration, related bool, seed uint64) {
	servePrefillsFrom(l, int64(1_700_000_000)*int64(time.Second), minutes, tick, lag, related, seed)
}

// servePrefillsFrom is servePrefills from t0 (Unix ns).
func servePrefillsFrom(l *prefillLag, t0 int64, minutes float64, tick, lag time.Duration, related bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	end := t0 + int64(minutes*float64(time.Minute))
	type window struct {
		start, end int64
		tokens     float64
		arrives    int64
	}
	var ws []window
	for t := t0; t < end; {
		d := int64(20+rng.IntN(100)) * int64(time.Millisecond)
		ws = append(ws, window{t, t + d, float64(100 + rng.IntN(3900)), t + d + int64(500+rng.IntN(9500))*int64(time.Millisecond)})
		t += d + int64(rng.ExpFloat64()*float64(300*time.Millisecond))
	}
	busy := func(a, b int64) float64 {
		return prefillingShare(a, b, len(ws), func(i int) (int64, int64) { return ws[i].start, ws[i].end })
	}
	next := 0 // the next span to come, in the order they come
	byArrival := make([]int, len(ws))
	for i := range byArrival {
		byArrival[i] = i
	}
	slices.SortFunc(byArrival, func(i, j int) int { return cmp.Compare(ws[i].arrives, ws[j].arrives) })
	for t := t0 + int64(tick); t < end; t += int64(tick) {
		for ; next < len(byArrival) && ws[byArrival[next]].arrives <= t; next++ {
			w := ws[byArrival[next]]
			l.prefilled(spreadPrefill(w.start, w.end, w.tokens, nil))
		}
		v := 0.1 + 0.02*rng.NormFloat64()
		if related {
			v += 0.8 * busy(t-int64(tick)-int64(lag), t-int64(lag))
		} else {
			v += 0.8 * rng.Float64()
		}
		l.read(t, v)
	}
}

// prefillingShare is the share of [a, b) (Unix ns) that n prefill
// windows, window(i) each, cover.
func prefillingShare(a, b int64, n int, window func(i int) (start, end int64)) float64 {
	var s int64
	for i := range n {
		start, end := window(i)
		s += max(0, min(b, end)-max(a, start))
	}
	return float64(s) / float64(b-a)
}

func TestPrefillLagReadsTheLagFromTheSpans(t *testing.T) {
	for _, tc := range []struct {
		tick, lag time.Duration
		minutes   float64 // enough for prefillMinReadings and the settling
	}{
		{250 * time.Millisecond, 80 * time.Millisecond, 5},
		{250 * time.Millisecond, 0, 5},
		{100 * time.Millisecond, 115 * time.Millisecond, 3},
		{time.Second, 60 * time.Millisecond, 18},
	} {
		t.Run(tc.tick.String()+"/"+tc.lag.String(), func(t *testing.T) {
			var l prefillLag
			servePrefills(&l, tc.minutes, tc.tick, tc.lag, true, 1)
			require.True(t, l.ok, "read %v readings", l.cur.n+l.prev.n)
			assert.InDelta(t, tc.lag, l.lag, float64(10*time.Millisecond))
		})
	}
}

func TestPrefillLagTakesNothingUnrelated(t *testing.T) {
	var l prefillLag
	servePrefills(&l, 8, 250*time.Millisecond, 80*time.Millisecond, false, 2)
	assert.Greater(t, l.cur.n+l.prev.n, float64(prefillMinReadings))
	assert.False(t, l.ok, "tensor activity that does not follow the prefills says no lag")
}

// One prefill whose tokens are far out of line with its time (a long
// prompt the prefix cache served: vLLM counts the cached tokens in
// prompt_tokens) outweighs every other reading in the sums; they forget
// it after two epochs and the lag is read again.
func TestPrefillLagForgetsAPrefillFarOutOfLine(t *testing.T) {
	var l prefillLag
	servePrefills(&l, 0.5, 250*time.Millisecond, 80*time.Millisecond, true, 4)
	last := l.readings[len(l.readings)-1].t
	l.prefilled(spreadPrefill(last-int64(2*time.Second), last-int64(1950*time.Millisecond), 1e6, nil))
	servePrefillsFrom(&l, last, 24, 250*time.Millisecond, 80*time.Millisecond, true, 5)
	require.True(t, l.ok, "read %v readings", l.cur.n+l.prev.n)
	assert.InDelta(t, 80*time.Millisecond, l.lag, float64(10*time.Millisecond))
}

func TestPrefillLagWaitsForEnoughReadings(t *testing.T) {
	var l prefillLag
	servePrefills(&l, 1, 250*time.Millisecond, 80*time.Millisecond, true, 3)
	assert.False(t, l.ok, "%v readings are too few", l.cur.n+l.prev.n)
}

// BenchmarkIngestPrefilled is what the GPM lag's feed costs a span: a
// loadgen-like prefill (225 ms, 2,250 tokens) on a host's 8 GPUs, in
// batches of 512 spans.
func BenchmarkIngestPrefilled(b *testing.B) {
	in := newIngest(nil, nil, telemetry{}, createDefaultConfig(), time.Now)
	keys := make([]timeline.Key, 8)
	t0 := int64(1_700_000_000) * int64(time.Second)
	for i := range keys {
		keys[i] = timeline.Key{Host: "node", GPU: string(rune('a' + i))}
		in.state(keys[i]).gpm.prefills.read(t0, 0.5)
	}
	ps := make([]prefill, 512)
	b.ResetTimer()
	for n := 0; n < b.N; n += len(ps) {
		for i := range ps {
			at := t0 + int64(i)*int64(time.Millisecond)
			ps[i] = prefill{keys: keys, start: at, end: at + int64(225*time.Millisecond), tokens: 2250}
		}
		in.prefilled(ps)
	}
}

// Through the core: the prefills of the spans it takes reach their GPU's
// lag, which learns the GPU's GPM lag without power samples and stamps the
// readings after it back.
func TestGPMLagIsLearnedFromTheSpansPrefills(t *testing.T) {
	const lag = 80 * time.Millisecond
	c, now, sink := virtualCore(t, nil)
	base := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(5, 6))
	type request struct{ start, prefillStart time.Time }
	var reqs []request
	for at := base.Add(time.Second); at.Before(base.Add(3 * time.Minute)); at = at.Add(time.Duration(50+rng.IntN(500)) * time.Millisecond) {
		reqs = append(reqs, request{at, at.Add(10 * time.Millisecond)})
	}
	const prefill = 50 * time.Millisecond
	busy := func(from, to time.Time) float64 {
		return prefillingShare(from.UnixNano(), to.UnixNano(), len(reqs), func(i int) (int64, int64) {
			return reqs[i].prefillStart.UnixNano(), reqs[i].prefillStart.Add(prefill).UnixNano()
		})
	}
	const tick = 250 * time.Millisecond
	next := 0
	for s := 1; s <= 180; s++ {
		from := base.Add(time.Duration(s-1) * time.Second)
		samples := make([]sample, 4)
		for i := range samples {
			at := from.Add(time.Duration(i) * tick)
			samples[i] = sample{util: 0.9, tensor: 0.1 + 0.8*busy(at.Add(-tick-lag), at.Add(-lag)), dram: 0.5, powerW: 400, memUsed: 40e9}
		}
		*now = from.Add(time.Second)
		c.ingest.consume(context.Background(), gpuMetrics("", "GPU-a", 0, from, tick, samples))
		td := ptrace.NewTraces()
		for ; next < len(reqs) && reqs[next].start.Add(600*time.Millisecond).Before(*now); next++ {
			vllmSpan(td, byte(next), reqs[next].start, 0.01, prefill.Seconds(), 0.54, 30)
		}
		if td.SpanCount() > 0 {
			require.NoError(t, c.consumeTraces(context.Background(), td, sink, started))
		}
	}
	c.ingest.mu.Lock()
	defer c.ingest.mu.Unlock()
	g := c.ingest.gpus[timeline.Key{GPU: "GPU-a"}]
	require.NotNil(t, g)
	require.True(t, g.gpm.prefills.ok, "read %v readings", g.gpm.prefills.cur.n+g.gpm.prefills.prev.n)
	assert.InDelta(t, float64(lag), float64(g.gpm.lag), float64(10*time.Millisecond), "learned %v", g.gpm.lag)
	assert.False(t, g.gpm.fromEdges)
}
