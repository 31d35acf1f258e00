package infersim

import (
	"slices"
	"sync"
)

// Node simulates every engine of a scenario on one node of GPUs. Episodes
// are computed on first use and the most recent few are kept; it is safe
// for concurrent use.
type Node struct {
	hw       Hardware
	sc       Scenario
	seed     uint64
	engineOf []int // GPU index → engine index, -1 for a GPU no engine uses

	mu    sync.Mutex
	cache [2]*Episode // readers straddle at most one episode boundary
	next  int
}

// Episode is one episode of every engine of a node.
type Episode struct {
	Index      int64
	Start, End int64
	runs       []*run
	requests   []Request // every engine's, in order of Finished
}

// NewNode returns the simulation of scenario sc on hw, driven by seed.
func NewNode(hw Hardware, sc Scenario, seed uint64) *Node {
	n := &Node{hw: hw, sc: sc, seed: seed}
	gpus := 0
	for _, e := range sc.Engines {
		for _, g := range e.GPUs {
			gpus = max(gpus, g+1)
		}
	}
	n.engineOf = make([]int, gpus)
	for i := range n.engineOf {
		n.engineOf[i] = -1
	}
	for ei, e := range sc.Engines {
		for _, g := range e.GPUs {
			n.engineOf[g] = ei
		}
	}
	return n
}

// Scenario returns the node's scenario.
func (n *Node) Scenario() Scenario { return n.sc }

// Hardware returns the node's GPU.
func (n *Node) Hardware() Hardware { return n.hw }

// EngineOf returns the index of the engine GPU gpu serves, or -1.
func (n *Node) EngineOf(gpu int) int {
	if gpu < 0 || gpu >= len(n.engineOf) {
		return -1
	}
	return n.engineOf[gpu]
}

// EpisodeIndex returns the episode that contains t.
func (n *Node) EpisodeIndex(t int64) int64 {
	e := int64(n.sc.Episode)
	if t < 0 {
		return (t - e + 1) / e
	}
	return t / e
}

// Episode returns episode k, simulating it if it is not cached.
func (n *Node) Episode(k int64) *Episode {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ep := range n.cache {
		if ep != nil && ep.Index == k {
			return ep
		}
	}
	ep := &Episode{Index: k, Start: k * int64(n.sc.Episode), End: (k + 1) * int64(n.sc.Episode)}
	for ei := range n.sc.Engines {
		r := simulate(n.hw, n.sc, ei, n.seed, k)
		ep.runs = append(ep.runs, r)
		ep.requests = append(ep.requests, r.reqs...)
	}
	slices.SortStableFunc(ep.requests, func(a, b Request) int {
		if a.Finished != b.Finished {
			return cmpInt(a.Finished, b.Finished)
		}
		if a.Engine != b.Engine {
			return a.Engine - b.Engine
		}
		return a.Seq - b.Seq
	})
	n.cache[n.next] = ep
	n.next = (n.next + 1) % len(n.cache)
	return ep
}

// Requests returns every request of the episode, in order of Finished
// (then engine, then arrival). Do not modify it.
func (ep *Episode) Requests() []Request { return ep.requests }

// idleSegment is what a GPU no engine uses does: nothing.
func (n *Node) idleSegment(ep *Episode) []Segment {
	return []Segment{{Start: ep.Start, End: ep.End, Phase: PhaseIdle, PowerW: n.hw.IdleW, ClockMHz: n.hw.SMClockIdleMHz, TempC: float32(ambientC + thermalResistance*n.hw.IdleW)}}
}

// Segments returns GPU gpu's segments over the episode, in time order,
// covering it without gaps. Do not modify them.
func (n *Node) Segments(ep *Episode, gpu int) []Segment {
	ei := n.EngineOf(gpu)
	if ei < 0 {
		return n.idleSegment(ep)
	}
	return ep.runs[ei].segs
}

// MemoryUsed returns the device memory GPU gpu's engine holds: weights, KV
// pool and activations, allocated at start as vLLM does (0 for a GPU no
// engine uses).
func (n *Node) MemoryUsed(gpu int) uint64 {
	ei := n.EngineOf(gpu)
	if ei < 0 {
		return 0
	}
	return uint64(n.sc.Engines[ei].Scheduler.MemoryFraction * n.hw.MemoryBytes)
}

// At returns GPU gpu's segment at t.
func (n *Node) At(gpu int, t int64) Segment {
	ep := n.Episode(n.EpisodeIndex(t))
	return SegmentAt(n.Segments(ep, gpu), t)
}

// Integrate returns the integrals of GPU gpu's activity over [from, to).
func (n *Node) Integrate(gpu int, from, to int64) Totals {
	var tot Totals
	if to <= from {
		return tot
	}
	tot.Seconds = float64(to-from) / 1e9
	for k := n.EpisodeIndex(from); k <= n.EpisodeIndex(to-1); k++ {
		ep := n.Episode(k)
		Accumulate(&tot, n.Segments(ep, gpu), max(from, ep.Start), min(to, ep.End))
	}
	return tot
}

// Finished returns the requests whose Finished lies in [from, to), in
// order of Finished: consecutive ranges return every request once.
func (n *Node) Finished(from, to int64) []Request {
	var out []Request
	if to <= from {
		return out
	}
	for k := n.EpisodeIndex(from); k <= n.EpisodeIndex(to-1); k++ {
		for _, r := range n.Episode(k).requests {
			if r.Finished >= from && r.Finished < to {
				out = append(out, r)
			}
		}
	}
	return out
}

// Bins returns GPU gpu's truth bins that start in [from, to).
func (n *Node) Bins(gpu int, from, to int64) []Bin {
	var out []Bin
	if to <= from {
		return out
	}
	for k := n.EpisodeIndex(from); k <= n.EpisodeIndex(to-1); k++ {
		ep := n.Episode(k)
		ei := n.EngineOf(gpu)
		if ei < 0 {
			continue
		}
		for _, b := range ep.runs[ei].bins {
			if b.Start >= from && b.Start < to {
				b.GPU = gpu
				out = append(out, b)
			}
		}
	}
	return out
}

// Running returns how many of engine e's requests were running at t, as
// the engine counts them (vLLM's num_requests_running, SGLang's
// num_running_reqs): scheduled and not finished, less those preempted back
// to the queue and not yet rescheduled. It is what the engine's own gauge
// reads, so what a simulated server exports, not a truth only the scorer
// sees.
func (n *Node) Running(e int, t int64) int {
	count := 0
	for _, r := range n.Episode(n.EpisodeIndex(t)).requests {
		if r.Engine == e && r.Scheduled != 0 && r.Scheduled <= t && t < r.Finished && !r.preemptedAt(t) {
			count++
		}
	}
	return count
}

// preemptedAt reports whether r was waiting at t after a preemption: its
// recomputation (its first chunk after the preemption) had not started.
func (r Request) preemptedAt(t int64) bool {
	for _, p := range r.Preempted {
		if p > t {
			break
		}
		i, _ := slices.BinarySearchFunc(r.Chunks, p, func(c Chunk, at int64) int { return cmpInt(c.Start, at) })
		if i == len(r.Chunks) || r.Chunks[i].Start > t {
			return true
		}
	}
	return false
}
