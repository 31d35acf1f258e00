package gpuvizreceiver

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

func TestSamplesAreEmittedOnceWithTheirTimestamps(t *testing.T) {
	lib := fixtureServer(1)
	// The driver's buffers are read where GPM is not: an Ampere, say.
	lib.GpmQueryDeviceSupportFunc = func(nvml.Device) (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, nvml.SUCCESS }
	cfg := defaultConfig()
	cfg.Samples.FlushInterval = cfg.Samples.Interval // every tick drains
	clock := newVirtualClock(time.Now())
	d := startDriven(t, cfg, lib, BackendNVML, clock)
	seen := map[uint64]int{}
	for range 4 { // a tick hands on what the ticks before it read
		clock.advance(cfg.Samples.Interval)
		m, ok := d.Tick()
		if !ok || m.ResourceMetrics().Len() == 0 {
			continue
		}
		rm := m.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
		for i := range rm.Len() {
			if rm.At(i).Name() != "nvidia.gpu.samples.utilization" {
				continue
			}
			dps := rm.At(i).Gauge().DataPoints()
			for j := range dps.Len() {
				seen[uint64(dps.At(j).Timestamp())]++
			}
		}
	}
	// The fixture adds two samples a call (µs timestamps 1e6·call + {0, 166667}).
	assert.Len(t, seen, 6)
	for ts, n := range seen {
		assert.Equal(t, 1, n, "sample at %d emitted once", ts)
		assert.Zero(t, ts%1000, "NVML's µs timestamp, in ns")
	}
}

func TestSamplesOff(t *testing.T) {
	lib := fixtureServer(1)
	cfg := defaultConfig()
	cfg.Samples.Enabled = false
	s := startScraper(t, cfg, lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, device(lib, 0).GetSamplesCalls())
	assert.Empty(t, pointsOf(m, "nvidia.gpu.samples.utilization", nil))
}

func TestProcesses(t *testing.T) {
	lib := fixtureServer(1)
	dev := device(lib, 0)
	procs := []nvml.ProcessInfo{{Pid: 1000, UsedGpuMemory: 10 << 30}, {Pid: 2000, UsedGpuMemory: 1 << 30}, {Pid: 3000, UsedGpuMemory: 20 << 30}}
	dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return slices.Clone(procs), nvml.SUCCESS }
	cfg := defaultConfig()
	cfg.Processes.Top = 2
	s := startScraper(t, cfg, lib, BackendNVML)

	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	mem := map[int64]map[string]any{}
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" {
			mem[attrs["process.pid"].(int64)] = attrs
		}
	})
	assert.Len(t, mem, 2, "top 2 by memory")
	assert.Contains(t, mem, int64(3000))
	require.Contains(t, mem, int64(1000))
	assert.Equal(t, "vllm", mem[1000]["process.executable.name"])
	assert.Equal(t, "3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f", mem[1000]["container.id"])
	assert.NotContains(t, mem[1000], "process.command_line", "command lines only when asked for")

	// Process 3000 exits: its series stop, and its cached details go.
	procs = procs[:2]
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	pids := map[int64]bool{}
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if strings.HasPrefix(name, "nvidia.gpu.process.") {
			pids[attrs["process.pid"].(int64)] = true
		}
	})
	assert.Equal(t, map[int64]bool{1000: true, 2000: true}, pids)
	assert.NotContains(t, s.gpus[0].processes.info, uint32(3000))
}

func TestProcessCommandLineOnRequest(t *testing.T) {
	cfg := defaultConfig()
	cfg.Processes.CommandLine = true
	s := startScraper(t, cfg, fixtureServer(1), BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	var lines []any
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" && attrs["process.pid"] == int64(1000) {
			lines = append(lines, attrs["process.command_line"])
		}
	})
	assert.Equal(t, []any{"python3 -m vllm.entrypoints.openai.api_server --api-key s3cret"}, lines)
	assert.NotContains(t, cfg.Metrics.NvidiaGpuProcessMemoryUsage.EnabledAttributes,
		metadata.NvidiaGpuProcessMemoryUsageMetricAttributeKeyProcessCommandLine, "the user's config is not changed")
}

