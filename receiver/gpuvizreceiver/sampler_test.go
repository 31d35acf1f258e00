package gpuvizreceiver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadatatest"
)

// virtualClock is a clock tests move by hand.
type virtualClock struct{ ns atomic.Int64 }

func newVirtualClock(t time.Time) *virtualClock {
	c := &virtualClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *virtualClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *virtualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// startDriven starts a Driven reading lib on clock.
func startDriven(t *testing.T, cfg *Config, lib nvml.Interface, backend Backend, clock *virtualClock) *Driven {
	t.Helper()
	d := NewDriven(cfg, receivertest.NewNopSettings(metadata.Type), lib, backend, clock.now)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Shutdown(context.Background())) })
	return d
}

// driveSimulated runs cfg's simulated server on a virtual clock through
// scrapes one collection interval apart, ticking in between, and returns
// every batch the receiver would have handed on.
func driveSimulated(t *testing.T, cfg *Config, scrapes, ticksPerScrape int) []pmetric.Metrics {
	t.Helper()
	clock := newVirtualClock(time.Now())
	sim := cfg.Simulated
	lib, err := nvmlsim.New(sim.Model, sim.GPUs, sim.Seed, clock.now, nvmlsim.WithScenario(sim.Scenario))
	require.NoError(t, err)
	require.Equal(t, nvml.SUCCESS, lib.Init())
	d := startDriven(t, cfg, lib, BackendSimulated, clock)
	var out []pmetric.Metrics
	for range scrapes {
		m, err := d.Scrape(context.Background())
		require.NoError(t, err)
		out = append(out, m)
		for range ticksPerScrape {
			clock.advance(cfg.Samples.Interval)
			if m, ok := d.Tick(); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// liveSampler is a started sampler over the fixture, with a clock the test
// ticks and the pipeline next.
type liveSampler struct {
	sp    *sampler
	s     *gpuScraper
	ticks chan time.Time
	tel   *componenttest.Telemetry
	at    time.Time
}

func startSampler(t *testing.T, cfg *Config, lib nvml.Interface, next consumer.Metrics) *liveSampler {
	t.Helper()
	s := startScraper(t, cfg, lib, BackendNVML)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	sp, err := newSampler(s, metadatatest.NewSettings(tel), next)
	require.NoError(t, err)
	ls := &liveSampler{sp: sp, s: s, ticks: make(chan time.Time), tel: tel, at: time.Now()}
	sp.ticks = func(time.Duration) (<-chan time.Time, func()) { return ls.ticks, func() {} }
	sp.wait = 200 * time.Millisecond
	sp.start()
	return ls
}

// tick sends the next tick, one interval after the previous.
func (ls *liveSampler) tick() {
	ls.at = ls.at.Add(ls.sp.cfg.Interval)
	ls.ticks <- ls.at
}

// outcomes are the receiver_gpuviz_ticks counts by outcome.
func (ls *liveSampler) outcomes(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := ls.tel.GetMetric("otelcol_receiver_gpuviz_ticks")
	if err != nil {
		return out // nothing counted yet
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		o, _ := dp.Attributes.Value("outcome")
		out[o.AsString()] = dp.Value
	}
	return out
}

// seriesPoints returns, per series (metric and attributes), the timestamps
// of its points across batches, in arrival order.
func seriesPoints(batches []pmetric.Metrics) map[string][]pcommon.Timestamp {
	out := map[string][]pcommon.Timestamp{}
	for _, m := range batches {
		forEachPointTS(m, func(metric string, attrs map[string]any, ts pcommon.Timestamp, _ float64) {
			k := fmt.Sprint(metric, attrs)
			out[k] = append(out[k], ts)
		})
	}
	return out
}

func forEachPointTS(m pmetric.Metrics, f func(metric string, attrs map[string]any, ts pcommon.Timestamp, v float64)) {
	rms := m.ResourceMetrics()
	for i := range rms.Len() {
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				metric := ms.At(k)
				var dps pmetric.NumberDataPointSlice
				switch metric.Type() {
				case pmetric.MetricTypeGauge:
					dps = metric.Gauge().DataPoints()
				case pmetric.MetricTypeSum:
					dps = metric.Sum().DataPoints()
				default:
					continue
				}
				for l := range dps.Len() {
					dp := dps.At(l)
					v := dp.DoubleValue()
					if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
						v = float64(dp.IntValue())
					}
					f(metric.Name(), dp.Attributes().AsRaw(), dp.Timestamp(), v)
				}
			}
		}
	}
}

