package gpuvizreceiver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/podresources"
	"github.com/gpuviz/gpuviz/internal/podresources/podresourcestest"
)

func TestPodUID(t *testing.T) {
	for _, tc := range []struct{ cgroup, want string }{
		{"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5b1a0b8e_3c2d_4e5f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-3f4e.scope\n", "5b1a0b8e-3c2d-4e5f-8a9b-0c1d2e3f4a5b"},
		{"12:memory:/kubepods/besteffort/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/3f4e2a1b\n11:cpu:/kubepods\n", "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"},
		{"0::/system.slice/docker-3f4e2a1b.scope\n", ""},
		{"0::/kubepods.slice/kubepods-pod5b1a0b8e.slice\n", ""}, // not a whole UID
		{"", ""},
	} {
		assert.Equal(t, tc.want, podUID([]byte(tc.cgroup)), tc.cgroup)
	}
}

func TestSoleHolder(t *testing.T) {
	a := podresources.Allocation{
		"GPU-0": {{Namespace: "llm", Pod: "vllm-0", Container: "vllm", Replica: -1}, {Namespace: "llm", Pod: "vllm-0", Container: "sidecar", Replica: -1}},
		"GPU-1": {{Namespace: "llm", Pod: "a", Container: "c", Replica: 0}, {Namespace: "llm", Pod: "b", Container: "c", Replica: 1}},
		// Pods of one name in two namespaces are two pods.
		"GPU-3": {{Namespace: "team-a", Pod: "vllm-0", Container: "c", Replica: 0}, {Namespace: "team-b", Pod: "vllm-0", Container: "c", Replica: 1}},
	}
	for _, tc := range []struct{ gpu, ns, pod string }{{"GPU-0", "llm", "vllm-0"}, {"GPU-1", "", ""}, {"GPU-2", "", ""}, {"GPU-3", "", ""}} {
		ns, pod := soleHolder(a, tc.gpu)
		assert.Equal(t, [2]string{tc.ns, tc.pod}, [2]string{ns, pod}, tc.gpu)
	}
	ns, pod := soleHolder(nil, "GPU-0")
	assert.Empty(t, ns+pod)
}

// startWithKubelet starts a scraper of lib whose kubelet lists pods, and
// waits for its first listing.
func startWithKubelet(t *testing.T, cfg *Config, lib nvml.Interface, backend Backend, pods ...*podresourcesv1.PodResources) *gpuScraper {
	t.Helper()
	k := podresourcestest.New(t)
	k.Set(pods...)
	k.Start(t)
	cfg.Kubernetes.PodResources.Socket = k.Path
	s := startScraper(t, cfg, lib, backend)
	require.Eventually(t, func() bool { return s.allocation() != nil }, 5*time.Second, 5*time.Millisecond)
	return s
}

// migPods are withMIG's GPU 0's MIG-a and MIG-c, held by job-a and job-c,
// and GPU 1, whole, by vllm-0.
func migPods(lib *server.Server) []*podresourcesv1.PodResources {
	return []*podresourcesv1.PodResources{
		podresourcestest.Pod("batch", "job-a", podresourcestest.Container("main", "nvidia.com/mig-3g.40gb", "MIG-a")),
		podresourcestest.Pod("batch", "job-c", podresourcestest.Container("main", "nvidia.com/mig-3g.40gb", "MIG-c")),
		podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", device(lib, 1).UUID)),
	}
}

// MIG devices allocated to pods (the mixed strategy's nvidia.com/mig-*
// resources name them by MIG UUID) are reported on their parent GPU with
// their own nvidia.gpu.mig.id; a whole GPU's allocation has none.
func TestMIGAllocationsAreReportedOnTheParentGPU(t *testing.T) {
	lib := fixtureServer(2)
	withMIG(lib)
	s := startWithKubelet(t, scrapeOnly(), lib, BackendNVML, migPods(lib)...)
	// The first scrape learns the MIG layout; the second reports on it.
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)

	type holder struct{ gpu, mig, pod string }
	var got []holder
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name == "nvidia.gpu.k8s.allocation" {
			assert.Equal(t, 1.0, v)
			got = append(got, holder{attrs["hw.id"].(string), attrs["nvidia.gpu.mig.id"].(string), attrs["k8s.pod.name"].(string)})
		}
	})
	assert.ElementsMatch(t, []holder{
		{device(lib, 0).UUID, "MIG-a", "job-a"}, {device(lib, 0).UUID, "MIG-c", "job-c"}, {device(lib, 1).UUID, "", "vllm-0"},
	}, got)
}

