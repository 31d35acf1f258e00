package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// migState is what the scrape keeps about a GPU's MIG devices. The layout
// can change while the receiver runs (an operator re-partitions the GPU),
// so the devices are enumerated every scrape and handed to the tick, which
// samples GPM per GPU instance; profile names are kept while the MIG
// device exists. They are kept by the device's UUID, not its GPU instance
// ID: a re-partition between two scrapes can give a new instance of another
// profile the ID of one destroyed.
type migState struct {
	profiles map[string]string // MIG device UUID → its GPU instance's profile name
}

func migEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuMigMemoryUsage.Enabled || m.NvidiaGpuMigMemoryLimit.Enabled || migGPMEnabled(m)
}

func migGPMEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuMigSmActivity.Enabled || m.NvidiaGpuMigTensorActivity.Enabled || m.NvidiaGpuMigDramActivity.Enabled
}

// readMIG reports one set of memory series per MIG device of a GPU in MIG
// mode and hands the layout to the GPU's tick. GPUs without MIG answer
// NOT_SUPPORTED once and are not asked again; a MIG-capable GPU with MIG
// off costs one call a scrape.
func (s *gpuScraper) readMIG(g *gpu, ts pcommon.Timestamp) nvml.Return {
	mode, _, ret := g.dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return ret
	}
	st := &g.mig
	if mode != nvml.DEVICE_MIG_ENABLE {
		st.profiles = nil
		g.tick.migLayout.Store(nil)
		return nvml.SUCCESS
	}
	if st.profiles == nil {
		st.profiles = map[string]string{}
	}
	slots, ret := g.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return ret
	}
	live := map[string]bool{}
	var layout []migInstance
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
		live[uuid] = true
		inst := migInstance{uuid: uuid, profile: st.profile(g.dev, uuid, gi), gi: int64(gi), ci: int64(ci)}
		layout = append(layout, inst)
		if s.cfg.Metrics.NvidiaGpuMigMemoryUsage.Enabled || s.cfg.Metrics.NvidiaGpuMigMemoryLimit.Enabled {
			if mem, ret := mig.GetMemoryInfo(); ret == nvml.SUCCESS {
				g.mb.RecordNvidiaGpuMigMemoryUsageDataPoint(ts, int64(mem.Used), g.id, g.name, uuid, inst.gi, inst.ci, inst.profile)
				g.mb.RecordNvidiaGpuMigMemoryLimitDataPoint(ts, int64(mem.Total), g.id, g.name, uuid, inst.gi, inst.ci, inst.profile)
			}
		}
	}
	for uuid := range st.profiles {
		if !live[uuid] {
			delete(st.profiles, uuid)
		}
	}
	g.tick.migLayout.Store(&layout)
	return nvml.SUCCESS
}

// profile names a GPU instance's profile the way nvidia-smi does
// ("3g.71gb"), reading it once per MIG device.
func (st *migState) profile(dev nvml.Device, uuid string, gi int) string {
	if p, ok := st.profiles[uuid]; ok {
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
	st.profiles[uuid] = p
	return p
}
