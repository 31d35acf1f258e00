package gpuvizreceiver

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
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
	st := migState{profiles: map[int]string{}}
	assert.Equal(t, "1g.5gb", st.profile(dev, 1))
	assert.Equal(t, "7g.40gb", st.profile(dev, 2))
	assert.Equal(t, "3g.20gb", st.profile(dev, 3))
}
