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
		case MatchSlurmJob:
			keys = m.slurmJob(req)
		case MatchAttribute:
			keys = m.attributes(req)
		case MatchProcess:
			// A pod's process.pid is in its own PID namespace, not the
			// host's the receiver reports. Without host.name, the PID is
			// looked for on the one host there is, if one.
			if req.PID != 0 && !inPod(req) {
				keys = m.store.ProcessGPUs(m.resolveHost(req.Host), req.PID, req.Start)
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
		if len(keys) == 0 {
			// UUIDs are unique across hosts: ones the span's host does
			// not have (a gateway's span without host.name, or a host
			// named wrong) are looked up on every host.
			for _, id := range req.GPUIDs {
				if k, ok := m.store.ByID(id); ok && !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			slices.SortFunc(keys, timeline.CompareKeys)
		}
	}
	if inPod(req) || req.SlurmJobID != "" {
		// A pod's GPU indexes count its own devices, not the host's; the
		// pod method resolves them through its allocation. A Slurm job's
		// may count its own (Slurm's device cgroup renumbers them) or the
		// host's: the slurm method resolves what it can tell apart.
		return keys
	}
	for _, idx := range req.GPUIndexes {
		// A GPU both a UUID and an index name is one GPU.
		if k, ok := m.store.ByIndex(m.resolveHost(req.Host), idx); ok && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, timeline.CompareKeys)
	return keys
}

func inPod(req inference.Request) bool { return req.PodUID != "" || req.PodName != "" }

// pod returns the GPUs allocated to the span's pod over the request's
// window, narrowed by the span's GPU hints: indexes into the pod's own
// devices (CUDA numbers a container's GPUs from 0 in the order of their
// host indexes).
func (m *matcher) pod(req inference.Request) []timeline.Key {
	if !inPod(req) {
		return nil
	}
	// A pod runs on one node: a name seen on two over the window (a
	// StatefulSet's pod recreated elsewhere) is the span's host's, when it
	// names one of them.
	all := onHost(m.store.PodGPUs(timeline.Pod{UID: req.PodUID, Namespace: req.PodNamespace, Name: req.PodName}, req.Start, req.End), req.Host)
	return narrow(all, req, func() func(int) (timeline.Key, bool) {
		byIndex := m.byIndex(all)
		if byIndex == nil {
			return nil
		}
		return func(i int) (timeline.Key, bool) {
			if i < len(byIndex) {
				return byIndex[i], true
			}
			return timeline.Key{}, false
		}
	})
}

// slurmJob returns the GPUs the span's Slurm job held over the request's
// window. Job ids are cluster-wide and a job can span nodes: when the span
// says its host and the job held GPUs there, those (a multi-node job's
// span ran on one node); else every GPU of the job. They are narrowed by
// the span's GPU hints, on one host only: indexes count the job's own
// devices with Slurm's device cgroup (ConstrainDevices) and the host's
// without it, so an index is taken where both readings name the same GPU
// of the job or only one names one of its GPUs, and where they name
// different ones, as the reading that names one of its GPUs for every
// index of the span reads it (ignored where both or neither do).
func (m *matcher) slurmJob(req inference.Request) []timeline.Key {
	if req.SlurmJobID == "" {
		return nil
	}
	all := onHost(m.store.SlurmJobGPUs(req.SlurmJobID, req.Start, req.End), req.Host)
	return narrow(all, req, func() func(int) (timeline.Key, bool) {
		if len(all) == 0 || all[0].Host != all[len(all)-1].Host { // sorted by host
			return nil
		}
		relative := m.byIndex(all)
		readings := func(i int) (rel timeline.Key, relOK bool, abs timeline.Key, absOK bool) {
			if relOK = relative != nil && i < len(relative); relOK {
				rel = relative[i]
			}
			abs, absOK = m.store.ByIndex(all[0].Host, i)
			return rel, relOK, abs, absOK && slices.Contains(all, abs)
		}
		// The span's indexes are one list, read one way: where only one
		// reading names a GPU of the job for every index, that one.
		relAll, absAll := true, true
		for _, i := range req.GPUIndexes {
			_, relOK, _, absOK := readings(i)
			relAll, absAll = relAll && relOK, absAll && absOK
		}
		return func(i int) (timeline.Key, bool) {
			rel, relOK, abs, absOK := readings(i)
			switch {
			case relOK && absOK && relAll != absAll:
				if relAll {
					return rel, true
				}
				return abs, true
			case relOK && absOK:
				return rel, rel == abs
			case relOK:
				return rel, true
			case absOK:
				return abs, true
			}
			return timeline.Key{}, false
		}
	})
}

// onHost returns the keys on host where there are any, else all of them.
func onHost(keys []timeline.Key, host string) []timeline.Key {
	if host == "" {
		return keys
	}
	var own []timeline.Key
	for _, k := range keys {
		if k.Host == host {
			own = append(own, k)
		}
	}
	if len(own) == 0 {
		return keys
	}
	return own
}

// narrow keeps the holder's GPUs (all) the span's GPU hints name: UUIDs as
// they are, indexes as the resolver indexes() returns resolves them (nil:
// not at all). Hints that fit none of them are ignored: the holder's GPUs
// are what the cluster says.
func narrow(all []timeline.Key, req inference.Request, indexes func() func(int) (timeline.Key, bool)) []timeline.Key {
	if len(all) == 0 || len(req.GPUIDs) == 0 && len(req.GPUIndexes) == 0 {
		return all
	}
	var keys []timeline.Key
	for _, k := range all {
		if slices.Contains(req.GPUIDs, k.GPU) {
			keys = append(keys, k)
		}
	}
	if len(req.GPUIndexes) > 0 {
		if index := indexes(); index != nil {
			for _, i := range req.GPUIndexes {
				if k, ok := index(i); ok && !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
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
