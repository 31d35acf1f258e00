package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// migState is what the receiver keeps about a GPU's MIG devices. The
// layout can change while the receiver runs (an operator re-partitions the
// GPU), so the devices are enumerated every scrape; what is per GPU
// instance — its profile name and GPM sample buffers — is kept while the
// instance exists.
type migState struct {
	profiles map[int]string    // GPU instance ID → profile name
	gpm      map[int]*gpmState // GPU instance ID → GPM buffers
}

func migEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuMigMemoryUsage.Enabled || m.NvidiaGpuMigMemoryLimit.Enabled || migGPMEnabled(m)
}

func migGPMEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuMigSmActivity.Enabled || m.NvidiaGpuMigTensorActivity.Enabled || m.NvidiaGpuMigDramActivity.Enabled
}

// readMIG reports one set of series per MIG device of a GPU in MIG mode.
// GPUs without MIG answer NOT_SUPPORTED once and are not asked again; a
// MIG-capable GPU with MIG off costs one call a scrape.
func (s *gpuScraper) readMIG(g *gpu, ts pcommon.Timestamp) nvml.Return {
	mode, _, ret := g.dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return ret
	}
	st := &g.mig
	if mode != nvml.DEVICE_MIG_ENABLE {
		st.release(s.lib, nil)
		return nvml.SUCCESS
	}
	if st.profiles == nil {
		st.profiles, st.gpm = map[int]string{}, map[int]*gpmState{}
	}
	slots, ret := g.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return ret
	}
	live := map[int]bool{}
	var measured map[int]*nvml.GpmMetricsGetType
	for i := range slots {
		mig, ret := g.dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		if ret != nvml.SUCCESS {
			return ret
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			return ret
		}
		gi, ret := mig.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return ret
		}
		ci, ret := mig.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			return ret
		}
		live[gi] = true
		profile := st.profile(g.dev, gi)
		id, name, gi64, ci64 := g.id, g.name, int64(gi), int64(ci)

		if s.cfg.Metrics.NvidiaGpuMigMemoryUsage.Enabled || s.cfg.Metrics.NvidiaGpuMigMemoryLimit.Enabled {
			if mem, ret := mig.GetMemoryInfo(); ret == nvml.SUCCESS {
				s.mb.RecordNvidiaGpuMigMemoryUsageDataPoint(ts, int64(mem.Used), id, name, uuid, gi64, ci64, profile)
				s.mb.RecordNvidiaGpuMigMemoryLimitDataPoint(ts, int64(mem.Total), id, name, uuid, gi64, ci64, profile)
			}
		}
		if g.gpm == nil || !migGPMEnabled(&s.cfg.Metrics) { // GPM: the GPU must support it
			continue
		}
		// GPM samples a GPU instance: measure each once, record on each of
		// its compute instances.
		if measured == nil {
			measured = map[int]*nvml.GpmMetricsGetType{}
		}
		req, done := measured[gi]
		if !done {
			req = st.measureGPM(s, g, gi)
			measured[gi] = req
		}
		if req == nil {
			continue
		}
		for k := range gpmMetrics {
			m := &req.Metrics[k]
			if nvml.Return(m.NvmlReturn) != nvml.SUCCESS {
				continue
			}
			switch gpmMetrics[k] {
			case nvml.GPM_METRIC_SM_UTIL:
				s.mb.RecordNvidiaGpuMigSmActivityDataPoint(ts, m.Value/100, id, name, uuid, gi64, ci64, profile)
			case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
				s.mb.RecordNvidiaGpuMigTensorActivityDataPoint(ts, m.Value/100, id, name, uuid, gi64, ci64, profile)
			case nvml.GPM_METRIC_DRAM_BW_UTIL:
				s.mb.RecordNvidiaGpuMigDramActivityDataPoint(ts, m.Value/100, id, name, uuid, gi64, ci64, profile)
			}
		}
	}
	st.release(s.lib, live)
	return nvml.SUCCESS
}

// measureGPM runs a GPU instance's GPM interval; nil until it has two
// samples far enough apart, or when GPM fails for it.
func (st *migState) measureGPM(s *gpuScraper, g *gpu, gi int) *nvml.GpmMetricsGetType {
	buf, ok := st.gpm[gi]
	if !ok {
		buf = newGPMState(s.lib)
		st.gpm[gi] = buf // nil too: NVML could not allocate, do not retry every scrape
	}
	if buf == nil {
		return nil
	}
	req, _ := buf.measure(s.lib, s.now(), func(smp nvml.GpmSample) nvml.Return {
		return s.lib.GpmMigSampleGet(g.dev, gi, smp)
	})
	return req
}

// profile names a GPU instance's profile the way nvidia-smi does
// ("3g.71gb"), reading it once per instance.
func (st *migState) profile(dev nvml.Device, gi int) string {
	if p, ok := st.profiles[gi]; ok {
		return p
	}
	var p string
	if inst, ret := dev.GetGpuInstanceById(gi); ret == nvml.SUCCESS {
		if info, ret := inst.GetInfo(); ret == nvml.SUCCESS {
			if prof, ret := dev.GetGpuInstanceProfileInfo(int(info.ProfileId)); ret == nvml.SUCCESS {
				// Memory rounded up to whole GiB, as nvidia-smi names profiles.
				p = fmt.Sprintf("%dg.%dgb", prof.SliceCount, (prof.MemorySizeMB+1023)/1024)
			}
		}
	}
	st.profiles[gi] = p
	return p
}

// release forgets GPU instances that no longer exist (all of them when
// live is nil) and frees their GPM buffers.
func (st *migState) release(lib nvml.Interface, live map[int]bool) {
	for gi, buf := range st.gpm {
		if !live[gi] {
			if buf != nil {
				buf.free(lib)
			}
			delete(st.gpm, gi)
		}
	}
	for gi := range st.profiles {
		if !live[gi] {
			delete(st.profiles, gi)
		}
	}
}
