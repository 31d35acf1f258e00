package podresources // import "github.com/gpuviz/gpuviz/internal/podresources"

import (
	"cmp"
	"slices"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Holder is a container a device is allocated to.
type Holder struct {
	Namespace, Pod, Container string
	// Replica is the time-slicing replica it holds, -1 for the whole device.
	Replica int
}

// Allocation maps each device (GPU or MIG UUID) to its holders, sorted;
// shared GPUs (time-slicing, MPS) have several.
type Allocation map[string][]Holder

// Resolver turns a device ID that names a GPU by number (its Index or its
// Minor) into the GPU's UUID, for the device plugin's index strategy and
// DRA device names, and one that names a GPU instance of the GPU of that
// Minor (GKE's MIG partitions) into that MIG device's UUID; ok false when
// no such GPU or MIG device.
type Resolver func(d DeviceID) (uuid string, ok bool)

// FromList builds the allocation the kubelet listed; unresolved counts the
// GPU device IDs that named no GPU this node has (an index without a
// resolver, an ID in an unknown form).
func FromList(resp *podresourcesv1.ListPodResourcesResponse, resolve Resolver) (a Allocation, unresolved int) {
	a = Allocation{}
	add := func(id string, h Holder) {
		d, ok := ParseDeviceID(id)
		if ok && d.UUID == "" {
			if resolve != nil {
				d.UUID, ok = resolve(d)
			} else {
				ok = false
			}
		}
		if !ok {
			unresolved++
			return
		}
		h.Replica = d.Replica
		a[d.UUID] = append(a[d.UUID], h)
	}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			h := Holder{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: c.GetName()}
			for _, dev := range c.GetDevices() {
				if !isGPUResource(dev.GetResourceName()) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					add(id, h)
				}
			}
			for _, dr := range c.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					if isGPUDriver(cr.GetDriverName()) && cr.GetDeviceName() != "" {
						add(cr.GetDeviceName(), h)
					}
				}
			}
		}
	}
	for id, hs := range a {
		slices.SortFunc(hs, compareHolders)
		a[id] = slices.Compact(hs)
	}
	return a, unresolved
}

func compareHolders(x, y Holder) int {
	return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Pod, y.Pod),
		cmp.Compare(x.Container, y.Container), cmp.Compare(x.Replica, y.Replica))
}

// Equal reports whether two allocations are the same.
func (a Allocation) Equal(b Allocation) bool {
	if len(a) != len(b) {
		return false
	}
	for id, hs := range a {
		if !slices.Equal(hs, b[id]) {
			return false
		}
	}
	return true
}

// DevicesOf returns the devices allocated to a pod, sorted.
func (a Allocation) DevicesOf(namespace, pod string) []string {
	var out []string
	for id, hs := range a {
		for _, h := range hs {
			if h.Namespace == namespace && h.Pod == pod {
				out = append(out, id)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
