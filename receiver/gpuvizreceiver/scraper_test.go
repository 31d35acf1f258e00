package gpuvizreceiver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pmetrictest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/collector/scraper/scrapererror"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/internal/podresources/podresourcestest"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// fixtureServer is a go-nvml DGX H100 mock with n GPUs whose dynamic calls
// return fixed, distinct values per GPU, so that every unit conversion shows
// in the golden file.
func fixtureServer(n int) *server.Server {
	s := dgxh100.NewWithGPUs(gpus.Multiple(n, gpus.H100_SXM5_80GB)...)
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.UUID = fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i)
		k := uint32(i)
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for j, c := range fmt.Sprintf("00000000:%02X:00.0", 0x18+i) {
				p.BusId[j] = int8(c)
			}
			return p, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 90 + k, Memory: 40 + k}, nvml.SUCCESS
		}
		dev.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 0, 167000, nvml.SUCCESS }
		dev.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 5, 167000, nvml.SUCCESS }
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			total := uint64(80 << 30)
			used := uint64(20+k) << 30
			return nvml.Memory_v2{Total: total, Reserved: 512 << 20, Used: used, Free: total - used - 512<<20}, nvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 412345 + k, nvml.SUCCESS }
		var energyCalls atomic.Uint64 // the counter grows: 1 J a call
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			return 123456789 + uint64(k) + 1000*energyCalls.Add(1), nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 61 + k, nvml.SUCCESS }
		dev.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			switch c {
			case nvml.CLOCK_MEM:
				return 2619, nvml.SUCCESS
			default:
				return 1980 - 10*k, nvml.SUCCESS
			}
		}
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
		dev.GetPerformanceStateFunc = func() (nvml.Pstates, nvml.Return) { return nvml.PSTATE_0, nvml.SUCCESS }
		dev.GetFanSpeedFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
			return nvml.ClocksEventReasonSwPowerCap, nvml.SUCCESS
		}
		dev.GetFieldValuesFunc = fixtureFields(k)
		dev.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
		dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
		dev.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 8, nvml.SUCCESS }
		dev.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		var sampleCalls uint64
		dev.GetSamplesFunc = func(kind nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
			// Two new samples per call, at µs timestamps that only grow.
			sampleCalls++
			var out []nvml.Sample
			for j := range uint64(2) {
				smp := nvml.Sample{TimeStamp: sampleCalls*1_000_000 + j*166_667}
				binary.LittleEndian.PutUint32(smp.SampleValue[:], 50+uint32(kind)+uint32(j))
				if smp.TimeStamp > lastSeen {
					out = append(out, smp)
				}
			}
			return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 1000 + k, UsedGpuMemory: 10 << 30}, {Pid: 2000 + k, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
		}
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return []nvml.ProcessUtilizationSample{{Pid: 1000 + k, TimeStamp: 5, SmUtil: 70, MemUtil: 60}}, nvml.SUCCESS
		}
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	s.GpmQueryDeviceSupportFunc = func(nvml.Device) (nvml.GpmSupport, nvml.Return) {
		return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS
	}
	s.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { return &mock.GpmSample{}, nvml.SUCCESS }
	s.GpmSampleFreeFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	s.GpmSampleGetFunc = func(nvml.Device, nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	s.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		for i := range m.NumMetrics {
			// Percentages, and MiB/s for the bandwidths: 4 × the metric ID.
			m.Metrics[i].Value = 4 * float64(m.Metrics[i].MetricId)
		}
		return nvml.SUCCESS
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return &mock.EventSet{}, nvml.SUCCESS }
	s.EventSetFreeFunc = func(nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	s.EventSetWaitFunc = func(_ nvml.EventSet, ms uint32) (nvml.EventData, nvml.Return) {
		time.Sleep(5 * time.Millisecond)
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	return s
}

// fixtureFields answers every field value the receiver asks for with
// field ID × 1000 + GPU, except retired pages (NOT_SUPPORTED, as on Ampere
// and newer), the energy counter, which grows by 1 J per call, the PCIe
// byte counters, which grow by 1 GiB per call, and the NVLinks, which are
// an H100's: 18 links of 26562 + GPU MB/s, as unsigned ints.
func fixtureFields(k uint32) func([]nvml.FieldValue) nvml.Return {
	var calls atomic.Uint64 // the scrape and the sampling clock both call
	return func(values []nvml.FieldValue) nvml.Return {
		calls := calls.Add(1)
		for i := range values {
			v := &values[i]
			v.NvmlReturn = uint32(nvml.SUCCESS)
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			x := uint64(v.FieldId)*1000 + uint64(k)
			switch v.FieldId {
			case nvml.FI_DEV_RETIRED_SBE, nvml.FI_DEV_RETIRED_DBE, nvml.FI_DEV_RETIRED_PENDING:
				v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			case nvml.FI_DEV_PCIE_COUNT_RX_BYTES, nvml.FI_DEV_PCIE_COUNT_TX_BYTES:
				x = calls << 30
			case nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION:
				x += 1000 * calls
			case nvml.FI_DEV_REMAPPED_PENDING, nvml.FI_DEV_REMAPPED_FAILURE, nvml.FI_DEV_ECC_DBE_VOL_TOTAL:
				x = 0
			case nvml.FI_DEV_NVLINK_LINK_COUNT:
				v.ValueType, x = uint32(nvml.VALUE_TYPE_UNSIGNED_INT), 18
			case nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON:
				v.ValueType, x = uint32(nvml.VALUE_TYPE_UNSIGNED_INT), 26_562+uint64(k)
			}
			binary.LittleEndian.PutUint64(v.Value[:], x)
		}
		return nvml.SUCCESS
	}
}

func device(s *server.Server, i int) *server.Device { return s.Devices[i].(*server.Device) }

// startScraper starts a scraper reading lib as if it were the named backend.
func startScraper(t *testing.T, cfg *Config, lib nvml.Interface, backend Backend) *gpuScraper {
	t.Helper()
	s := newGPUScraper(cfg, receivertest.NewNopSettings(metadata.Type))
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, backend, nil }
	// A made-up procfs: process 1000 is a containerised vLLM server.
	s.procRoot = filepath.Join("testdata", "proc")
	require.NoError(t, s.start(context.Background(), nil))
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })
	return s
}