// On a GPU in MIG mode the device plugin allocates MIG devices: each
// process takes the pod of the MIG device its GPU and compute instance IDs
// name, from the first scrape on. A process on a MIG device no pod holds
// takes the GPU's holder (none here), and a process on a GPU without MIG
// the GPU's.
func TestProcessesOnMIGDevicesTakeTheirDevicesPod(t *testing.T) {
	lib := fixtureServer(2)
	withMIG(lib) // GPU 0: MIG-a (GI 1, CI 0), MIG-b (GI 1, CI 1), MIG-c (GI 2, CI 0)
	migProcesses(lib)
	s := startWithKubelet(t, scrapeOnly(), lib, BackendNVML, migPods(lib)...)

	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	type holder struct{ namespace, pod string }
	got := map[int64]holder{}
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" {
			got[attrs["process.pid"].(int64)] = holder{attrs["k8s.namespace.name"].(string), attrs["k8s.pod.name"].(string)}
		}
	})
	assert.Equal(t, map[int64]holder{1000: {"batch", "job-a"}, 2000: {"batch", "job-c"}, 3000: {}, 4000: {"llm", "vllm-0"}}, got)
}

// GKE's device plugin names a MIG partition nvidia<minor>/gi<N>, under
// nvidia.com/gpu: GPU instance N (NVML's ID) of the GPU with that minor
// number, whose container gets compute instance 0. Once the scrape has read
// the layout, the next listing resolves it to that MIG device: the
// allocation series names it, and its processes take its pod; a process on
// another compute instance of the GPU instance does not.
func TestGKEMIGPartitionsAreTheirGPUInstancesMIGDevice(t *testing.T) {
	lib := fixtureServer(2)
	withMIG(lib) // GPU 0: MIG-a (GI 1, CI 0), MIG-b (GI 1, CI 1), MIG-c (GI 2, CI 0)
	device(lib, 0).Minor, device(lib, 1).Minor = 1, 0
	migProcesses(lib)
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Interval = 100 * time.Millisecond
	cfg.Kubernetes.PodResources.Timeout = 100 * time.Millisecond
	s := startWithKubelet(t, cfg, lib, BackendNVML,
		podresourcestest.Pod("batch", "job-a", podresourcestest.Container("main", "nvidia.com/gpu", "nvidia1/gi1")),
		podresourcestest.Pod("batch", "job-c", podresourcestest.Container("main", "nvidia.com/gpu", "nvidia1/gi2")),
		podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", "nvidia0")))
	// The first scrape reads the layout; a listing after it resolves the
	// partitions.
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool { a := s.allocation(); return len(a["MIG-a"]) == 1 && len(a["MIG-c"]) == 1 },
		3*time.Second, 5*time.Millisecond, "nvidia1/gi1 and nvidia1/gi2 are GPU 0's MIG-a and MIG-c")
	_, unresolved := s.pods.Status()
	assert.Zero(t, unresolved)

	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	type holder struct{ gpu, mig, pod string }
	var allocated []holder
	type pod struct{ namespace, pod string }
	procs := map[int64]pod{}
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		switch name {
		case "nvidia.gpu.k8s.allocation":
			allocated = append(allocated, holder{attrs["hw.id"].(string), attrs["nvidia.gpu.mig.id"].(string), attrs["k8s.pod.name"].(string)})
		case "nvidia.gpu.process.memory.usage":
			procs[attrs["process.pid"].(int64)] = pod{attrs["k8s.namespace.name"].(string), attrs["k8s.pod.name"].(string)}
		}
	})
	assert.ElementsMatch(t, []holder{
		{device(lib, 0).UUID, "MIG-a", "job-a"}, {device(lib, 0).UUID, "MIG-c", "job-c"}, {device(lib, 1).UUID, "", "vllm-0"},
	}, allocated)
	assert.Equal(t, map[int64]pod{1000: {"batch", "job-a"}, 2000: {"batch", "job-c"}, 3000: {}, 4000: {"llm", "vllm-0"}}, procs)
}

