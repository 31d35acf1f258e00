package podresources

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuviz/gpuviz/internal/podresources/podresourcestest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseDeviceID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want DeviceID
		ok   bool
	}{
		{"GPU-8f6c2a1e-0000-4000-8000-000000000001", DeviceID{UUID: "GPU-8f6c2a1e-0000-4000-8000-000000000001", Index: -1, Minor: -1, GPUInstance: -1, Replica: -1}, true},
		{"MIG-1d2e3f40-0000-4000-8000-000000000002", DeviceID{UUID: "MIG-1d2e3f40-0000-4000-8000-000000000002", Index: -1, Minor: -1, GPUInstance: -1, Replica: -1}, true},
		{"GPU-8f6c::3", DeviceID{UUID: "GPU-8f6c", Index: -1, Minor: -1, GPUInstance: -1, Replica: 3}, true},
		{"2", DeviceID{Index: 2, Minor: -1, GPUInstance: -1, Replica: -1}, true},
		{"1::0", DeviceID{Index: 1, Minor: -1, GPUInstance: -1, Replica: 0}, true},
		{"gpu-5", DeviceID{Index: -1, Minor: 5, GPUInstance: -1, Replica: -1}, true},
		{"nvidia2", DeviceID{Index: -1, Minor: 2, GPUInstance: -1, Replica: -1}, true},
		{"nvidia2/vgpu7", DeviceID{Index: -1, Minor: 2, GPUInstance: -1, Replica: 7}, true},
		{"nvidia0/gi1", DeviceID{Index: -1, Minor: 0, GPUInstance: 1, Replica: -1}, true},
		{"nvidia3/gi0", DeviceID{Index: -1, Minor: 3, GPUInstance: 0, Replica: -1}, true},
		{"nvidia1/gi2/vgpu4", DeviceID{Index: -1, Minor: 1, GPUInstance: 2, Replica: 4}, true},
		{"nvidia0/gi", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidia0/gix", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidia0/gi-1", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidia0/gi1/ci0", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidia/gi1", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidia0/vgpu1/gi2", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidia0/vgpux", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidia0/vgpu-1", DeviceID{Index: -1, Replica: -1}, false},
		// A replica is named once, in the form of its device plugin: GKE's
		// /vgpu on GKE's nvidia<minor> only.
		{"nvidia0/vgpu1::2", DeviceID{Index: -1, Replica: -1}, false},
		{"gpu-0/vgpu1", DeviceID{Index: -1, Replica: -1}, false},
		{"0/vgpu1", DeviceID{Index: -1, Replica: -1}, false},
		{"nvidiactl", DeviceID{Index: -1, Replica: -1}, false},
		{"GPU-", DeviceID{Index: -1, Replica: -1}, false},
		{"GPU-8f6c::x", DeviceID{Index: -1, Replica: -1}, false},
		{"-1", DeviceID{Index: -1, Replica: -1}, false},
		{"nic-0", DeviceID{Index: -1, Replica: -1}, false},
		{"", DeviceID{Index: -1, Replica: -1}, false},
	} {
		got, ok := ParseDeviceID(tc.id)
		assert.Equal(t, tc.ok, ok, tc.id)
		if tc.ok {
			assert.Equal(t, tc.want, got, tc.id)
		}
	}
}

func FuzzParseDeviceID(f *testing.F) {
	for _, s := range []string{"GPU-1", "MIG-2::1", "3", "gpu-0", "::", "GPU-::-1", "nvidia0/gi1/vgpu2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		d, ok := ParseDeviceID(id)
		if !ok {
			return
		}
		// Exactly one of a UUID, an index and a minor number; a replica is
		// never negative unless absent.
		named := 0
		for _, has := range []bool{d.UUID != "", d.Index >= 0, d.Minor >= 0} {
			if has {
				named++
			}
		}
		if named != 1 {
			t.Fatalf("%q: %+v names %d GPUs", id, d, named)
		}
		if d.Replica < -1 {
			t.Fatalf("%q: replica %d", id, d.Replica)
		}
		// A GPU instance is one of the GPU a minor number names.
		if d.GPUInstance < -1 || d.GPUInstance >= 0 && d.Minor < 0 {
			t.Fatalf("%q: GPU instance %d of %+v", id, d.GPUInstance, d)
		}
	})
}