func defaultConfig() *Config { return createDefaultConfig().(*Config) }

// scrapeOnly is the default configuration with samples off: the scrape then
// makes the fast readings (GPM, energy, power, throttle time) itself.
func scrapeOnly() *Config {
	cfg := defaultConfig()
	cfg.Samples.Enabled = false
	return cfg
}

func compareGolden(t *testing.T, name string, got pmetric.Metrics) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	// Regenerate with: go test ./receiver/gpuvizreceiver -run TestScrapeGolden -update
	if *update {
		require.NoError(t, golden.WriteMetrics(t, path, got))
	}
	want, err := golden.ReadMetrics(path)
	require.NoError(t, err)
	require.NoError(t, pmetrictest.CompareMetrics(want, got,
		pmetrictest.IgnoreTimestamp(), pmetrictest.IgnoreStartTimestamp(),
		pmetrictest.IgnoreResourceAttributeValue("host.name"),
		pmetrictest.IgnoreMetricsOrder(), pmetrictest.IgnoreMetricDataPointsOrder()))
}

func TestScrapeGolden(t *testing.T) {
	for name, cfg := range map[string]*Config{
		"scrape.yaml":             defaultConfig(), // the fast readings are the sampling clock's
		"scrape_samples_off.yaml": scrapeOnly(),
	} {
		t.Run(name, func(t *testing.T) {
			// GPU 0 is a vLLM pod's; GPU 1 is time-sliced between two pods,
			// one of them naming it by index.
			k := podresourcestest.New(t)
			k.Set(podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", "GPU-00000000-0000-0000-0000-000000000000")),
				podresourcestest.Pod("llm", "small-a", podresourcestest.Container("srv", "nvidia.com/gpu.shared", "GPU-00000000-0000-0000-0000-000000000001::0")),
				podresourcestest.Pod("llm", "small-b", podresourcestest.Container("srv", "nvidia.com/gpu.shared", "1::1")))
			k.Start(t)
			cfg.Kubernetes.PodResources.Socket = k.Path
			// Process 2000 on GPU 0 is a Slurm job step (its environment);
			// the mapping directory gives GPU 1 to two jobs.
			jobs, err := filepath.Abs(filepath.Join("testdata", "slurm", "jobs"))
			require.NoError(t, err)
			cfg.Slurm.JobMappingDir = jobs
			s := startScraper(t, cfg, fixtureServer(2), BackendNVML)
			require.Eventually(t, func() bool { return s.allocation() != nil }, 5*time.Second, 5*time.Millisecond)
			// The first scrape opens the GPM interval and sets the counters'
			// base; the second is the steady state.
			_, err = s.scrape(context.Background())
			require.NoError(t, err)
			time.Sleep(gpmMinInterval)
			m, err := s.scrape(context.Background())
			require.NoError(t, err)
			compareGolden(t, name, m)
		})
	}
}