func TestContainerID(t *testing.T) {
	id := "3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	for name, tc := range map[string]struct{ cgroup, want string }{
		"docker, cgroup v1":  {"12:memory:/docker/" + id + "\n11:cpu:/docker/" + id + "\n", id},
		"containerd, v2":     {"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-" + id + ".scope\n", id},
		"cri-o":              {"0::/kubepods/burstable/pod1/crio-" + id + ".scope\n", id},
		"docker systemd":     {"0::/system.slice/docker-" + id + ".scope\n", id},
		"not in a container": {"0::/user.slice/user-1000.slice/session-3.scope\n", ""},
		"garbage":            {"not a cgroup file", ""},
		"empty":              {"", ""},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, tc.want, containerID([]byte(tc.cgroup))) })
	}
}

func TestGPMNeedsTwoSamples(t *testing.T) {
	lib := fixtureServer(1)
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pointsOf(m, "nvidia.gpu.tensor.activity", nil), "one sample is not an interval")
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pointsOf(m, "nvidia.gpu.tensor.activity", nil), "samples under 100 ms apart are not compared")
	time.Sleep(gpmMinInterval)
	m, err = s.scrape(context.Background())
	require.NoError(t, err)
	// The fixture answers 4 × metric ID percent: ANY_TENSOR_UTIL (5) → 0.2.
	assert.Equal(t, []float64{0.2}, pointsOf(m, "nvidia.gpu.tensor.activity", nil)[device(lib, 0).UUID])
	assert.Equal(t, []float64{4 * 21 * (1 << 20)}, pointsOf(m, "nvidia.gpu.pcie.throughput", map[string]any{"network.io.direction": "receive"})[device(lib, 0).UUID], "MiB/s to By/s")
}

func TestNoGPMOnOlderGPUsOrDrivers(t *testing.T) {
	for name, hide := range map[string]func(*server.Server){
		"GPU without GPM": func(lib *server.Server) {
			lib.GpmQueryDeviceSupportFunc = func(nvml.Device) (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, nvml.SUCCESS }
		},
		"driver without GPM": func(lib *server.Server) {
			lib.LookupSymbolFunc = func(name string) error {
				if strings.HasPrefix(name, "nvmlGpm") {
					return errors.New("undefined symbol")
				}
				return nil
			}
			lib.GpmQueryDeviceSupportFunc = nil // called, the mock would panic
		},
	} {
		t.Run(name, func(t *testing.T) {
			lib := fixtureServer(1)
			hide(lib)
			s := startScraper(t, scrapeOnly(), lib, BackendNVML)
			for range 2 {
				time.Sleep(gpmMinInterval)
				m, err := s.scrape(context.Background())
				require.NoError(t, err)
				assert.Empty(t, pointsOf(m, "nvidia.gpu.sm.activity", nil))
			}
			assert.Empty(t, lib.GpmSampleGetCalls())
		})
	}
}

func TestThrottleReasonsOnOlderDrivers(t *testing.T) {
	lib := fixtureServer(1)
	lib.LookupSymbolFunc = func(name string) error {
		if name == "nvmlDeviceGetCurrentClocksEventReasons" {
			return errors.New("undefined symbol")
		}
		return nil
	}
	dev := device(lib, 0)
	dev.GetCurrentClocksEventReasonsFunc = nil
	dev.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
		return nvml.ClocksThrottleReasonHwThermalSlowdown | nvml.ClocksThrottleReasonGpuIdle, nvml.SUCCESS
	}
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	active := map[string]float64{}
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name == "nvidia.gpu.throttle.active" {
			active[attrs["nvidia.gpu.throttle.reason"].(string)] = v
		}
	})
	assert.Len(t, active, 9)
	assert.Equal(t, 1.0, active["hw_thermal_slowdown"])
	assert.Equal(t, 1.0, active["gpu_idle"])
	assert.Equal(t, 0.0, active["sw_power_cap"])
}

