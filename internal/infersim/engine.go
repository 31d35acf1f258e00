package infersim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// activationReserve is the memory vLLM keeps for activations and the CUDA
// graph pool per GPU, outside the KV pool.
const activationReserve = 2 << 30

// actBytesPerTokenLayer is the activation traffic per token and layer, in
// units of the hidden size (reads and writes of the residual stream, the
// attention and MLP intermediates, BF16).
const actBytesPerTokenLayer = 24

// kvBlocks is the number of KV-cache blocks an engine's pool holds: what
// its memory fraction leaves per GPU after weights and activations, over
// the bytes of one block's share on one GPU.
func kvBlocks(e Engine, hw Hardware) int {
	tp := float64(len(e.GPUs))
	perGPU := e.Scheduler.MemoryFraction*hw.MemoryBytes - e.LLM.WeightBytes()/tp - activationReserve
	blockBytes := float64(e.Scheduler.BlockSize) * e.LLM.KVBytesPerToken() / tp
	if perGPU <= 0 || blockBytes <= 0 {
		return 0
	}
	return int(perGPU / blockBytes)
}

// request is a request's state in the engine.
type request struct {
	Request
	target   int // output tokens it will generate unless aborted
	computed int // tokens whose KV is in the cache
	blocks   int // KV blocks held
}

// need is how many tokens the request must compute before it samples its
// next token: the prompt, and after a preemption the output so far too.
func (r *request) need() int { return r.PromptTokens + r.OutputTokens - r.computed }

// run is one engine's episode: its segments (one set for every GPU of the
// tensor-parallel group: they run the same steps), its requests and its
// truth bins.
type run struct {
	segs []Segment
	reqs []Request
	bins []Bin // GPU is left 0: the engine's GPUs share them
}

// scheduled is one request's part in a step.
type scheduled struct {
	r       *request
	tokens  int
	prefill bool // the request has not produced its first token yet
	chunk   bool // a prefill or recomputation chunk, not a decode
	cost    float64
}

// sim is the state of one engine while an episode is simulated.
type sim struct {
	hw      Hardware
	e       Engine
	limitW  float64
	tp      float64
	start   int64
	end     int64
	blocks  int // free KV blocks
	total   int // KV blocks in the pool
	waiting []*request
	running []*request
	tempC   float64
	out     *run
	binDur  [][len(labelIndex)]float64
	// checkStep, when set (tests), sees every step's batch as scheduled.
	checkStep func(s *sim, batch []scheduled)
}

// labelIndex orders the labels for per-bin accounting.
var labelIndex = [...]string{
	LabelComputeBound, LabelMemoryBound, LabelMemoryCapacity, LabelInterconnectBound,
	LabelPowerThrottled, LabelThermalThrottled, LabelHostBound, LabelIdle,
}

const (
	lCompute = iota
	lMemory
	lCapacity
	lInterconnect
	lPower
	lThermal
	lHost
	lIdle
)

// simulate runs engine ei of the scenario over episode k from an empty
// engine. It is a pure function of its arguments.
func simulate(hw Hardware, sc Scenario, ei int, seed uint64, k int64) *run {
	return simulateChecked(hw, sc, ei, seed, k, nil)
}