func TestScrapeSimulatedIsMarked(t *testing.T) {
	seen := map[string]bool{}
	// Two scrapes and the ticks between them, flushed: GPM compares two
	// ticks. The H200s have GPM; the A100s have not, and their flush ticks
	// drain the driver's sample buffers instead.
	var batches []pmetric.Metrics
	for _, model := range []string{"h200", "a100"} {
		cfg := defaultConfig()
		cfg.Backend = BackendSimulated
		cfg.Simulated.GPUs, cfg.Simulated.Model = 2, model
		batches = append(batches, driveSimulated(t, cfg, 2, 8)...)
	}
	for _, m := range batches {
		backend, ok := m.ResourceMetrics().At(0).Resource().Attributes().Get("gpuviz.backend")
		require.True(t, ok)
		assert.Equal(t, "simulated", backend.Str())
		forEachPoint(m, func(metric string, attrs map[string]any, _ float64) {
			seen[metric] = true
			assert.Contains(t, attrs["hw.id"], "simulated", metric)
			if metric == "nvidia.gpu.info" || strings.HasPrefix(metric, "hw.") { // the full identity
				assert.Contains(t, attrs["hw.model"], "(simulated)", metric)
			}
		})
	}
	for _, name := range []string{"hw.gpu.utilization", "hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.gpu.memory.utilization",
		"hw.power", "hw.energy", "hw.temperature", "hw.status", "nvidia.gpu.memory_controller.utilization",
		"nvidia.gpu.clock.frequency", "nvidia.gpu.power.limit", "nvidia.gpu.performance_state", "nvidia.gpu.info",
		"hw.errors", "hw.gpu.io", "nvidia.gpu.throttle.active", "nvidia.gpu.throttle.time", "nvidia.gpu.nvlink.io",
		"nvidia.gpu.nvlink.errors", "nvidia.gpu.nvlink.capacity", "nvidia.gpu.pcie.link.generation", "nvidia.gpu.pcie.link.width", "nvidia.gpu.pcie.replays",
		"nvidia.gpu.memory.remapped_rows", "nvidia.gpu.memory.remap.pending", "nvidia.gpu.memory.remap.failed",
		"nvidia.gpu.sm.activity", "nvidia.gpu.sm.occupancy", "nvidia.gpu.tensor.activity", "nvidia.gpu.dram.activity",
		"nvidia.gpu.pipe.activity", "nvidia.gpu.pcie.throughput", "nvidia.gpu.nvlink.throughput",
		"nvidia.gpu.samples.utilization", "nvidia.gpu.samples.memory_controller.utilization", "nvidia.gpu.samples.power",
		"nvidia.gpu.samples.sm_clock", "nvidia.gpu.process.memory.usage", "nvidia.gpu.process.utilization"} {
		assert.True(t, seen[name], "simulated backend emits %s", name)
	}
	// A healthy simulated GPU: no Xid, no retired pages (Hopper remaps rows).
	assert.False(t, seen["nvidia.gpu.xid.errors"])
	assert.False(t, seen["nvidia.gpu.memory.retired_pages"])
	// SXM boards have no fan: the simulation says NOT_SUPPORTED, as NVML does.
	assert.False(t, seen["nvidia.gpu.fan.speed"])
}

// forEachPoint calls f for every number data point, with its attributes.
func forEachPoint(m pmetric.Metrics, f func(metric string, attrs map[string]any, v float64)) {
	forEachPointTS(m, func(metric string, attrs map[string]any, _ pcommon.Timestamp, v float64) { f(metric, attrs, v) })
}