// resolveDevice: a GKE partition is the compute instance 0 of its GPU
// instance, wherever the layout lists it; a GPU instance the layout lacks,
// a GPU whose layout is not read, or a minor number no GPU has resolve to
// nothing.
func TestResolveDevice(t *testing.T) {
	s := &gpuScraper{}
	mig, whole := &gpu{id: "GPU-m", tick: &tickState{}}, &gpu{id: "GPU-w", tick: &tickState{}}
	mig.tick.migLayout.Store(&[]migInstance{{uuid: "MIG-1-1", gi: 1, ci: 1}, {uuid: "MIG-1-0", gi: 1, ci: 0}, {uuid: "MIG-0-0", gi: 0, ci: 0}, {uuid: "MIG-3-1", gi: 3, ci: 1}})
	s.gpuMinors.Store(4, mig)
	s.gpuMinors.Store(5, whole)
	s.gpuIDs.Store(0, "GPU-w")
	for _, tc := range []struct {
		id, want string
	}{
		{"nvidia4/gi1", "MIG-1-0"},
		{"nvidia4/gi0/vgpu2", "MIG-0-0"},
		{"nvidia4/gi3", ""}, // no compute instance 0
		{"nvidia4/gi2", ""},
		{"nvidia5/gi0", ""}, // no layout read
		{"nvidia6/gi0", ""},
		{"nvidia4", "GPU-m"},
		{"gpu-5", "GPU-w"},
		{"0", "GPU-w"},
		{"1", ""},
	} {
		d, ok := podresources.ParseDeviceID(tc.id)
		require.True(t, ok, tc.id)
		uuid, ok := s.resolveDevice(d)
		assert.Equal(t, tc.want != "", ok, tc.id)
		assert.Equal(t, tc.want, uuid, tc.id)
	}
}

// The simulated backend in MIG mode lists a worker per instance with its
// GPU and compute instance IDs, as NVML does: each takes the pod holding its
// MIG device, and a worker on a MIG device no pod holds none.
func TestSimulatedMIGProcessesTakeTheirDevicesPod(t *testing.T) {
	cfg, lib := simulatedMIG(t)
	type holder struct{ namespace, pod string }
	type instance struct {
		gpu    int
		gi, ci uint32
	}
	// GPU 0's two instances are two pods'; GPU 1's first is nobody's.
	held := map[instance]holder{{0, 1, 0}: {"llm", "vllm-0"}, {0, 2, 0}: {"llm", "vllm-1"}, {1, 2, 0}: {"batch", "job-b"}}
	uuids := map[instance]string{}
	for i := range 2 {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, ret)
		for j := range 2 {
			m, ret := dev.GetMigDeviceHandleByIndex(j)
			require.Equal(t, nvml.SUCCESS, ret)
			uuid, _ := m.GetUUID()
			gi, _ := m.GetGpuInstanceId()
			ci, _ := m.GetComputeInstanceId()
			uuids[instance{i, uint32(gi), uint32(ci)}] = uuid
		}
	}
	require.Len(t, uuids, 4)
	var pods []*podresourcesv1.PodResources
	for inst, h := range held {
		pods = append(pods, podresourcestest.Pod(h.namespace, h.pod, podresourcestest.Container("main", "nvidia.com/mig-3g.71gb", uuids[inst])))
	}
	s := startWithKubelet(t, cfg, lib, BackendSimulated, pods...)

	// What each simulated process should take: the pod holding the MIG
	// device of its GPU and compute instance IDs.
	want := map[int64]holder{}
	for i := range 2 {
		dev, _ := lib.DeviceGetHandleByIndex(i)
		procs, ret := dev.GetComputeRunningProcesses()
		require.Equal(t, nvml.SUCCESS, ret)
		for _, p := range procs {
			inst := instance{i, p.GpuInstanceId, p.ComputeInstanceId}
			assert.Contains(t, uuids, inst, "process %d runs on a MIG device of GPU %d", p.Pid, i)
			want[int64(p.Pid)] = held[inst]
		}
	}
	assert.Len(t, want, 4, "a worker per instance")

	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	got := map[int64]holder{}
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" {
			got[attrs["process.pid"].(int64)] = holder{attrs["k8s.namespace.name"].(string), attrs["k8s.pod.name"].(string)}
		}
	})
	assert.Equal(t, holder{"llm", "vllm-0"}, got[int64(nvmlsim.SimulatedPID(0))], "GPU 0's worker is on its first instance")
	assert.Equal(t, want, got)
}