func simulateChecked(hw Hardware, sc Scenario, ei int, seed uint64, k int64, check func(*sim, []scheduled)) *run {
	e := sc.Engines[ei]
	s := &sim{hw: hw, e: e, limitW: hw.PowerLimitW, tp: float64(len(e.GPUs)), out: &run{}, checkStep: check}
	if sc.PowerLimitW > 0 {
		s.limitW = sc.PowerLimitW
	}
	s.start = k * int64(sc.Episode)
	s.end = s.start + int64(sc.Episode)
	s.total = kvBlocks(e, hw)
	s.blocks = s.total
	s.tempC = ambientC + thermalResistance*hw.IdleW
	nbins := int((s.end - s.start + int64(BinWidth) - 1) / int64(BinWidth))
	s.out.bins = make([]Bin, nbins)
	s.binDur = make([][len(labelIndex)]float64, nbins)
	for i := range s.out.bins {
		s.out.bins[i].Start = s.start + int64(i)*int64(BinWidth)
	}

	arrivals := generate(e, seed, k, ei, s.start, s.end-int64(sc.Drain))
	next := 0
	t := s.start
	for t < s.end {
		for next < len(arrivals) && arrivals[next].Queued <= t {
			s.waiting = append(s.waiting, arrivals[next])
			next++
		}
		if len(s.running) == 0 && len(s.waiting) == 0 {
			until := s.end
			if next < len(arrivals) {
				until = min(arrivals[next].Queued, s.end)
			}
			s.idle(t, until)
			t = until
			continue
		}
		t = s.step(t)
	}
	// What is still in the engine at the episode's end is aborted, in its
	// last nanosecond: Finished stays inside the episode. That includes
	// the requests queued while a step that would have run past the end
	// was skipped (a drain shorter than a step); one whose tokenisation
	// ends past the episode was never queued in it and is not part of it.
	for next < len(arrivals) && arrivals[next].Queued < s.end {
		s.waiting = append(s.waiting, arrivals[next])
		next++
	}
	for _, r := range append(s.running, s.waiting...) {
		r.Finished, r.Finish = s.end-1, FinishAbort
		s.out.reqs = append(s.out.reqs, r.Request)
	}
	slices.SortStableFunc(s.out.reqs, func(a, b Request) int {
		if a.Finished != b.Finished {
			return cmpInt(a.Finished, b.Finished)
		}
		return a.Seq - b.Seq
	})
	s.finishBins()
	return s.out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// generate draws the engine's arrivals in [from, until): times, lengths.
func generate(e Engine, seed uint64, k int64, ei int, from, until int64) []*request {
	rng := rand.New(rand.NewPCG(seed, mix(uint64(k)<<16^uint64(ei)^0xe1)))
	tr := e.Traffic
	var out []*request
	on := true
	var stateEnd int64 = math.MaxInt64
	if tr.Burst.MeanOn > 0 {
		stateEnd = from + int64(rng.ExpFloat64()*float64(tr.Burst.MeanOn))
	}
	t := from
	for {
		rate := tr.Rate
		if !on {
			rate = tr.Burst.OffRate
		}
		var gap int64 = math.MaxInt64
		if rate > 0 {
			gap = int64(rng.ExpFloat64() / rate * 1e9)
		}
		if t+gap > stateEnd || gap == math.MaxInt64 {
			// Memorylessness: the next arrival is drawn afresh in the
			// next state.
			if stateEnd >= until {
				break
			}
			t = stateEnd
			on = !on
			mean := tr.Burst.MeanOn
			if !on {
				mean = tr.Burst.MeanOff
			}
			stateEnd = t + max(int64(rng.ExpFloat64()*float64(mean)), 1)
			continue
		}
		t += gap
		if t >= until {
			break
		}
		seq := len(out)
		r := &request{Request: Request{
			Episode: k, Engine: ei, GPUs: e.GPUs, Seq: seq,
			Key:     mix(seed ^ mix(uint64(k)<<20^uint64(ei)<<40^uint64(seq))),
			Arrival: t, MaxTokens: tr.MaxTokens,
		}}
		r.PromptTokens = tr.Prompt.draw(rng)
		r.target = tr.Output.draw(rng)
		r.Finish = FinishStop
		if tr.MaxTokens > 0 && r.target >= tr.MaxTokens {
			r.target, r.Finish = tr.MaxTokens, FinishLength
		}
		// Tokenisation in the front end before the engine queues it.
		r.Queued = t + int64(300*time.Microsecond) + int64(r.PromptTokens)*500
		out = append(out, r)
	}
	return out
}

func (l Lengths) draw(rng *rand.Rand) int {
	v := int(math.Round(l.Median * math.Exp(l.Sigma*rng.NormFloat64())))
	return min(max(v, l.Min), l.Max)
}

// blocksFor is how many more blocks the request needs to hold n more
// tokens.
func (s *sim) blocksFor(r *request, n int) int {
	bs := s.e.Scheduler.BlockSize
	return (r.computed+n+bs-1)/bs - r.blocks
}

func newScheduled(r *request, n int) scheduled {
	return scheduled{r: r, tokens: n, prefill: r.FirstToken == 0, chunk: r.FirstToken == 0 || r.need() > 1}
}

// take moves the blocks for n more tokens from the pool to r.
func (s *sim) take(r *request, n int) {
	b := s.blocksFor(r, n)
	s.blocks -= b
	r.blocks += b
}

func (s *sim) preempt(r *request, at int64) {
	s.blocks += r.blocks
	r.blocks, r.computed = 0, 0
	r.Preemptions++
	r.Preempted = append(r.Preempted, at)
	s.waiting = append([]*request{r}, s.waiting...)
}

// schedule picks the step's batch as vLLM V1's scheduler does: running
// requests first (in order), each its next chunk within the token budget,
// preempting the newest running request when the KV pool cannot hold a
// chunk; then, if nothing was preempted, waiting requests first come first
// served while budget, sequence slots and KV blocks last. It reports
// whether KV capacity held anything back. at is the scheduling moment.
func (s *sim) schedule(at int64) ([]scheduled, bool) {
	budget := s.e.Scheduler.MaxBatchedTokens
	var batch []scheduled
	blocked := false
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		n := min(r.need(), budget)
		for s.blocksFor(r, n) > s.blocks {
			victim := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			s.preempt(victim, at)
			blocked = true
			if victim == r {
				n = 0
				break
			}
		}
		if n == 0 {
			break
		}
		s.take(r, n)
		batch = append(batch, newScheduled(r, n))
		budget -= n
	}
	if !blocked {
		for len(s.waiting) > 0 && budget > 0 && len(s.running) < s.e.Scheduler.MaxNumSeqs {
			r := s.waiting[0]
			n := min(r.need(), budget)
			if s.blocksFor(r, n) > s.blocks {
				blocked = true
				break
			}
			s.waiting = s.waiting[1:]
			s.take(r, n)
			s.running = append(s.running, r)
			batch = append(batch, newScheduled(r, n))
			budget -= n
		}
	}
	return batch, blocked
}