// resolveNumber is a node of 4 GPUs whose minor numbers run opposite to
// their NVML indexes, as the kernel may number them; GPU 0 is in MIG mode,
// its GPU instances 1 and 2 MIG-0-1 and MIG-0-2.
func resolveNumber(d DeviceID) (string, bool) {
	i := d.Index
	if d.Minor >= 0 {
		i = 3 - d.Minor
	}
	if i < 0 || i >= 4 {
		return "", false
	}
	if d.GPUInstance >= 0 {
		if i != 0 || d.GPUInstance < 1 || d.GPUInstance > 2 {
			return "", false
		}
		return fmt.Sprintf("MIG-%d-%d", i, d.GPUInstance), true
	}
	return fmt.Sprintf("GPU-%d", i), true
}

func TestFromList(t *testing.T) {
	dra := &podresourcesv1.ContainerResources{Name: "dra", DynamicResources: []*podresourcesv1.DynamicResource{{
		ClaimName: "gpu-claim", ClaimResources: []*podresourcesv1.ClaimResource{
			{DriverName: "gpu.nvidia.com", DeviceName: "gpu-3"},
			{DriverName: "nic.example.com", DeviceName: "nic-0"}, // not a GPU
		},
	}}}
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", "GPU-0", "GPU-1")),
		// Time-sliced: two pods on replicas of one GPU.
		podresourcestest.Pod("llm", "small-a", podresourcestest.Container("srv", "nvidia.com/gpu.shared", "GPU-2::0")),
		podresourcestest.Pod("llm", "small-b", podresourcestest.Container("srv", "nvidia.com/gpu.shared", "GPU-2::1")),
		// MIG, mixed strategy.
		podresourcestest.Pod("batch", "job", podresourcestest.Container("main", "nvidia.com/mig-1g.10gb", "MIG-a")),
		// Index strategy and an index no GPU has.
		podresourcestest.Pod("batch", "idx", podresourcestest.Container("main", "nvidia.com/gpu", "1", "9")),
		// Not a GPU resource.
		podresourcestest.Pod("net", "sriov", podresourcestest.Container("main", "intel.com/sriov", "0000:3b:00.1")),
		podresourcestest.Pod("dra", "claim", dra),
	}}
	a, unresolved := FromList(resp, resolveNumber)
	assert.Equal(t, 1, unresolved, "index 9")
	assert.Equal(t, Allocation{
		// The DRA device gpu-3 is /dev/nvidia3, NVML's GPU 0 here.
		"GPU-0": {{"dra", "claim", "dra", -1}, {"llm", "vllm-0", "vllm", -1}},
		"GPU-1": {{"batch", "idx", "main", -1}, {"llm", "vllm-0", "vllm", -1}},
		"GPU-2": {{"llm", "small-a", "srv", 0}, {"llm", "small-b", "srv", 1}},
		"MIG-a": {{"batch", "job", "main", -1}},
	}, a)
	assert.Equal(t, []string{"GPU-0", "GPU-1"}, a.DevicesOf("llm", "vllm-0"))
	assert.Empty(t, a.DevicesOf("llm", "nope"))

	_, unresolved = FromList(resp, nil)
	assert.Equal(t, 3, unresolved, "two index IDs and the DRA name need a resolver")
}

// GKE's device plugin names a GPU nvidia<minor>, after its device file, a
// time-shared (or MPS-shared) GPU's replicas nvidia<minor>/vgpu<N>, and a
// MIG partition nvidia<minor>/gi<N> (its replicas .../gi<N>/vgpu<R>), all
// under nvidia.com/gpu: they are the GPUs with those minor numbers, and the
// MIG devices of those GPU instances.
func TestGKEDeviceIDs(t *testing.T) {
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", "nvidia0", "nvidia1")),
		podresourcestest.Pod("llm", "small-a", podresourcestest.Container("srv", "nvidia.com/gpu", "nvidia2/vgpu0")),
		podresourcestest.Pod("llm", "small-b", podresourcestest.Container("srv", "nvidia.com/gpu", "nvidia2/vgpu3")),
		podresourcestest.Pod("batch", "mig", podresourcestest.Container("main", "nvidia.com/gpu", "nvidia3/gi1")),
		podresourcestest.Pod("batch", "mig-a", podresourcestest.Container("main", "nvidia.com/gpu", "nvidia3/gi2/vgpu0")),
		podresourcestest.Pod("batch", "mig-b", podresourcestest.Container("main", "nvidia.com/gpu", "nvidia3/gi2/vgpu1")),
		// A GPU instance the GPU does not have.
		podresourcestest.Pod("batch", "gone", podresourcestest.Container("main", "nvidia.com/gpu", "nvidia3/gi5")),
	}}
	a, unresolved := FromList(resp, resolveNumber)
	assert.Equal(t, 1, unresolved, "GPU instance 5")
	// Minor numbers run opposite to NVML indexes on resolveNumber's node.
	assert.Equal(t, Allocation{
		"GPU-3":   {{"llm", "vllm-0", "vllm", -1}},
		"GPU-2":   {{"llm", "vllm-0", "vllm", -1}},
		"GPU-1":   {{"llm", "small-a", "srv", 0}, {"llm", "small-b", "srv", 3}},
		"MIG-0-1": {{"batch", "mig", "main", -1}},
		"MIG-0-2": {{"batch", "mig-a", "main", 0}, {"batch", "mig-b", "main", 1}},
	}, a)
}