// processHolder: a MIG device in the allocation decides, shared or not; a
// MIG device not in it (MIG strategy none allocates the GPU whole), a
// process without instance IDs, or no layout read leave it to the GPU.
func TestProcessHolder(t *testing.T) {
	a := podresources.Allocation{
		"GPU-0": {{Namespace: "llm", Pod: "whole", Container: "c", Replica: -1}},
		"MIG-a": {{Namespace: "batch", Pod: "job-a", Container: "c", Replica: -1}},
		"MIG-b": {{Namespace: "batch", Pod: "x", Container: "c", Replica: 0}, {Namespace: "batch", Pod: "y", Container: "c", Replica: 1}},
		"MIG-d": {{Namespace: "batch", Pod: "job-d", Container: "c", Replica: -1}},
	}
	layout := &[]migInstance{{uuid: "MIG-a", gi: 1, ci: 0}, {uuid: "MIG-b", gi: 2, ci: 0}, {uuid: "MIG-c", gi: 0, ci: 0}, {uuid: "MIG-d", gi: 0, ci: 1}}
	for _, tc := range []struct {
		name    string
		layout  *[]migInstance
		gi, ci  uint32
		ns, pod string
	}{
		{"its MIG device's pod", layout, 1, 0, "batch", "job-a"},
		{"a shared MIG device", layout, 2, 0, "", ""},
		{"GPU instance 0, unallocated", layout, 0, 0, "llm", "whole"},
		{"GPU instance 0, its MIG device's pod", layout, 0, 1, "batch", "job-d"},
		{"not in the layout", layout, 1, 1, "llm", "whole"},
		{"no MIG", layout, noInstance, noInstance, "llm", "whole"},
		{"no layout read", nil, 1, 0, "llm", "whole"},
	} {
		ns, pod := processHolder(a, "GPU-0", tc.layout, nvml.ProcessInfo{Pid: 1, GpuInstanceId: tc.gi, ComputeInstanceId: tc.ci})
		assert.Equal(t, [2]string{tc.ns, tc.pod}, [2]string{ns, pod}, tc.name)
	}
}

// NVIDIA's DRA driver names a GPU gpu-<minor>, its /dev/nvidia<N>, which
// need not be its NVML index; a driver without nvmlDeviceGetMinorNumber
// leaves such names unresolved rather than guessed.
func TestDRADeviceNamesAreMinorNumbers(t *testing.T) {
	for _, hasMinor := range []bool{true, false} {
		t.Run(fmt.Sprintf("minor_number_%v", hasMinor), func(t *testing.T) {
			lib := fixtureServer(4)
			for i := range 4 {
				device(lib, i).Minor = 3 - i
			}
			lib.LookupSymbolFunc = func(name string) error {
				if name == "nvmlDeviceGetMinorNumber" && !hasMinor {
					return errors.New("no such symbol")
				}
				return nil
			}
			s := startWithKubelet(t, scrapeOnly(), lib, BackendNVML, podresourcestest.Pod("llm", "vllm-0", &podresourcesv1.ContainerResources{Name: "vllm", DynamicResources: []*podresourcesv1.DynamicResource{{
				ClaimName: "gpu", ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: "gpu.nvidia.com", DeviceName: "gpu-0"}},
			}}}))
			if !hasMinor {
				assert.Empty(t, s.allocation())
				return
			}
			assert.Equal(t, podresources.Allocation{device(lib, 3).UUID: {{Namespace: "llm", Pod: "vllm-0", Container: "vllm", Replica: -1}}}, s.allocation(),
				"gpu-0 is /dev/nvidia0, NVML's GPU 3 here")
		})
	}
}