// assertStrictlyIncreasing checks that no series has a point twice or out
// of order, across the batches it was handed on in.
func assertStrictlyIncreasing(t *testing.T, series map[string][]pcommon.Timestamp) {
	t.Helper()
	for k, ts := range series {
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Errorf("%s: point %d at %d after %d: duplicated or out of order", k, i, ts[i], ts[i-1])
			}
		}
	}
}

func TestSamplerHandsOnEveryTickOnce(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	ls := startSampler(t, defaultConfig(), fixtureServer(2), sink)
	first := ls.at
	const ticks = 9
	gpus := int64(len(ls.s.gpus))
	for n := range int64(ticks) {
		ls.tick()
		// Let the workers answer: a tick that finds its GPU still busy is
		// a miss, which is another test's subject.
		require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == (n+1)*gpus }, 5*time.Second, time.Millisecond)
	}
	require.GreaterOrEqual(t, len(sink.AllMetrics()), 1, "flushes every 4 ticks, before the shutdown's")
	require.NoError(t, ls.sp.shutdown(context.Background()))

	series := seriesPoints(sink.AllMetrics())
	assertStrictlyIncreasing(t, series)
	for i, md := range sink.AllMetrics() {
		// The GPUs' builders are merged: one resource, one scope, each
		// metric once, as the scrape hands on.
		require.Equal(t, 1, md.ResourceMetrics().Len(), "batch %d", i)
		require.Equal(t, 1, md.ResourceMetrics().At(0).ScopeMetrics().Len(), "batch %d", i)
		seen := map[string]bool{}
		for _, m := range md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().All() {
			assert.False(t, seen[m.Name()], "batch %d has %s twice", i, m.Name())
			seen[m.Name()] = true
		}
	}
	energy := pointsOf(joinBatches(sink.AllMetrics()), "hw.energy", nil)
	tensor := pointsOf(joinBatches(sink.AllMetrics()), "nvidia.gpu.tensor.activity", nil)
	for _, g := range ls.s.gpus {
		assert.Len(t, energy[g.id], ticks/4, "an energy point every flush tick (each 4th)")
		// The fixture's GPM never changes: one run, from the first interval
		// (ending at tick 2) to the last tick, with its latest point in
		// every hand-on.
		require.NotEmpty(t, tensor[g.id])
		at := pointTimes(sink.AllMetrics(), "nvidia.gpu.tensor.activity", g.id)
		assert.Equal(t, pcommon.NewTimestampFromTime(first.Add(2*ls.sp.cfg.Interval)), at[0])
		assert.Equal(t, pcommon.NewTimestampFromTime(ls.at), at[len(at)-1], "the run's end, at the last tick")
	}
	assert.Equal(t, map[string]int64{"read": int64(ticks * len(ls.s.gpus))}, ls.outcomes(t))
}

// flushEveryTick is the default configuration flushing at every tick, so
// that every tick reads the energy counter, whose points count the ticks
// handed on (the fixture's counter moves at every read).
func flushEveryTick() *Config {
	cfg := defaultConfig()
	cfg.Samples.FlushInterval = cfg.Samples.Interval
	return cfg
}

// pointTimes are the timestamps of GPU id's points of metric, in the order
// they were handed on.
func pointTimes(batches []pmetric.Metrics, metric, id string) []pcommon.Timestamp {
	var out []pcommon.Timestamp
	for _, m := range batches {
		forEachPointTS(m, func(name string, attrs map[string]any, ts pcommon.Timestamp, _ float64) {
			if name == metric && attrs["hw.id"] == id {
				out = append(out, ts)
			}
		})
	}
	return out
}

