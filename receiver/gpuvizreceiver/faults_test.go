package gpuvizreceiver

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// faultyLib is a simulated server of n H200s under faults, read at clock.
func faultyLib(t *testing.T, n int, clock func() time.Time, faults ...nvmlsim.Fault) *nvmlsim.Server {
	t.Helper()
	lib, err := nvmlsim.New("h200", n, 1, clock, nvmlsim.WithScenario(nvmlsim.DefaultScenario), nvmlsim.WithFaults(faults))
	require.NoError(t, err)
	require.Equal(t, nvml.SUCCESS, lib.Init())
	return lib
}

func uuidOf(i int) string {
	return "GPU-simulated-h200-1-0" + string(rune('0'+i))
}

func TestHungScrapeCallHoldsUpNoOtherGPU(t *testing.T) {
	// The deadline is half the hang: wide enough for the healthy GPUs'
	// first reads on a loaded machine under the race detector, and still
	// short of the hung call's return.
	const hang = 8 * time.Second
	lib := faultyLib(t, 4, nil, nvmlsim.Fault{Kind: nvmlsim.FaultHang, GPU: 1, Calls: []string{"nvmlDeviceGetTemperature"}, Sleep: hang, Duration: hang})
	s := startScraper(t, scrapeOnly(), lib, BackendSimulated)
	_, ret := lib.Device(0).GetPowerUsage() // the simulation lays out its first episode
	require.Equal(t, nvml.SUCCESS, ret)

	ctx, cancel := context.WithTimeout(context.Background(), hang/2)
	m, err := s.scrape(ctx)
	cancel()
	require.Error(t, err)
	assert.ErrorContains(t, err, "GPU 1 ("+uuidOf(1)+"): its NVML calls have not returned")
	temps := pointsOf(m, "hw.temperature", nil)
	for _, i := range []int{0, 2, 3} {
		assert.Len(t, temps[uuidOf(i)], 1, "GPU %d is read on time", i)
		assert.Equal(t, "ok", stateOf(m, uuidOf(i)))
	}
	assert.Empty(t, temps[uuidOf(1)], "the hung GPU's reading is not waited for")
	assert.Equal(t, "degraded", stateOf(m, uuidOf(1)), "the hung GPU says so")

	// While the call is in flight the GPU is not asked again; once it has
	// returned, what it read comes with the next scrape, and it is read
	// again.
	require.Eventually(t, func() bool {
		select {
		case <-s.gpus[1].scraping:
			return true
		default:
			return false
		}
	}, 10*hang, 10*time.Millisecond)
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Len(t, pointsOf(m, "hw.temperature", nil)[uuidOf(1)], 2, "the late reading and this scrape's")
	assert.Equal(t, "ok", stateOf(m, uuidOf(1)))
}

func TestResetGPUIsReadAgainWithContinuingCounters(t *testing.T) {
	clock := newVirtualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	lib := faultyLib(t, 2, clock.now, nvmlsim.Fault{Kind: nvmlsim.FaultReset, GPU: 1, After: 20 * time.Second, Duration: 5 * time.Second})
	cfg := scrapeOnly()
	s := startScraper(t, cfg, lib, BackendSimulated)
	s.now = clock.now

	energy := func(m pmetric.Metrics) float64 {
		v := pointsOf(m, "hw.energy", nil)[uuidOf(1)]
		require.Len(t, v, 1)
		return v[0]
	}
	var last float64
	var states []string
	for step := range 8 { // every 5 s, from 5 s to 40 s
		clock.advance(5 * time.Second)
		m, _ := s.scrape(context.Background())
		states = append(states, stateOf(m, uuidOf(1)))
		assert.Equal(t, "ok", stateOf(m, uuidOf(0)), "GPU 0 at step %d", step)
		if states[step] != "ok" {
			continue
		}
		e := energy(m)
		if last > 0 {
			assert.GreaterOrEqual(t, e, last, "energy never falls (step %d)", step)
			assert.Less(t, e-last, 15*1000.0, "no jump: at most 15 s at 1 kW since the last reading (step %d)", step)
		}
		last = e
	}
	// At 20 s the reset begins: the GPU is lost. At 25 s it is over, and
	// the scrape takes a new handle for the lost GPU before it reads.
	assert.Equal(t, []string{"ok", "ok", "ok", "failed", "ok", "ok", "ok", "ok"}, states)
	assert.NotSame(t, s.gpus[1].dev, s.gpus[0].dev)
}

func TestXidStormIsCountedAndLoggedBounded(t *testing.T) {
	lib := faultyLib(t, 2, nil, nvmlsim.Fault{Kind: nvmlsim.FaultXidStorm, GPU: 0, Xid: 13, Rate: 2000, Duration: 250 * time.Millisecond})
	cfg := scrapeOnly()
	s := startScraper(t, cfg, lib, BackendSimulated)
	require.NotNil(t, s.xid.Load())
	require.Eventually(t, func() bool {
		m, _ := s.scrape(context.Background())
		v := pointsOf(m, "nvidia.gpu.xid.errors", nil)[uuidOf(0)]
		return len(v) == 1 && v[0] == 500
	}, 20*time.Second, 50*time.Millisecond, "all 500 Xids of the storm are counted")
	m, _ := s.scrape(context.Background())
	assert.Empty(t, pointsOf(m, "nvidia.gpu.xid.errors", nil)[uuidOf(1)], "on its GPU only")
	x := &s.gpus[0].xids
	x.mu.Lock()
	unlogged := x.unlogged
	x.mu.Unlock()
	assert.GreaterOrEqual(t, unlogged, int64(490), "a storm is not logged Xid by Xid")
}

func TestGPUNotIdentifiedAtStartIsFoundLater(t *testing.T) {
	clock := newVirtualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	lib := faultyLib(t, 4, clock.now, nvmlsim.Fault{Kind: nvmlsim.FaultError, GPU: 2, Error: "gpu_is_lost", Duration: 30 * time.Second})
	cfg := defaultConfig() // with the sampling clock, which must take the GPU up too
	s := startScraper(t, cfg, lib, BackendSimulated)
	s.now = clock.now
	sink := new(consumertest.MetricsSink)
	sp, err := newSampler(s, receivertest.NewNopSettings(metadata.Type), sink)
	require.NoError(t, err)
	ticks := make(chan time.Time)
	sp.ticks = func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }
	sp.start()
	t.Cleanup(func() { require.NoError(t, sp.shutdown(context.Background())) })
	require.Len(t, s.gpus, 3, "GPU 2 answers as lost at start: left out")

	clock.advance(10 * time.Second)
	m, _ := s.scrape(context.Background())
	assert.Empty(t, pointsOf(m, "hw.temperature", nil)[uuidOf(2)])

	clock.advance(lookEvery)
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Len(t, pointsOf(m, "hw.temperature", nil)[uuidOf(2)], 1, "found a minute later, and read")
	assert.Equal(t, "ok", stateOf(m, uuidOf(2)))

	// The sampling clock ticks it too: its sampled power is handed on with
	// a flush (ticks go on until one carries it).
	sampled := func() bool { return len(pointsOf(joinBatches(sink.AllMetrics()), "hw.power", nil)[uuidOf(2)]) > 0 }
	for range 50 * ticksPerFlush(cfg.Samples) {
		if sampled() {
			break
		}
		clock.advance(cfg.Samples.Interval)
		ticks <- clock.now()
		time.Sleep(time.Millisecond)
	}
	assert.True(t, sampled(), "its sampled power is handed on")
}