func TestHistoryIsTimeVersionedAndBounded(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	h := NewHistory(time.Minute, 3)
	a1 := Allocation{"GPU-0": {{"ns", "a", "c", -1}}}
	a2 := Allocation{"GPU-0": {{"ns", "b", "c", -1}}}
	_, ok := h.At(t0)
	assert.False(t, ok, "nothing known yet")
	assert.True(t, h.Observe(t0, a1))
	assert.False(t, h.Observe(t0.Add(time.Second), Allocation{"GPU-0": {{"ns", "a", "c", -1}}}), "unchanged")
	assert.True(t, h.Observe(t0.Add(10*time.Second), a2))

	for _, tc := range []struct {
		at   time.Duration
		want Allocation
	}{{0, a1}, {9 * time.Second, a1}, {10 * time.Second, a2}, {time.Hour, a2}} {
		got, ok := h.At(t0.Add(tc.at))
		require.True(t, ok)
		assert.Equal(t, tc.want, got, "at +%v", tc.at)
	}
	_, ok = h.At(t0.Add(-time.Nanosecond))
	assert.False(t, ok, "before the first version")

	// Versions superseded before the horizon go; so do those past the bound.
	assert.True(t, h.Observe(t0.Add(2*time.Minute), a1))
	assert.Equal(t, 2, h.Versions(), "a1 at t0 was superseded 10 s in, over a minute ago")
	for i := range 5 {
		h.Observe(t0.Add(2*time.Minute+time.Duration(i+1)*time.Second), Allocation{"GPU-0": {{"ns", fmt.Sprint(i), "c", -1}}})
	}
	assert.Equal(t, 3, h.Versions())
	latest, _ := h.Latest()
	assert.Equal(t, "4", latest["GPU-0"][0].Pod)
}

func TestWatcherFollowsTheKubelet(t *testing.T) {
	k := podresourcestest.New(t)
	k.Set(podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", "GPU-0", "GPU-1")))

	core, logs := observer.New(zap.InfoLevel)
	w := NewWatcher(Config{Socket: "unix://" + k.Path, Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond, Horizon: time.Hour, MaxVersions: 100},
		resolveNumber, zap.New(core))
	// The socket does not exist yet: one line, however many refreshes, and
	// no dial (the error is the missing file's, not gRPC's).
	require.NoError(t, w.Start())
	defer w.Shutdown()
	require.Eventually(t, func() bool { err, _ := w.Status(); return err != nil }, 5*time.Second, 5*time.Millisecond)
	err, _ := w.Status()
	assert.ErrorIs(t, err, fs.ErrNotExist)
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, 1, logs.FilterMessageSnippet("mapping off").Len())
	_, ok := w.History().Latest()
	assert.False(t, ok)

	holder := func(ns, pod string) func() bool {
		return func() bool {
			a, ok := w.History().Latest()
			return ok && len(a["GPU-0"]) == 1 && a["GPU-0"][0].Namespace == ns && a["GPU-0"][0].Pod == pod
		}
	}
	k.Start(t)
	require.Eventually(t, holder("llm", "vllm-0"), 5*time.Second, 5*time.Millisecond, "the socket came up")
	assert.Equal(t, 1, logs.FilterMessageSnippet("mapping on").Len())

	// A new allocation is seen within the interval, and the old one is
	// still there for what happened under it.
	before := time.Now()
	k.Set(podresourcestest.Pod("llm", "vllm-1", podresourcestest.Container("vllm", "nvidia.com/gpu", "0")))
	require.Eventually(t, holder("llm", "vllm-1"), 5*time.Second, 5*time.Millisecond)
	old, ok := w.History().At(before)
	require.True(t, ok)
	assert.Equal(t, "vllm-0", old["GPU-0"][0].Pod)

	// The socket goes away (kubelet restart) and comes back: one more
	// warning, one more recovery, and the mapping it had stays in the
	// meantime.
	k.Stop()
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("mapping off").Len() == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, holder("llm", "vllm-1")())
	k.Set(podresourcestest.Pod("llm", "vllm-2", podresourcestest.Container("vllm", "nvidia.com/gpu", "GPU-0")))
	k.Start(t)
	require.Eventually(t, holder("llm", "vllm-2"), 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 2, logs.FilterMessageSnippet("mapping on").Len())
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Socket: DefaultSocket, Interval: 5 * time.Second, Timeout: time.Second, Horizon: time.Hour, MaxVersions: 64}
	require.NoError(t, ok.Validate())
	for field, mutate := range map[string]func(*Config){
		"socket":       func(c *Config) { c.Socket = "unix://" },
		"interval":     func(c *Config) { c.Interval = time.Millisecond },
		"timeout":      func(c *Config) { c.Timeout = 10 * time.Second },
		"horizon":      func(c *Config) { c.Horizon = time.Second },
		"max_versions": func(c *Config) { c.MaxVersions = 0 },
	} {
		c := ok
		mutate(&c)
		assert.ErrorContains(t, c.Validate(), field+":")
	}
}

