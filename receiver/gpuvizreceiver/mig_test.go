package gpuvizreceiver

import (
	"context"
	"errors"
	"go.uber.org/zap"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withMIG puts GPU 0 of a fixture in MIG mode with two 3g.40gb GPU
// instances, the first holding two compute instances.
func withMIG(lib *server.Server) (migs []*mock.Device) {
	parent := device(lib, 0)
	for i, ids := range [][2]int{{1, 0}, {1, 1}, {2, 0}} {
		gi, ci := ids[0], ids[1]
		migs = append(migs, &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return []string{"MIG-a", "MIG-b", "MIG-c"}[i], nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return gi, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ci, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: 40 << 30, Used: uint64(i+1) << 30}, nvml.SUCCESS
			},
		})
	}
	parent.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	parent.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	parent.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < len(migs) {
			return migs[i], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	parent.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		return &mock.GpuInstance{GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) {
			return nvml.GpuInstanceInfo{Id: uint32(id), ProfileId: nvml.GPU_INSTANCE_PROFILE_3_SLICE}, nvml.SUCCESS
		}}, nvml.SUCCESS
	}
	lib.GpmMigSampleGetFunc = func(nvml.Device, int, nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	return migs
}

func TestMIGDevicesGetTheirOwnSeries(t *testing.T) {
	lib := fixtureServer(2)
	withMIG(lib)
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	time.Sleep(gpmMinInterval)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)

	type key struct {
		mig    string
		gi, ci int64
	}
	usage := map[key]float64{}
	tensor := map[key]float64{}
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name != "nvidia.gpu.mig.memory.usage" && name != "nvidia.gpu.mig.tensor.activity" {
			return
		}
		assert.Equal(t, device(lib, 0).UUID, attrs["hw.id"], "parented to the physical GPU")
		assert.Equal(t, "3g.40gb", attrs["nvidia.gpu.mig.profile"])
		k := key{attrs["nvidia.gpu.mig.id"].(string), attrs["nvidia.gpu.mig.gpu_instance_id"].(int64), attrs["nvidia.gpu.mig.compute_instance_id"].(int64)}
		if name == "nvidia.gpu.mig.memory.usage" {
			usage[k] = v
		} else {
			tensor[k] = v
		}
	})
	assert.Equal(t, map[key]float64{{"MIG-a", 1, 0}: 1 << 30, {"MIG-b", 1, 1}: 2 << 30, {"MIG-c", 2, 0}: 3 << 30}, usage)
	assert.Len(t, tensor, 3)
	// GPM samples GPU instances: two instances, two samples each per scrape.
	assert.Len(t, lib.GpmMigSampleGetCalls(), 4)
	assert.Len(t, s.gpus[0].tick.migGPM, 2)
	// GPU 1 has MIG off: no MIG series.
	assert.Empty(t, pointsOf(m, "nvidia.gpu.mig.memory.usage", nil)[device(lib, 1).UUID])
}

func TestMIGInstancesThatGoAwayAreForgotten(t *testing.T) {
	lib := fixtureServer(1)
	migs := withMIG(lib)
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	require.Len(t, s.gpus[0].tick.migGPM, 2)

	// The operator re-partitions: GPU instance 2 is destroyed.
	device(lib, 0).GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 2 {
			return migs[i], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	freed := len(lib.GpmSampleFreeCalls())
	_, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Len(t, s.gpus[0].tick.migGPM, 1)
	assert.Len(t, lib.GpmSampleFreeCalls(), freed+2, "its two GPM buffers are freed")

	// MIG is switched off (after a GPU reset): everything goes.
	device(lib, 0).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.SUCCESS }
	_, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, s.gpus[0].tick.migGPM)
}

func TestNoMIGOnGPUsWithoutIt(t *testing.T) {
	lib := fixtureServer(1)
	device(lib, 0).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	for range 3 {
		_, err := s.scrape(context.Background())
		require.NoError(t, err)
	}
	assert.Len(t, device(lib, 0).GetMigModeCalls(), 1, "asked once")
}

// simulatedMIG is the scrape-only configuration of two simulated GPUs in
// MIG mode, and their driver.
func simulatedMIG(t *testing.T) (*Config, nvml.Interface) {
	t.Helper()
	cfg := scrapeOnly()
	cfg.Backend = BackendSimulated
	cfg.Simulated.GPUs = 2
	cfg.Simulated.MIG = true
	lib, err := openSimulated(cfg.Simulated, zap.NewNop())
	require.NoError(t, err)
	return cfg, lib
}