// joinBatches copies batches into one pmetric.Metrics.
func joinBatches(batches []pmetric.Metrics) pmetric.Metrics {
	all := pmetric.NewMetrics()
	for _, m := range batches {
		rms := m.ResourceMetrics()
		for i := range rms.Len() {
			rms.At(i).CopyTo(all.ResourceMetrics().AppendEmpty())
		}
	}
	return all
}

// hangTicks makes GPU dev's tick calls (the batched field call that asks
// for instant power) block until release is closed; the scrape's own
// field call goes through.
func hangTicks(dev *server.Device, release <-chan struct{}) {
	answer := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		if slices.ContainsFunc(values, func(v nvml.FieldValue) bool { return v.FieldId == nvml.FI_DEV_POWER_INSTANT }) {
			<-release
		}
		return answer(values)
	}
}

func TestHungGPUStallsNeitherTheOthersNorTheScrape(t *testing.T) {
	lib := fixtureServer(3)
	release := make(chan struct{})
	hangTicks(device(lib, 1), release)
	sink := new(consumertest.MetricsSink)
	ls := startSampler(t, flushEveryTick(), lib, sink)

	ls.tick()
	require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 2 }, 5*time.Second, time.Millisecond)
	for n := range int64(4) { // GPU 1 is still in its first call: it misses these
		ls.tick()
		require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 2*(n+2) }, 5*time.Second, time.Millisecond)
		assert.Equal(t, n == 3, ls.s.gpus[1].tickStalled.Load(), "stalled after a second, not before")
	}
	assert.Equal(t, int64(4), ls.outcomes(t)["missed"])

	m, err := ls.s.scrape(context.Background())
	require.NoError(t, err, "the scrape does not wait for the sampling clock")
	status := pointsOf(m, "hw.status", map[string]any{"hw.state": "degraded"})
	assert.Equal(t, []float64{0}, status[device(lib, 0).UUID])
	assert.Equal(t, []float64{1}, status[device(lib, 1).UUID], "a stalled GPU reports degraded")

	close(release) // the call returns: GPU 1 is read again
	require.Eventually(t, func() bool { return !ls.s.gpus[1].tickStalled.Load() }, 5*time.Second, time.Millisecond)
	ls.tick()
	require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 2*5+1+3 }, 5*time.Second, time.Millisecond)
	require.NoError(t, ls.sp.shutdown(context.Background()))
	assertStrictlyIncreasing(t, seriesPoints(sink.AllMetrics()))
	energy := pointsOf(joinBatches(sink.AllMetrics()), "hw.energy", nil)
	assert.Len(t, energy[device(lib, 0).UUID], 6)
	assert.Len(t, energy[device(lib, 1).UUID], 2, "its first tick (late) and its last")
}

func TestShutdownAbandonsACallThatNeverReturns(t *testing.T) {
	lib := fixtureServer(2)
	release := make(chan struct{})
	hangTicks(device(lib, 0), release)
	sink := new(consumertest.MetricsSink)
	ls := startSampler(t, flushEveryTick(), lib, sink)
	ls.tick()
	require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 1 }, 5*time.Second, time.Millisecond)

	start := time.Now()
	require.NoError(t, ls.sp.shutdown(context.Background()))
	assert.Less(t, time.Since(start), 5*time.Second, "shutdown waits a bounded time")
	assert.True(t, ls.s.gpus[0].tickAbandoned, "its buffers are not freed under the call")
	assert.False(t, ls.s.gpus[1].tickAbandoned)
	assert.Len(t, pointsOf(joinBatches(sink.AllMetrics()), "hw.energy", nil)[device(lib, 1).UUID], 1, "what was read is handed on")

	close(release) // let the abandoned call end, so that goleak sees no goroutine left
	ls.sp.working.Wait()
}

// blockingSink holds every ConsumeMetrics until release is closed.
type blockingSink struct {
	consumertest.MetricsSink
	release chan struct{}
}

func (b *blockingSink) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	<-b.release
	return b.MetricsSink.ConsumeMetrics(ctx, md)
}