// A GPU newly allocated, or one let go, beside an unchanged allocation is
// a new version, as is a holder of another replica.
func TestHistoryTakesEveryChange(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	base := Allocation{"GPU-0": {{"ns", "a", "c", -1}}}
	for name, next := range map[string]Allocation{
		"a GPU allocated": {"GPU-0": {{"ns", "a", "c", -1}}, "GPU-1": {{"ns", "b", "c", -1}}},
		"a GPU let go":    {},
		"another replica": {"GPU-0": {{"ns", "a", "c", 1}}},
	} {
		h := NewHistory(time.Minute, 3)
		require.True(t, h.Observe(t0, base))
		assert.True(t, h.Observe(t0.Add(time.Second), next), name)
		latest, _ := h.Latest()
		assert.Equal(t, next, latest, name)
	}
}

// A kubelet killed or restarting leaves its socket behind, refusing
// connections: each List fails while it is down, and the first List once it
// serves again answers. gRPC on its own retries a refused connection on its
// backoff (1 s, then 1.6 s, ... up to 2 minutes) and fails every List in
// between: here the kubelet is back 1.5 s after it went, while the second
// retry is 2.3 s to 3 s after.
func TestWatcherRedialsAKubeletBackFromARestart(t *testing.T) {
	k := podresourcestest.New(t)
	k.Set(podresourcestest.Pod("llm", "vllm-0", podresourcestest.Container("vllm", "nvidia.com/gpu", "GPU-0")))
	k.Start(t)
	// Driven by hand, one refresh per interval, without Start's goroutine.
	w := NewWatcher(Config{Socket: k.Path, Interval: time.Hour, Timeout: 5 * time.Second, Horizon: time.Hour, MaxVersions: 100},
		nil, zap.NewNop())
	defer w.closeConn()
	holder := func() string {
		a, _ := w.History().Latest()
		if len(a["GPU-0"]) != 1 {
			return ""
		}
		return a["GPU-0"][0].Pod
	}
	w.refresh()
	require.Equal(t, "vllm-0", holder())

	k.Kill()
	for range 3 {
		w.refresh()
		err, _ := w.Status()
		require.Error(t, err, "the kubelet is down")
		assert.NotErrorIs(t, err, fs.ErrNotExist, "its socket is still there")
		time.Sleep(500 * time.Millisecond)
	}
	k.Set(podresourcestest.Pod("llm", "vllm-1", podresourcestest.Container("vllm", "nvidia.com/gpu", "GPU-0")))
	k.Start(t)
	w.refresh()
	err, _ := w.Status()
	require.NoError(t, err, "the kubelet is back")
	assert.Equal(t, "vllm-1", holder())
}

// A kubelet that takes the connection but never answers (hung, or its
// socket held by something else) fails the List at the configured timeout,
// so the watcher goes on listing every interval and its Shutdown is not
// held up by a List that never returns.
func TestAKubeletThatDoesNotAnswerTimesOut(t *testing.T) {
	dir, err := os.MkdirTemp("", "podres")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		_ = l.Close()
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	w := NewWatcher(Config{Socket: "unix://" + l.Addr().String(), Interval: time.Hour, Timeout: 50 * time.Millisecond, Horizon: time.Hour, MaxVersions: 100},
		nil, zap.NewNop())
	defer w.closeConn()
	w.refresh()
	err, _ = w.Status()
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
}
