package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"slices"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// matcher finds the GPUs that served a request, trying the configured
// methods in order, and says which one matched so users can trust or fix it.
type matcher struct {
	store *timeline.Store
	order []string
}

// match returns the request's GPUs and the method that matched.
func (m *matcher) match(req inference.Request) ([]timeline.Key, string) {
	for _, method := range m.order {
		var keys []timeline.Key
		switch method {
		case MatchPod:
			keys = m.pod(req)
		case MatchAttribute:
			keys = m.attributes(req)
		case MatchProcess:
			// A pod's process.pid is in its own PID namespace, not the
			// host's the receiver reports.
			if req.PID != 0 && !inPod(req) {
				keys = m.store.ProcessGPUs(req.Host, req.PID)
			}
		case MatchHost:
			keys = m.hostGPUs(req.Host)
		}
		if len(keys) > 0 {
			return keys, method
		}
	}
	return nil, ""
}

// attributes resolves GPU UUIDs and indexes named on the span or its
// resource to GPUs the timeline knows.
func (m *matcher) attributes(req inference.Request) []timeline.Key {
	var keys []timeline.Key
	if len(req.GPUIDs) > 0 {
		for _, k := range m.hostGPUs(req.Host) {
			for _, id := range req.GPUIDs {
				if k.GPU == id {
					keys = append(keys, k)
				}
			}
		}
	}
	if inPod(req) {
		// A pod's GPU indexes count its own devices, not the host's; the
		// pod method resolves them through its allocation.
		return keys
	}
	for _, idx := range req.GPUIndexes {
		if k, ok := m.store.ByIndex(m.resolveHost(req.Host), idx); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

func inPod(req inference.Request) bool { return req.PodUID != "" || req.PodName != "" }

// pod returns the GPUs allocated to the span's pod over the request's
// window, narrowed by the span's GPU hints: UUIDs as they are, indexes into
// the pod's own devices (CUDA numbers a container's GPUs from 0 in the
// order of their host indexes). Hints that do not fit the allocation are
// ignored: the allocation is what the kubelet says.
func (m *matcher) pod(req inference.Request) []timeline.Key {
	if !inPod(req) {
		return nil
	}
	all := m.store.PodGPUs(timeline.Pod{UID: req.PodUID, Namespace: req.PodNamespace, Name: req.PodName}, req.Start, req.End)
	if len(all) == 0 || len(req.GPUIDs) == 0 && len(req.GPUIndexes) == 0 {
		return all
	}
	var keys []timeline.Key
	for _, k := range all {
		if slices.Contains(req.GPUIDs, k.GPU) {
			keys = append(keys, k)
		}
	}
	if byIndex := m.byIndex(all); byIndex != nil {
		for _, idx := range req.GPUIndexes {
			if idx < len(byIndex) && !slices.Contains(keys, byIndex[idx]) {
				keys = append(keys, byIndex[idx])
			}
		}
	}
	if len(keys) == 0 {
		return all
	}
	slices.SortFunc(keys, timeline.CompareKeys)
	return keys
}

// hostGPUs returns the GPUs of a host. Spans often lack host.name (an
// inference server rarely runs a resource detector): then, when every GPU
// the timeline knows is on one host — a node-local agent — those are the
// span's GPUs. In a gateway fed by many hosts a span without host.name
// matches nothing this way.
func (m *matcher) hostGPUs(host string) []timeline.Key {
	return m.store.GPUs(m.resolveHost(host))
}

func (m *matcher) resolveHost(host string) string {
	if host != "" {
		return host
	}
	all := m.store.GPUs("")
	if len(all) == 0 {
		return ""
	}
	for _, k := range all[1:] {
		if k.Host != all[0].Host {
			return "\x00no single host" // matches no GPU
		}
	}
	return all[0].Host
}

// byIndex returns keys ordered by NVML index; nil when an index is unknown.
func (m *matcher) byIndex(keys []timeline.Key) []timeline.Key {
	type indexed struct {
		k timeline.Key
		i int
	}
	list := make([]indexed, len(keys))
	for j, k := range keys {
		i, ok := m.store.Index(k)
		if !ok {
			return nil
		}
		list[j] = indexed{k, i}
	}
	slices.SortFunc(list, func(a, b indexed) int { return cmp.Compare(a.i, b.i) })
	out := make([]timeline.Key, len(list))
	for j, x := range list {
		out[j] = x.k
	}
	return out
}