// The device plugin's index strategy names GPUs by NVML index: a GPU left
// out at start and read a minute later has its pods too.
func TestIndexAllocationOfAGPUFoundLater(t *testing.T) {
	clock := newVirtualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	lib := faultyLib(t, 4, clock.now, nvmlsim.Fault{Kind: nvmlsim.FaultError, GPU: 2, Error: "gpu_is_lost", Duration: 30 * time.Second})
	k := podresourcestest.New(t)
	k.Set(podresourcestest.Pod("llm", "vllm-1", podresourcestest.Container("vllm", "nvidia.com/gpu", "1")),
		podresourcestest.Pod("llm", "vllm-2", podresourcestest.Container("vllm", "nvidia.com/gpu", "2")))
	k.Start(t)
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Socket = k.Path
	cfg.Kubernetes.PodResources.Interval = 100 * time.Millisecond
	cfg.Kubernetes.PodResources.Timeout = 100 * time.Millisecond
	s := startScraper(t, cfg, lib, BackendSimulated)
	s.now = clock.now
	require.Len(t, s.gpus, 3, "GPU 2 answers as lost at start: left out")
	require.Eventually(t, func() bool { return len(s.allocation()[uuidOf(1)]) == 1 }, 5*time.Second, 5*time.Millisecond)

	clock.advance(10 * time.Second)
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	clock.advance(lookEvery)
	_, err = s.scrape(context.Background())
	require.NoError(t, err)
	require.Len(t, s.gpus, 4, "found")
	require.Eventually(t, func() bool { return len(s.allocation()[uuidOf(2)]) == 1 }, 3*time.Second, 5*time.Millisecond,
		"the kubelet's index 2 is the GPU found since")
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	pods := map[string]string{}
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.k8s.allocation" {
			pods[attrs["hw.id"].(string)] = attrs["k8s.pod.name"].(string)
		}
	})
	assert.Equal(t, map[string]string{uuidOf(1): "vllm-1", uuidOf(2): "vllm-2"}, pods)
}

// The kubelet is listed only for a series that needs it: the allocation
// series or the processes'. With the allocation series off it is not
// reported, though the processes still take their pod from the listing.
func TestPodResourcesOnlyForTheSeriesThatNeedThem(t *testing.T) {
	lib := fixtureServer(1)
	cfg := scrapeOnly()
	cfg.Metrics.NvidiaGpuK8sAllocation.Enabled = false
	s := startWithKubelet(t, cfg, lib, BackendNVML, podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", device(lib, 0).UUID)))
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pointsOf(m, "nvidia.gpu.k8s.allocation", nil))
	assert.NotEmpty(t, pointsOf(m, "nvidia.gpu.process.memory.usage", map[string]any{"k8s.pod.name": "vllm-0"}))

	socket := cfg.Kubernetes.PodResources.Socket
	cfg = scrapeOnly()
	cfg.Kubernetes.PodResources.Socket = socket
	cfg.Metrics.NvidiaGpuK8sAllocation.Enabled = false
	cfg.Metrics.NvidiaGpuProcessMemoryUsage.Enabled = false
	cfg.Metrics.NvidiaGpuProcessUtilization.Enabled = false
	s = startScraper(t, cfg, lib, BackendNVML)
	assert.Nil(t, s.pods)
}

// migProcesses runs processes on withMIG's GPU 0: 1000 on MIG-a (GI 1,
// CI 0), 2000 on MIG-c (GI 2, CI 0), 3000 on MIG-b (GI 1, CI 1); and 4000
// on GPU 1, not in MIG mode.
func migProcesses(lib *server.Server) {
	device(lib, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{
			{Pid: 1000, UsedGpuMemory: 3 << 30, GpuInstanceId: 1, ComputeInstanceId: 0},
			{Pid: 2000, UsedGpuMemory: 2 << 30, GpuInstanceId: 2, ComputeInstanceId: 0},
			{Pid: 3000, UsedGpuMemory: 1 << 30, GpuInstanceId: 1, ComputeInstanceId: 1},
		}, nvml.SUCCESS
	}
	device(lib, 1).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 4000, UsedGpuMemory: 1 << 30, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}, nvml.SUCCESS
	}
}