// nvmlCalls counts the calls a go-nvml mock device has served, by method.
func nvmlCalls(dev *server.Device) map[string]int {
	out := map[string]int{}
	v := reflect.ValueOf(&dev.Device)
	for i := range v.NumMethod() {
		name := v.Type().Method(i).Name
		if !strings.HasSuffix(name, "Calls") {
			continue
		}
		if n := v.Method(i).Call(nil)[0].Len(); n > 0 {
			out[strings.TrimSuffix(name, "Calls")] = n
		}
	}
	return out
}

// TestNVMLCallsPerScrape pins the steady-state NVML calls per GPU per
// scrape with every default feature on (docs/benchmarks.md lists them): a
// change that adds calls must change this number and the list.
func TestNVMLCallsPerScrape(t *testing.T) {
	lib := fixtureServer(1)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	_, err := s.scrape(context.Background()) // the first scrape also learns what is unsupported
	require.NoError(t, err)
	before := nvmlCalls(device(lib, 0))
	gpmBefore := len(lib.GpmSampleGetCalls()) + len(lib.GpmMetricsGetCalls())
	time.Sleep(gpmMinInterval)
	_, err = s.scrape(context.Background())
	require.NoError(t, err)
	calls := map[string]int{}
	total := 0
	for name, n := range nvmlCalls(device(lib, 0)) {
		if d := n - before[name]; d > 0 {
			calls[name] = d
			total += d
		}
	}
	gpm := len(lib.GpmSampleGetCalls()) + len(lib.GpmMetricsGetCalls()) - gpmBefore
	t.Logf("NVML calls per GPU per scrape: %d device calls %v + %d GPM calls", total, calls, gpm)
	assert.Equal(t, 17, total)
	assert.Zero(t, gpm, "GPM is the sampling clock's")
	assert.Equal(t, 1, calls["GetFieldValues"], "every field value in one batched call")
}

// TestNVMLCallsPerTick pins the sampling clock's calls per GPU: one batched
// field-value call (instant power, throttle times, and on a tick that ends
// a flush interval the energy counter) and one GPM sample and computation
// per tick, and on that flush tick the driver's power buffer; without GPM,
// the four driver sample buffers instead.
func TestNVMLCallsPerTick(t *testing.T) {
	t.Run("GPM", func(t *testing.T) { testNVMLCallsPerTick(t, true) })
	t.Run("no GPM", func(t *testing.T) { testNVMLCallsPerTick(t, false) })
}

func testNVMLCallsPerTick(t *testing.T, gpm bool) {
	lib := fixtureServer(1)
	if !gpm {
		lib.GpmQueryDeviceSupportFunc = func(nvml.Device) (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, nvml.SUCCESS }
	}
	cfg := defaultConfig()
	clock := newVirtualClock(time.Now())
	d := startDriven(t, cfg, lib, BackendNVML, clock)
	perFlush := ticksPerFlush(cfg.Samples)
	require.Equal(t, 4, perFlush, "1 s of 250 ms ticks")
	for range perFlush { // the first flush interval learns what is unsupported
		clock.advance(cfg.Samples.Interval)
		d.Tick()
	}
	before := nvmlCalls(device(lib, 0))
	gpmBefore := len(lib.GpmSampleGetCalls()) + len(lib.GpmMetricsGetCalls())
	for range perFlush {
		clock.advance(cfg.Samples.Interval)
		d.Tick()
	}
	calls := map[string]int{}
	for name, n := range nvmlCalls(device(lib, 0)) {
		if d := n - before[name]; d > 0 {
			calls[name] = d
		}
	}
	gpmCalls := len(lib.GpmSampleGetCalls()) + len(lib.GpmMetricsGetCalls()) - gpmBefore
	t.Logf("NVML calls per GPU per %d ticks: %v + %d GPM calls", perFlush, calls, gpmCalls)
	if gpm {
		assert.Equal(t, map[string]int{"GetFieldValues": perFlush, "GetSamples": 1}, calls)
		assert.Equal(t, 2*perFlush, gpmCalls)
	} else {
		assert.Equal(t, map[string]int{"GetFieldValues": perFlush, "GetSamples": len(sampleKinds)}, calls)
		assert.Zero(t, gpmCalls)
	}
}
