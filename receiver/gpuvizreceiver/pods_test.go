package gpuvizreceiver

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuviz/gpuviz/internal/podresources"
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
	}
	for _, tc := range []struct{ gpu, ns, pod string }{{"GPU-0", "llm", "vllm-0"}, {"GPU-1", "", ""}, {"GPU-2", "", ""}} {
		ns, pod := soleHolder(a, tc.gpu)
		assert.Equal(t, [2]string{tc.ns, tc.pod}, [2]string{ns, pod}, tc.gpu)
	}
	ns, pod := soleHolder(nil, "GPU-0")
	assert.Empty(t, ns+pod)
}