// pointsOf returns the values of metric per hw.id, for points whose
// attributes include match.
func pointsOf(m pmetric.Metrics, metric string, match map[string]any) map[string][]float64 {
	out := map[string][]float64{}
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name != metric {
			return
		}
		for k, want := range match {
			if attrs[k] != want {
				return
			}
		}
		id := attrs["hw.id"].(string)
		out[id] = append(out[id], v)
	})
	return out
}

func TestFailingAndLostGPUsLeaveOthersIntact(t *testing.T) {
	lib := fixtureServer(4)
	// GPU 1: one reading fails. GPU 2: lost, every call says so.
	device(lib, 1).GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	lost := device(lib, 2)
	lost.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)

	m, err := s.scrape(context.Background())
	require.Error(t, err)
	assert.True(t, scrapererror.IsPartialScrapeError(err), "a failing GPU is a partial scrape error, not a failed scrape: %v", err)
	assert.ErrorContains(t, err, "GPU 2")
	assert.ErrorContains(t, err, "lost")
	assert.ErrorContains(t, err, "GPU 1")

	temperature := pointsOf(m, "hw.temperature", nil)
	assert.Len(t, temperature, 2, "temperature of GPUs 0 and 3 only")
	assert.Contains(t, temperature, device(lib, 0).UUID)
	assert.Contains(t, temperature, device(lib, 3).UUID)
	// GPU 1 lost only its temperature reading.
	assert.Len(t, pointsOf(m, "hw.power", nil), 3)
	// The lost GPU made no further calls in this scrape.
	assert.Empty(t, lost.GetTemperatureCalls())
	assert.Empty(t, lost.GetFieldValuesCalls())

	state := func(id string) map[string]float64 {
		out := map[string]float64{}
		forEachPoint(m, func(name string, attrs map[string]any, v float64) {
			if name == "hw.status" && attrs["hw.id"] == id {
				out[attrs["hw.state"].(string)] = v
			}
		})
		return out
	}
	assert.Equal(t, map[string]float64{"ok": 1, "degraded": 0, "failed": 0}, state(device(lib, 0).UUID))
	assert.Equal(t, map[string]float64{"ok": 0, "degraded": 1, "failed": 0}, state(device(lib, 1).UUID))
	assert.Equal(t, map[string]float64{"ok": 0, "degraded": 0, "failed": 1}, state(device(lib, 2).UUID))
	assert.Equal(t, map[string]float64{"ok": 1, "degraded": 0, "failed": 0}, state(device(lib, 3).UUID))

	// The GPU comes back: it is read again and reported ok.
	lost.GetUtilizationRatesFunc = device(lib, 0).GetUtilizationRatesFunc
	m, err = s.scrape(context.Background())
	require.Error(t, err) // GPU 1's temperature still fails
	assert.NotContains(t, err.Error(), "lost")
	assert.Len(t, pointsOf(m, "hw.temperature", nil), 3)
	assert.Equal(t, []float64{1}, pointsOf(m, "hw.status", map[string]any{"hw.state": "ok"})[lost.UUID])
}

func TestUnsupportedReadingIsAskedOnce(t *testing.T) {
	lib := fixtureServer(1)
	s := startScraper(t, defaultConfig(), lib, BackendNVML)
	for range 3 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err, "NOT_SUPPORTED is not an error")
		assert.Empty(t, pointsOf(m, "nvidia.gpu.fan.speed", nil))
		assert.Len(t, pointsOf(m, "hw.temperature", nil), 1)
	}
	assert.Len(t, device(lib, 0).GetFanSpeedCalls(), 1)
	assert.Len(t, device(lib, 0).GetTemperatureCalls(), 3)
}

func TestMissingSymbolsAreNeverCalled(t *testing.T) {
	lib := fixtureServer(1)
	lib.LookupSymbolFunc = func(name string) error {
		switch name {
		case "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetMemoryInfo_v2":
			return errors.New("undefined symbol")
		}
		return nil
	}
	dev := device(lib, 0)
	// Were they called, the mock would panic on the missing funcs.
	dev.GetTotalEnergyConsumptionFunc = nil
	dev.GetMemoryInfo_v2Func = nil
	dev.MemoryInfo = nvml.Memory{Total: 80 << 30, Used: 30 << 30, Free: 50 << 30}
	// Nor does the driver have the energy field the tick reads first.
	dev.GetFieldValuesFunc = withoutFields(dev.GetFieldValuesFunc, nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION)

	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pointsOf(m, "hw.energy", nil))
	assert.Equal(t, []float64{30 << 30}, pointsOf(m, "hw.gpu.memory.usage", nil)[dev.UUID], "v1 memory call is used")
	assert.Equal(t, []float64{0.375}, pointsOf(m, "hw.gpu.memory.utilization", nil)[dev.UUID])
}