func TestSimulatedMIG(t *testing.T) {
	cfg, lib := simulatedMIG(t)
	s := startScraper(t, cfg, lib, BackendSimulated)
	_, err := s.scrape(context.Background())
	require.NoError(t, err, "MIG mode's unsupported readings are not errors")
	time.Sleep(gpmMinInterval)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	profiles := map[string]string{}
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.mig.sm.activity" {
			profiles[attrs["nvidia.gpu.mig.id"].(string)] = attrs["nvidia.gpu.mig.profile"].(string)
		}
	})
	assert.Len(t, profiles, 4, "two instances on each of two GPUs")
	for _, p := range profiles {
		assert.Equal(t, "3g.71gb", p)
	}
	assert.Empty(t, pointsOf(m, "hw.gpu.utilization", map[string]any{"hw.gpu.task": "general"}), "not in MIG mode")
	assert.NotEmpty(t, pointsOf(m, "hw.power", nil))
	assert.Len(t, pointsOf(m, "nvidia.gpu.process.memory.usage", nil), 2, "process memory without process utilisation, on both GPUs")
	for id, v := range pointsOf(m, "nvidia.gpu.process.memory.usage", nil) {
		assert.Len(t, v, 2, "%s: a worker per instance", id)
	}
}

// A driver with GPM but without GPM samples per GPU instance
// (nvmlGpmMigSampleGet) is never asked for them: calling a symbol the
// library lacks kills the process.
func TestMIGGPMIsNotCalledWithoutItsSymbol(t *testing.T) {
	lib := fixtureServer(1)
	withMIG(lib)
	lib.LookupSymbolFunc = func(name string) error {
		if name == "nvmlGpmMigSampleGet" {
			return errors.New("undefined symbol")
		}
		return nil
	}
	var called atomic.Int32
	lib.GpmMigSampleGetFunc = func(nvml.Device, int, nvml.GpmSample) nvml.Return {
		called.Add(1)
		return nvml.SUCCESS
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	time.Sleep(gpmMinInterval)
	_, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Zero(t, called.Load())
}

// An operator re-partitions between two scrapes: GPU instance 2 is
// destroyed and a GPU instance of another profile is created that gets
// the same ID back (a new MIG device, a new UUID). Its series carry the new
// profile, not the name cached for the instance that had the ID before.
func TestMIGInstanceIDReusedWithAnotherProfile(t *testing.T) {
	lib := fixtureServer(1)
	migs := withMIG(lib)
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	profileOf := func() map[string]string {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		out := map[string]string{}
		forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
			if name == "nvidia.gpu.mig.memory.usage" {
				out[attrs["nvidia.gpu.mig.id"].(string)] = attrs["nvidia.gpu.mig.profile"].(string)
			}
		})
		return out
	}
	require.Equal(t, "3g.40gb", profileOf()["MIG-c"])

	parent := device(lib, 0)
	migs[2] = &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-d", nvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 2, nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 10 << 30, Used: 1 << 30}, nvml.SUCCESS
		},
	}
	inner := parent.GetGpuInstanceByIdFunc
	parent.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		if id != 2 {
			return inner(id)
		}
		return &mock.GpuInstance{GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) {
			return nvml.GpuInstanceInfo{Id: 2, ProfileId: nvml.GPU_INSTANCE_PROFILE_1_SLICE}, nvml.SUCCESS
		}}, nvml.SUCCESS
	}
	got := profileOf()
	assert.Equal(t, "3g.40gb", got["MIG-a"])
	assert.Equal(t, "1g.10gb", got["MIG-d"], "the new instance's own profile")
}

// Drivers answer an empty MIG slot NOT_FOUND or INVALID_ARGUMENT (as
// go-nvlib's VisitMigDevices has it): either is a slot to skip, not a
// lost GPU.
func TestMIGEmptySlotsAnsweredInvalidArgument(t *testing.T) {
	lib := fixtureServer(1)
	migs := withMIG(lib)
	device(lib, 0).GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < len(migs) {
			return migs[i], nvml.SUCCESS
		}
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "ok", stateOf(m, device(lib, 0).UUID))
	assert.Len(t, pointsOf(m, "nvidia.gpu.mig.memory.usage", nil)[device(lib, 0).UUID], 3)
}

// With MIG switched off the instances' profile names are dropped; with
// the MIG memory metrics off their memory is not asked for.
func TestMIGOffForgetsProfilesAndMemoryOffCostsNoCalls(t *testing.T) {
	lib := fixtureServer(1)
	migs := withMIG(lib)
	cfg := scrapeOnly()
	cfg.Metrics.NvidiaGpuMigMemoryUsage.Enabled = false
	cfg.Metrics.NvidiaGpuMigMemoryLimit.Enabled = false
	s := startScraper(t, cfg, lib, BackendNVML)
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Len(t, s.gpus[0].mig.profiles, 3)
	for _, mig := range migs {
		assert.Empty(t, mig.GetMemoryInfoCalls())
	}

	device(lib, 0).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.SUCCESS }
	_, err = s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, s.gpus[0].mig.profiles)
}
