package nvmlsim

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

func mustScenarioServer(t *testing.T, scenario string, c *clock) *Server {
	t.Helper()
	s, err := New("h200", 8, 1, c.now, WithScenario(scenario))
	require.NoError(t, err)
	require.Equal(t, nvml.SUCCESS, s.Init())
	require.NotNil(t, s.Node())
	return s
}

func TestScenarioNames(t *testing.T) {
	_, err := New("h200", 8, 1, nil, WithScenario("nope"))
	assert.ErrorContains(t, err, `unknown scenario "nope": use one of bursty, host_starved, long_context, mixed, power_capped, sequential, steady, tensor_parallel`)
	s, err := New("h200", 2, 1, nil, WithScenario(ScenarioSequential))
	require.NoError(t, err)
	assert.Nil(t, s.Node())
	assert.NotNil(t, s.Device(0).Schedule())
}

// TestReadingsFollowTheEngine: every reading of a GPU that serves a
// batching engine is the engine's: counters are its integrals, the limit
// is the scenario's, memory is the preallocated pool.
func TestReadingsFollowTheEngine(t *testing.T) {
	c := newClock()
	s := mustScenarioServer(t, "power_capped", c)
	node, d := s.Node(), s.Device(2)
	limit, _ := d.GetEnforcedPowerLimit()
	assert.Equal(t, uint32(420_000), limit)

	fields := []nvml.FieldValue{{FieldId: nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP}, {FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: math.MaxUint32}} // all links
	field := func() (cappedNs, nvlinkKiB uint64) {
		require.Equal(t, nvml.SUCCESS, d.GetFieldValues(fields))
		return binary.LittleEndian.Uint64(fields[0].Value[:]), binary.LittleEndian.Uint64(fields[1].Value[:])
	}
	from := c.t.UnixNano()
	e0, _ := d.GetTotalEnergyConsumption()
	capped0, link0 := field()
	sawCap := false
	mem0, _ := d.GetMemoryInfo_v2()
	for range 300 {
		c.advance(100 * time.Millisecond)
		seg := node.At(2, c.t.UnixNano())
		reasons, _ := d.GetCurrentClocksEventReasons()
		assert.Equal(t, seg.PowerCapped, reasons&nvml.ClocksEventReasonSwPowerCap != 0)
		sawCap = sawCap || seg.PowerCapped
		clk, _ := d.GetClockInfo(nvml.CLOCK_SM)
		assert.Equal(t, seg.ClockMHz, clk)
		temp, _ := d.GetTemperature(nvml.TEMPERATURE_GPU)
		assert.InDelta(t, seg.TempC, float64(temp), 0.5)
		mem, _ := d.GetMemoryInfo_v2()
		assert.Equal(t, mem0.Used, mem.Used, "vLLM preallocates its KV pool")
		p, _ := d.GetPowerUsage()
		assert.LessOrEqual(t, p, limit)
	}
	assert.True(t, sawCap)
	tot := node.Integrate(2, from, c.t.UnixNano())
	e1, _ := d.GetTotalEnergyConsumption()
	// The counter as of the driver's last refreshes before each read.
	refresh := func(t int64) int64 { return t - floorMod(t-d.refreshPhase, refreshPeriod) }
	counted := node.Integrate(2, refresh(from), refresh(c.t.UnixNano()))
	assert.InDelta(t, counted.Joules*1000, float64(e1-e0), 2, "mJ")
	capped1, link1 := field()
	assert.InDelta(t, tot.CappedSeconds*1e9, float64(capped1-capped0), 2)
	assert.InDelta(t, tot.NVLinkBytes/1024, float64(link1-link0), 2)
	assert.InDelta(t, 0.9*float64(mem0.Total), float64(mem0.Used), 0.001*float64(mem0.Total))
}