func TestSlowPipelineSkipsTicksWithinTheBound(t *testing.T) {
	cfg := defaultConfig()
	cfg.Samples.FlushInterval = cfg.Samples.Interval // hand on every tick
	cfg.Samples.MaxPendingTicks = 5
	require.NoError(t, cfg.Validate())
	sink := &blockingSink{release: make(chan struct{})}
	ls := startSampler(t, cfg, fixtureServer(2), sink)
	const ticks = 20
	for n := range int64(ticks) {
		ls.tick()
		// Dispatched ticks stay pending until the pipeline has taken them:
		// max_pending_ticks are read, the rest skipped.
		want := map[string]int64{"read": 2 * min(n+1, 5)}
		if n >= 5 {
			want["skipped"] = 2 * (n + 1 - 5)
		}
		require.Eventually(t, func() bool { return maps.Equal(ls.outcomes(t), want) }, 5*time.Second, time.Millisecond)
	}
	assert.Equal(t, int64(2*(ticks-5)), ls.outcomes(t)["skipped"])
	assert.Equal(t, int64(5), ls.sp.pending.Load())

	// The pipeline takes the two batches handed on before it stalled (a tick
	// each); the other three wait in the builder for the next flush tick.
	close(sink.release)
	require.Eventually(t, func() bool { return ls.sp.pending.Load() == 3 }, 5*time.Second, time.Millisecond)
	ls.tick() // hands them on, and is read: the pipeline keeps up again
	require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 2*6 }, 5*time.Second, time.Millisecond)
	require.NoError(t, ls.sp.shutdown(context.Background()))
	all := joinBatches(sink.AllMetrics())
	assertStrictlyIncreasing(t, seriesPoints(sink.AllMetrics()))
	for _, pts := range pointsOf(all, "hw.energy", nil) {
		assert.Len(t, pts, 6, "nothing read is lost")
	}
	for id := range pointsOf(all, "nvidia.gpu.tensor.activity", nil) {
		at := pointTimes(sink.AllMetrics(), "nvidia.gpu.tensor.activity", id)
		assert.Equal(t, pcommon.NewTimestampFromTime(ls.at), at[len(at)-1], "the GPM interval after the gap covers it")
	}
}

// A shutdown whose context expires while a GPU's tick is hung in NVML
// waits for the clock to abandon the call (sampler.wait), then neither
// frees that GPU's buffers nor shuts NVML down under it.
func TestShutdownPastItsDeadlineFreesNothingUnderAHungTick(t *testing.T) {
	lib := fixtureServer(1)
	release := make(chan struct{})
	var inFlight atomic.Bool
	dev := device(lib, 0)
	answer := dev.GetFieldValuesFunc
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		for _, v := range values {
			if v.FieldId == nvml.FI_DEV_POWER_INSTANT {
				inFlight.Store(true)
				<-release
				inFlight.Store(false)
				break
			}
		}
		return answer(values)
	}
	ls := startSampler(t, flushEveryTick(), lib, new(consumertest.MetricsSink))
	ls.sp.wait = shutdownWait // production's
	ls.tick()
	require.Eventually(t, inFlight.Load, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := errors.Join(ls.sp.shutdown(ctx), ls.s.shutdown(ctx)) // sampledReceiver.Shutdown
	freedUnderCall := len(lib.GpmSampleFreeCalls())
	shutdownUnderCall := len(lib.ShutdownCalls())
	stillInFlight := inFlight.Load()
	close(release)
	ls.sp.working.Wait()
	ls.sp.running.Wait()
	require.Error(t, err, "the deadline passed")
	require.True(t, stillInFlight)
	assert.Zero(t, freedUnderCall, "GPM buffers freed while the GPU's tick is in an NVML call")
	assert.Zero(t, shutdownUnderCall, "nvmlShutdown while a tick is in an NVML call")
}