// withoutFields makes field values answer NOT_SUPPORTED for ids, as a
// driver that does not know them does.
func withoutFields(f func([]nvml.FieldValue) nvml.Return, ids ...uint32) func([]nvml.FieldValue) nvml.Return {
	return func(values []nvml.FieldValue) nvml.Return {
		ret := f(values)
		for i := range values {
			if slices.Contains(ids, values[i].FieldId) {
				values[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return ret
	}
}

func TestDisabledMetricsCostNoCalls(t *testing.T) {
	lib := fixtureServer(1)
	cfg := defaultConfig()
	cfg.Metrics.HwGpuMemoryUsage.Enabled = false
	cfg.Metrics.HwGpuMemoryLimit.Enabled = false
	cfg.Metrics.HwGpuMemoryUtilization.Enabled = false
	cfg.Metrics.NvidiaGpuClockFrequency.Enabled = false
	s := startScraper(t, cfg, lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, device(lib, 0).GetMemoryInfo_v2Calls())
	assert.Empty(t, device(lib, 0).GetClockInfoCalls())
	assert.Empty(t, pointsOf(m, "hw.gpu.memory.usage", nil))
	assert.Len(t, pointsOf(m, "hw.temperature", nil), 1)
}

func TestDeviceSelection(t *testing.T) {
	lib := fixtureServer(4)
	cfg := defaultConfig()
	cfg.Devices = []DeviceRef{"1", DeviceRef(device(lib, 3).UUID)}
	s := startScraper(t, cfg, lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	got := pointsOf(m, "nvidia.gpu.info", nil)
	assert.Len(t, got, 2)
	assert.Contains(t, got, device(lib, 1).UUID)
	assert.Contains(t, got, device(lib, 3).UUID)
}

func TestDeviceSelectionErrors(t *testing.T) {
	for _, tc := range []struct {
		devices []DeviceRef
		want    string
	}{
		{[]DeviceRef{"0", "4"}, "devices[1]: there is no GPU 4: NVML sees 4 GPUs (0 to 3)"},
		{[]DeviceRef{"GPU-does-not-exist"}, `devices[0]: no GPU has UUID "GPU-does-not-exist"`},
		{[]DeviceRef{"1", DeviceRef(device(fixtureServer(4), 1).UUID)}, "devices[1]: GPU 1 is devices[0] too"},
	} {
		cfg := defaultConfig()
		cfg.Devices = tc.devices
		s := newGPUScraper(cfg, receivertest.NewNopSettings(metadata.Type))
		lib := fixtureServer(4)
		s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, BackendNVML, nil }
		assert.ErrorContains(t, s.start(context.Background(), nil), tc.want)
		assert.Len(t, lib.ShutdownCalls(), 1, "NVML is released when start fails")
	}
}

func TestScrapeStopsAtDeadline(t *testing.T) {
	s := startScraper(t, defaultConfig(), fixtureServer(2), BackendNVML)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m, err := s.scrape(ctx)
	require.Error(t, err)
	assert.True(t, scrapererror.IsPartialScrapeError(err))
	assert.Zero(t, m.DataPointCount())
}

// A process whose memory NVML cannot tell (NVML_VALUE_NOT_AVAILABLE, in MIG
// mode inside containers) gets no memory reading, rather than -1 bytes,
// and does not push the processes NVML can tell about out of the top.
func TestProcessMemoryNotAvailableIsNoReading(t *testing.T) {
	lib := fixtureServer(1)
	device(lib, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 1000, UsedGpuMemory: math.MaxUint64}, {Pid: 2000, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	cfg := scrapeOnly()
	cfg.Processes.Top = 1
	s := startScraper(t, cfg, lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []float64{1 << 30}, pointsOf(m, "nvidia.gpu.process.memory.usage", nil)[device(lib, 0).UUID])
}