// The energy counter and the instant power field move only when the driver
// refreshes them, every 100 ms: a read in between gets the energy up to the
// last refresh and the mean power of the 20 ms before it.
func TestEnergyAndPowerMoveEvery100ms(t *testing.T) {
	c := newClock()
	s := mustScenarioServer(t, "bursty", c)
	node := s.Node()
	for _, i := range []int{0, 1, 3} {
		d := s.Device(i)
		read := func() (mj, mw uint64) {
			f := []nvml.FieldValue{{FieldId: nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION}, {FieldId: nvml.FI_DEV_POWER_INSTANT}}
			require.Equal(t, nvml.SUCCESS, d.GetFieldValues(f))
			return binary.LittleEndian.Uint64(f[0].Value[:]), binary.LittleEndian.Uint64(f[1].Value[:])
		}
		// To the next refresh.
		c.advance(time.Duration(refreshPeriod - floorMod(c.t.UnixNano()-d.refreshPhase, refreshPeriod)))
		u := c.t.UnixNano()
		e0, p0 := read()
		mean := node.Integrate(i, u-powerSamplePeriod, u).Joules / 0.02
		assert.InDelta(t, mean*1000, float64(p0), 1, "GPU %d: the mean power of the 20 ms before the refresh", i)
		for range 9 { // 10 ms to 90 ms after it: nothing moves
			c.advance(10 * time.Millisecond)
			e, p := read()
			assert.Equal(t, e0, e, "GPU %d energy between refreshes", i)
			assert.Equal(t, p0, p, "GPU %d power between refreshes", i)
			e2, _ := d.GetTotalEnergyConsumption()
			assert.Equal(t, e0, e2)
		}
		c.advance(10 * time.Millisecond) // the next refresh
		e1, _ := read()
		assert.InDelta(t, node.Integrate(i, u, u+refreshPeriod).Joules*1000, float64(e1-e0), 1, "GPU %d", i)
	}
	assert.NotEqual(t, s.Device(0).refreshPhase, s.Device(1).refreshPhase, "GPUs refresh on grids of their own")
}

func TestGPMFollowsTheEngine(t *testing.T) {
	c := newClock()
	s := mustScenarioServer(t, "steady", c)
	d := s.Device(0)
	s1, _ := s.GpmSampleAlloc()
	s2, _ := s.GpmSampleAlloc()
	from := c.t.UnixNano()
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d, s1))
	c.advance(250 * time.Millisecond)
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d, s2))
	m := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: 2, Sample1: s1, Sample2: s2}
	m.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_ANY_TENSOR_UTIL)
	m.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_DRAM_BW_UTIL)
	require.Equal(t, nvml.SUCCESS, s.GpmMetricsGet(m))
	// As the H200 does, the samples describe the GPU gpmLag before they
	// were taken, each GPU its own lag.
	tot := s.Node().Integrate(0, from-d.gpmLag, c.t.UnixNano()-d.gpmLag)
	assert.InDelta(t, 100*tot.TensorSeconds/tot.Seconds, m.Metrics[0].Value, 1e-9)
	assert.InDelta(t, 100*tot.DRAMSeconds/tot.Seconds, m.Metrics[1].Value, 1e-9)
	assert.GreaterOrEqual(t, d.gpmLag, int64(gpmLagMin))
	assert.Less(t, d.gpmLag, int64(gpmLagMax))
	assert.NotEqual(t, d.gpmLag, s.Device(1).gpmLag, "each GPU lags by its own")
}

// TestTruthAddsUpToTheEnergyCounter: over one episode, what the GPUs'
// NVML energy counters count is the truth's request energies plus its idle
// energy, as the truth file has them: the scorer's ground truth is what
// the GPUs drew, all of it and no more. The counters run on each GPU's
// refresh grid, off the episode's edges by under 100 ms.
func TestTruthAddsUpToTheEnergyCounter(t *testing.T) {
	for _, scenario := range infersim.Scenarios() {
		t.Run(scenario, func(t *testing.T) {
			c := newClock()
			s := mustScenarioServer(t, scenario, c)
			node := s.Node()
			ep := node.Episode(node.EpisodeIndex(c.t.UnixNano()) + 1)
			c.t = time.Unix(0, ep.Start)
			counted := make([]uint64, 8)
			for i := range counted {
				counted[i], _ = s.Device(i).GetTotalEnergyConsumption()
			}
			c.t = time.Unix(0, ep.End)
			var counterJ float64
			for i := range counted {
				e, _ := s.Device(i).GetTotalEnergyConsumption()
				counterJ += float64(e-counted[i]) / 1000
			}
			truth := node.Truth(node.Header(1, make([]string, 8), "h"), ep.Start, ep.End)
			var requestJ, idleJ float64
			for _, r := range truth.Requests {
				requestJ += r.Energy
				assert.InDelta(t, r.Energy, r.PrefillEnergy+r.DecodeEnergy, 1e-9*r.Energy)
			}
			for _, b := range truth.Bins {
				idleJ += b.Idle
			}
			require.Positive(t, requestJ)
			// 8 GPUs × under 100 ms × at most the board's 700 W at each edge.
			assert.InDelta(t, counterJ, requestJ+idleJ, 2*8*0.1*700, "counter %.0f J, truth %.0f J requests + %.0f J idle", counterJ, requestJ, idleJ)
		})
	}
}
