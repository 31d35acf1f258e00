package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"bytes"
	"regexp"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/internal/podresources"
)

// startPods starts listing the kubelet's GPU allocations, when configured.
func (s *gpuScraper) startPods() error {
	pr := s.cfg.Kubernetes.PodResources
	if !pr.Enabled || !s.cfg.Metrics.NvidiaGpuK8sAllocation.Enabled && !processesEnabled(&s.cfg.Metrics) {
		return nil
	}
	// GPUs found after start resolve too: the kubelet is listed anew
	// every interval.
	w := podresources.NewWatcher(pr.watcher(), s.resolveDevice, s.logger)
	if err := w.Start(); err != nil {
		return err
	}
	s.pods = w
	return nil
}

// resolveDevice turns a kubelet device ID that names a GPU by number into
// its UUID: an NVML index, a device minor number, or (GKE's MIG partitions)
// a minor number and a GPU instance ID, which name the MIG device of that
// GPU instance in the layout the scrape last read. GKE's device plugin
// gives a partition's container its GPU instance's compute instance 0
// only (pkg/gpu/nvidia/mig), so that is the MIG device; a GPU whose layout
// is not read yet leaves it unresolved until a listing after the scrape
// has read it.
func (s *gpuScraper) resolveDevice(d podresources.DeviceID) (string, bool) {
	if d.Minor < 0 {
		id, ok := s.gpuIDs.Load(d.Index)
		if !ok {
			return "", false
		}
		return id.(string), true
	}
	v, ok := s.gpuMinors.Load(d.Minor)
	if !ok {
		return "", false
	}
	g := v.(*gpu)
	if d.GPUInstance < 0 {
		return g.id, true
	}
	if layout := g.tick.migLayout.Load(); layout != nil {
		for _, inst := range *layout {
			if inst.gi == int64(d.GPUInstance) && inst.ci == 0 {
				return inst.uuid, true
			}
		}
	}
	return "", false
}

// allocation returns the kubelet's latest allocation; nil when there is
// none (off, not on Kubernetes, not listed yet).
func (s *gpuScraper) allocation() podresources.Allocation {
	if s.pods == nil {
		return nil
	}
	a, _ := s.pods.History().Latest()
	return a
}

// recordAllocations reports the containers GPU g and its MIG devices are
// allocated to.
func (s *gpuScraper) recordAllocations(g *gpu, a podresources.Allocation, ts pcommon.Timestamp) {
	if len(a) == 0 || !s.cfg.Metrics.NvidiaGpuK8sAllocation.Enabled {
		return
	}
	record := func(migID string, holders []podresources.Holder) {
		for _, h := range holders {
			g.mb.RecordNvidiaGpuK8sAllocationDataPoint(ts, 1, g.id, g.name, migID, h.Namespace, h.Pod, h.Container, int64(h.Replica))
		}
	}
	record("", a[g.id])
	if layout := g.tick.migLayout.Load(); layout != nil {
		for _, inst := range *layout {
			record(inst.uuid, a[inst.uuid])
		}
	}
}

// soleHolder returns the pod GPU g is allocated to when it is exactly one
// (a process on a GPU shared by several pods cannot be told apart by the
// allocation alone: its pod UID from the cgroup still says which).
func soleHolder(a podresources.Allocation, gpuID string) (namespace, pod string) {
	hs := a[gpuID]
	if len(hs) == 0 {
		return "", ""
	}
	for _, h := range hs[1:] {
		if h.Namespace != hs[0].Namespace || h.Pod != hs[0].Pod {
			return "", ""
		}
	}
	return hs[0].Namespace, hs[0].Pod
}

// noInstance is the GpuInstanceId and ComputeInstanceId NVML gives a
// process on a GPU not in MIG mode.
const noInstance = 0xFFFFFFFF

// processHolders returns what processHolder says of each of GPU g's
// processes, from the kubelet's latest allocation and the MIG layout the
// scrape read.
func (s *gpuScraper) processHolders(g *gpu) func(nvml.ProcessInfo) (namespace, pod string) {
	a, layout := s.allocation(), g.tick.migLayout.Load()
	return func(p nvml.ProcessInfo) (string, string) { return processHolder(a, g.id, layout, p) }
}

// processHolder returns the pod a process on GPU gpuID is allocated to. On
// a GPU in MIG mode the device plugin allocates MIG devices, by their UUID:
// a process's GPU and compute instance IDs name its MIG device in the
// layout, and that device's sole holder is its pod. A process whose MIG
// device is not in the allocation (the GPU allocated whole, with MIG
// strategy none; the layout not read) takes the GPU's sole holder.
func processHolder(a podresources.Allocation, gpuID string, layout *[]migInstance, p nvml.ProcessInfo) (namespace, pod string) {
	if layout != nil && p.GpuInstanceId != noInstance {
		for _, inst := range *layout {
			if inst.gi != int64(p.GpuInstanceId) || inst.ci != int64(p.ComputeInstanceId) {
				continue
			}
			if _, ok := a[inst.uuid]; ok {
				return soleHolder(a, inst.uuid)
			}
			break
		}
	}
	return soleHolder(a, gpuID)
}

// podUIDPattern matches the pod UID in a kubelet cgroup path: the cgroupfs
// driver writes /kubepods/burstable/pod<uid>/<container>, the systemd driver
// kubepods-burstable-pod<uid with _ for ->.slice.
var podUIDPattern = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)

// podUID returns the pod UID in a /proc/<pid>/cgroup file, or "".
func podUID(cgroup []byte) string {
	for line := range bytes.SplitSeq(cgroup, []byte{'\n'}) {
		if m := podUIDPattern.FindSubmatch(line); m != nil {
			return strings.ReplaceAll(string(m[1]), "_", "-")
		}
	}
	return ""
}