// A tick dispatched just before the stop is read, not dropped: finish
// waits for the result of every worker it asked, so a worker that left on
// the stop with a request queued made shutdown wait out sampler.wait and
// mark a healthy GPU's call abandoned (its buffers never freed). Go picks
// among ready cases at random: 64 tries miss the bug with odds 2^-64.
func TestWorkerReadsATickQueuedBeforeTheStop(t *testing.T) {
	s := startScraper(t, flushEveryTick(), fixtureServer(1), BackendNVML)
	for i := range 64 {
		sp := &sampler{scraper: s, results: make(chan tickResult, 1), stop: make(chan struct{})}
		w := &tickWorker{g: s.gpus[0], requests: make(chan tickRequest, 1)}
		w.requests <- tickRequest{at: time.Now(), flush: true}
		close(sp.stop)
		sp.working.Add(1)
		sp.work(w)
		require.Len(t, sp.results, 1, "try %d: the queued tick was not read", i)
		<-sp.results
	}
}

// A tick that returns after its round was handed on, while the slow
// pipeline has the clock skip every tick since, is handed on at shutdown:
// no round dispatched since the last hand-on made the final one think
// there was nothing to hand on.
func TestShutdownHandsOnATickThatReturnedLate(t *testing.T) {
	lib := fixtureServer(2)
	release := make(chan struct{})
	hangTicks(device(lib, 1), release)
	cfg := flushEveryTick()
	cfg.Samples.MaxPendingTicks = 2
	require.NoError(t, cfg.Validate())
	sink := &blockingSink{release: make(chan struct{})}
	ls := startSampler(t, cfg, lib, sink)
	ls.tick() // GPU 0 reads, GPU 1 hangs
	require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 1 }, 5*time.Second, time.Millisecond)
	ls.tick() // hands tick 1 on (the pipeline holds it); GPU 0 reads
	require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 2 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return len(ls.sp.flushes) == 0 }, 5*time.Second, time.Millisecond)
	ls.tick() // hands tick 2 on, then skips: two ticks are pending
	require.Eventually(t, func() bool { return ls.outcomes(t)["skipped"] == 2 }, 5*time.Second, time.Millisecond)
	close(release) // GPU 1's tick returns, after its round was handed on
	require.Eventually(t, func() bool { return ls.outcomes(t)["read"] == 3 }, 5*time.Second, time.Millisecond)
	close(sink.release)
	require.Eventually(t, func() bool { return ls.sp.pending.Load() == 0 }, 5*time.Second, time.Millisecond)
	require.NoError(t, ls.sp.shutdown(context.Background()))
	energy := pointsOf(joinBatches(sink.AllMetrics()), "hw.energy", nil)
	assert.Len(t, energy[device(lib, 0).UUID], 2)
	assert.Len(t, energy[device(lib, 1).UUID], 1, "GPU 1's tick, read late, is handed on")
}

// flush_interval need not be a multiple of samples.interval: it is the
// nearest whole number of ticks, at least one.
func TestTicksPerFlushIsTheNearestWholeTick(t *testing.T) {
	for _, c := range []struct {
		interval, flush time.Duration
		want            int
	}{
		{250 * time.Millisecond, time.Second, 4},
		{400 * time.Millisecond, time.Second, 3}, // 2.5
		{300 * time.Millisecond, 500 * time.Millisecond, 2},
		{300 * time.Millisecond, time.Second, 3},
		{time.Second, time.Second, 1},
		{time.Second, 400 * time.Millisecond, 1}, // refused by Validate; Driven does not validate
	} {
		assert.Equal(t, c.want, ticksPerFlush(SamplesConfig{Interval: c.interval, FlushInterval: c.flush}), "%v every %v", c.flush, c.interval)
	}
}

// A hand-on in which every GPU missed its tick carries no point: nothing
// goes down the pipeline, while the round still leaves the pending count.
func TestHandOnOfNothingSendsNothing(t *testing.T) {
	lib := fixtureServer(1)
	release := make(chan struct{})
	hangTicks(device(lib, 0), release)
	sink := new(consumertest.MetricsSink)
	ls := startSampler(t, flushEveryTick(), lib, sink)
	ls.tick() // the only GPU hangs
	ls.tick() // hands on the first round: no point
	require.Eventually(t, func() bool { return ls.outcomes(t)["missed"] == 1 && ls.sp.pending.Load() == 1 }, 5*time.Second, time.Millisecond)
	assert.Empty(t, sink.AllMetrics())
	close(release)
	require.NoError(t, ls.sp.shutdown(context.Background()))
}
