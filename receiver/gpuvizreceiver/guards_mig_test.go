package gpuvizreceiver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nvidia-smi names MIG profiles by memory rounded up to whole GB: an
// A100-SXM4-40GB's 1-slice profile has 4864 MB (go-nvml's A100 mock, as
// nvidia-smi mig -lgip shows) and is "1g.5gb", its 7-slice one (40192 MB)
// "7g.40gb".
func TestMIGProfileNamesRoundMemoryUp(t *testing.T) {
	sizes := map[int]struct {
		slices uint32
		mb     uint64
	}{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE: {1, 4864},
		nvml.GPU_INSTANCE_PROFILE_7_SLICE: {7, 40192},
		nvml.GPU_INSTANCE_PROFILE_3_SLICE: {3, 20480}, // exact: not rounded up further
	}
	profileOf := map[int]int{1: nvml.GPU_INSTANCE_PROFILE_1_SLICE, 2: nvml.GPU_INSTANCE_PROFILE_7_SLICE, 3: nvml.GPU_INSTANCE_PROFILE_3_SLICE}
	dev := &mock.Device{
		GetGpuInstanceByIdFunc: func(gi int) (nvml.GpuInstance, nvml.Return) {
			return &mock.GpuInstance{GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) {
				return nvml.GpuInstanceInfo{Id: uint32(gi), ProfileId: uint32(profileOf[gi])}, nvml.SUCCESS
			}}, nvml.SUCCESS
		},
		GetGpuInstanceProfileInfoFunc: func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
			sz := sizes[p]
			return nvml.GpuInstanceProfileInfo{Id: uint32(p), SliceCount: sz.slices, MemorySizeMB: sz.mb}, nvml.SUCCESS
		},
	}
	st := migState{profiles: map[string]string{}}
	assert.Equal(t, "1g.5gb", st.profile(dev, "MIG-1", 1))
	assert.Equal(t, "7g.40gb", st.profile(dev, "MIG-2", 2))
	assert.Equal(t, "3g.20gb", st.profile(dev, "MIG-3", 3))
}

// Each MIG compute instance's GPM series carry its own GPU and compute
// instance IDs, with the activity GPM measured for its GPU instance
// (nvmlGpmMigSampleGet samples GPU instances; compute instances of one
// GPU instance share it).
func TestMIGGPMSeriesAreTheirInstances(t *testing.T) {
	lib := fixtureServer(1)
	withMIG(lib)
	var mu sync.Mutex
	sampledGI := map[nvml.GpmSample]int{}
	lib.GpmMigSampleGetFunc = func(_ nvml.Device, gi int, smp nvml.GpmSample) nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		sampledGI[smp] = gi
		return nvml.SUCCESS
	}
	lib.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		mu.Lock()
		gi, ok := sampledGI[m.Sample2]
		mu.Unlock()
		for i := range m.NumMetrics {
			m.Metrics[i].Value = 0
			if ok && m.Metrics[i].MetricId == uint32(nvml.GPM_METRIC_SM_UTIL) {
				m.Metrics[i].Value = 10 * float64(gi) // percent
			}
		}
		return nvml.SUCCESS
	}
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
	sm := map[key]float64{}
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name == "nvidia.gpu.mig.sm.activity" {
			sm[key{attrs["nvidia.gpu.mig.id"].(string), attrs["nvidia.gpu.mig.gpu_instance_id"].(int64), attrs["nvidia.gpu.mig.compute_instance_id"].(int64)}] = v
		}
	})
	assert.Equal(t, map[key]float64{{"MIG-a", 1, 0}: 0.1, {"MIG-b", 1, 1}: 0.1, {"MIG-c", 2, 0}: 0.2}, sm)
}
