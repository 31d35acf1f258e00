package gpuvizreceiver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// MIG devices allocated to pods (the mixed strategy's nvidia.com/mig-*
// resources name them by MIG UUID) are reported on their parent GPU with
// their own nvidia.gpu.mig.id; a whole GPU's allocation has none.
func TestMIGAllocationsAreReportedOnTheParentGPU(t *testing.T) {
	lib := fixtureServer(2)
	withMIG(lib)
	k := podresourcestest.New(t)
	k.Set(podresourcestest.Pod("batch", "job-a", podresourcestest.Container("main", "nvidia.com/mig-3g.40gb", "MIG-a")),
		podresourcestest.Pod("batch", "job-c", podresourcestest.Container("main", "nvidia.com/mig-3g.40gb", "MIG-c")),
		podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", device(lib, 1).UUID)))
	k.Start(t)
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Socket = k.Path
	s := startScraper(t, cfg, lib, BackendNVML)
	require.Eventually(t, func() bool { return s.allocation() != nil }, 5*time.Second, 5*time.Millisecond)
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
			k := podresourcestest.New(t)
			k.Set(podresourcestest.Pod("llm", "vllm-0", &podresourcesv1.ContainerResources{Name: "vllm", DynamicResources: []*podresourcesv1.DynamicResource{{
				ClaimName: "gpu", ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: "gpu.nvidia.com", DeviceName: "gpu-0"}},
			}}}))
			k.Start(t)
			cfg := scrapeOnly()
			cfg.Kubernetes.PodResources.Socket = k.Path
			s := startScraper(t, cfg, lib, BackendNVML)
			require.Eventually(t, func() bool { return s.allocation() != nil }, 5*time.Second, 5*time.Millisecond)
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
	k := podresourcestest.New(t)
	k.Set(podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", device(lib, 0).UUID)))
	k.Start(t)

	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Socket = k.Path
	cfg.Metrics.NvidiaGpuK8sAllocation.Enabled = false
	s := startScraper(t, cfg, lib, BackendNVML)
	require.Eventually(t, func() bool { return s.allocation() != nil }, 5*time.Second, 5*time.Millisecond)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Empty(t, pointsOf(m, "nvidia.gpu.k8s.allocation", nil))
	assert.NotEmpty(t, pointsOf(m, "nvidia.gpu.process.memory.usage", map[string]any{"k8s.pod.name": "vllm-0"}))

	cfg = scrapeOnly()
	cfg.Kubernetes.PodResources.Socket = k.Path
	cfg.Metrics.NvidiaGpuK8sAllocation.Enabled = false
	cfg.Metrics.NvidiaGpuProcessMemoryUsage.Enabled = false
	cfg.Metrics.NvidiaGpuProcessUtilization.Enabled = false
	s = startScraper(t, cfg, lib, BackendNVML)
	assert.Nil(t, s.pods)
}
