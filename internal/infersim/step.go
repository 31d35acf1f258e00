package infersim

import (
	"math"
	"slices"
)

// Power model: the board draws IdleW plus a dynamic part, a share of
// (board limit - IdleW) that grows with tensor and SM activity (scaled by
// clock^powerExponent: voltage follows the clock), DRAM traffic and NVLink
// traffic. At full activity a prefill step draws ~90% of a 700 W board, a
// memory-bound decode step about half; a GPU waiting for the host with its
// clocks up draws a little over idle.
const (
	powerTensor = 0.85
	powerSM     = 0.3
	powerDRAM   = 0.4
	powerLink   = 0.06
	powerWait   = 0.06
)

// roofline is the cost of one step on one GPU of the group at full clock.
type roofline struct {
	tc, tm, comm float64 // seconds: tensor math, HBM traffic, all-reduce
	linkBytes    float64 // NVLink bytes each direction
}

// at returns the step's length and activities at clock fraction f.
func (r roofline) at(f float64) (length, tensor, dram, sm float64) {
	tc := r.tc / f
	kernel := max(tc, r.tm)
	length = kernel + r.comm + stepOverhead
	tensor = 0.95 * computeEfficiency * tc / length
	dram = memoryEfficiency * r.tm / length
	shape := 1.0
	if tc < r.tm {
		shape = 0.5 + 0.5*tc/r.tm // memory-bound kernels keep fewer warps busy
	}
	sm = 0.93*kernel/length*shape + 0.3*r.comm/length
	return length, tensor, dram, sm
}

// power is the board power of the step at clock fraction f.
func (s *sim) power(r roofline, f float64) float64 {
	length, tensor, dram, sm := r.at(f)
	link := r.linkBytes / length / s.hw.NVLinkBytesPerSecond
	dyn := s.hw.PowerLimitW - s.hw.IdleW
	return s.hw.IdleW + dyn*((powerTensor*tensor+powerSM*sm)*math.Pow(f, powerExponent)+powerDRAM*dram+powerLink*link)
}

// clock returns the clock fraction the driver allows for the step: the
// highest under the power limit (found by bisection), and the one the
// temperature allows.
func (s *sim) clock(r roofline) (fPower, fThermal float64) {
	fPower, fThermal = 1, 1
	if s.power(r, 1) > s.limitW {
		lo, hi := minClockFraction, 1.0
		for range 30 {
			mid := (lo + hi) / 2
			if s.power(r, mid) > s.limitW {
				hi = mid
			} else {
				lo = mid
			}
		}
		fPower = lo
	}
	if s.tempC > slowdownC {
		fThermal = max(minClockFraction, 1-slowdownPerC*(s.tempC-slowdownC))
	}
	return fPower, fThermal
}

// cost fills each scheduled request's cost (seconds of the GPU's
// roofline at full clock that its tokens need: its FLOPs over effective
// peak plus its bytes, with the weights shared by token count, over
// effective bandwidth) and returns the step's roofline.
func (s *sim) cost(batch []scheduled) roofline {
	m := s.e.LLM
	peak := s.hw.PeakFLOPS * computeEfficiency
	if m.BytesPerParam <= 1 {
		peak *= 2 // FP8 tensor cores
	}
	bw := s.hw.HBMBytesPerSecond * memoryEfficiency
	tokens := 0
	for _, b := range batch {
		tokens += b.tokens
	}
	weights := m.WeightBytes() / s.tp
	kvPerToken := m.KVBytesPerToken() / s.tp
	var rl roofline
	for i := range batch {
		b := &batch[i]
		n := float64(b.tokens)
		ctx := float64(b.r.computed) + n/2
		flops := (2*m.Params*n + 4*float64(m.Layers*m.Hidden)*n*ctx) / s.tp
		bytes := (float64(b.r.computed)+n)*kvPerToken + n*float64(m.Layers*m.Hidden*actBytesPerTokenLayer)/s.tp
		rl.tc += flops / peak
		rl.tm += bytes / bw
		b.cost = flops/peak + (bytes+weights*n/float64(tokens))/bw
	}
	rl.tm += weights / bw
	if tp := len(s.e.GPUs); tp > 1 {
		// Two all-reduces per layer (attention and MLP outputs) of the
		// step's hidden states, ring algorithm.
		size := float64(tokens*m.Hidden) * 2
		perGPU := 2 * float64(tp-1) / float64(tp) * size
		rl.comm = 2 * float64(m.Layers) * (allReduceLatency + perGPU/(s.hw.NVLinkBytesPerSecond*linkEfficiency))
		rl.linkBytes = 2 * float64(m.Layers) * perGPU
	}
	return rl
}

// step runs one engine step starting at t: the host's work, then the GPU's;
// it returns when the step ends.
func (s *sim) step(t int64) int64 {
	batch, blocked := s.schedule(t)
	if s.checkStep != nil {
		s.checkStep(s, batch)
	}
	if len(batch) == 0 {
		// Only a request too large for the whole KV pool gets here: the
		// server rejects it.
		r := s.waiting[0]
		s.waiting = s.waiting[1:]
		r.Finished, r.Finish = t, FinishAbort
		s.out.reqs = append(s.out.reqs, r.Request)
		return t
	}
	host := int64(s.e.HostStep) + int64(s.e.HostPerSeq)*int64(len(batch))
	rl := s.cost(batch)
	fPower, fThermal := s.clock(rl)
	f := min(fPower, fThermal)
	length, tensor, dram, sm := rl.at(f)
	ns := max(int64(length*1e9), 1)
	if t+host+ns >= s.end {
		// The episode ends first (a step ending at its end would finish
		// requests in the next episode): what is in the engine is
		// aborted.
		s.idle(t, s.end)
		return s.end
	}
	for _, b := range batch {
		if b.r.Scheduled == 0 {
			b.r.Scheduled = t
		}
	}
	// The host: a gap in which the GPU waits with its clocks up.
	gapW := s.hw.IdleW + powerWait*(s.hw.PowerLimitW-s.hw.IdleW)
	kvBefore := s.kvUsed()
	s.segment(Segment{Start: t, End: t + host, Phase: PhaseHost, PowerW: gapW, ClockMHz: s.hw.SMClockMaxMHz}, kvBefore, kvBefore, lHost)
	gapJ := gapW * float64(host) / 1e9 * s.tp / float64(len(batch))
	for _, b := range batch {
		b.r.addEnergy(gapJ, b.prefill)
	}
	t += host

	watts := s.power(rl, f)
	label := lMemory
	switch {
	case fThermal < throttleThreshold && fThermal <= fPower:
		label = lThermal
	case fPower < throttleThreshold:
		label = lPower
	case blocked:
		label = lCapacity
	case rl.comm > max(rl.tc/f, rl.tm):
		label = lInterconnect
	case rl.tc/f > rl.tm:
		label = lCompute
	}
	phase := PhaseDecode
	var prefillCost, total float64
	for _, b := range batch {
		total += b.cost
		if b.prefill {
			prefillCost += b.cost
		}
	}
	if prefillCost > total/2 {
		phase = PhasePrefill
	}
	// Bytes over PCIe: token IDs in, sampled tokens and logprobs out.
	pcie := float64(len(batch)) * 4096 / length
	seg := Segment{
		Start: t, End: t + ns, Phase: phase, Busy: 0.99, MemBusy: float32(min(1, dram*1.08+0.04)), PowerW: watts,
		PowerCapped: fPower < 1, ThermalSlowdown: fThermal < 1,
		SMActive: float32(min(sm, 1)), Tensor: float32(tensor), DRAM: float32(dram),
		PCIeRx: float32(pcie), PCIeTx: float32(pcie / 2), NVLink: float32(rl.linkBytes / length),
		ClockMHz: uint32(float64(s.hw.SMClockMaxMHz) * f),
	}
	stepJ := watts * float64(ns) / 1e9 * s.tp
	for _, b := range batch {
		b.r.addEnergy(stepJ*b.cost/total, b.prefill)
		b.r.Steps++
		if b.chunk {
			b.r.Chunks = append(b.r.Chunks, Chunk{Start: t, End: t + ns, Tokens: b.tokens})
		}
	}
	t += ns
	// Each request that caught up with its tokens samples the next one.
	for _, b := range batch {
		r := b.r
		r.computed += b.tokens
		if r.need() > 0 {
			continue
		}
		r.OutputTokens++
		if r.FirstToken == 0 {
			r.FirstToken = t
		}
		r.LastToken = t
		if r.OutputTokens >= r.target {
			r.Finished = t
			s.blocks += r.blocks
			r.blocks = 0
			s.running = slices.DeleteFunc(s.running, func(x *request) bool { return x == r })
			s.out.reqs = append(s.out.reqs, r.Request)
		}
	}
	s.segment(seg, kvBefore, s.kvUsed(), label)
	return t
}

func (r *request) addEnergy(j float64, prefill bool) {
	r.Energy += j
	if prefill {
		r.PrefillEnergy += j
	} else {
		r.DecodeEnergy += j
	}
}

// kvUsed is the share of the KV pool in use.
func (s *sim) kvUsed() float64 {
	if s.total == 0 {
		return 0
	}
	return 1 - float64(s.blocks)/float64(s.total)
}

// idle records the engine with nothing to do over [from, to).
func (s *sim) idle(from, to int64) {
	if to <= from {
		return
	}
	kv := s.kvUsed()
	s.segment(Segment{Start: from, End: to, Phase: PhaseIdle, PowerW: s.hw.IdleW, ClockMHz: s.hw.SMClockIdleMHz}, kv, kv, lIdle)
}

// segment appends seg with the engine's temperature and memory, advances
// the thermal model over it and accounts it to the truth bins.
func (s *sim) segment(seg Segment, kvFrom, kvTo float64, label int) {
	if seg.End <= seg.Start {
		return
	}
	seg.KVFrom, seg.KVTo = float32(kvFrom), float32(kvTo)
	seg.TempC = float32(s.tempC)
	dt := float64(seg.End-seg.Start) / 1e9
	steady := ambientC + thermalResistance*seg.PowerW
	s.tempC = steady + (s.tempC-steady)*math.Exp(-dt/thermalTau)
	s.out.segs = append(s.out.segs, seg)
	s.account(seg, label)
}

// account spreads a segment's time and energy (one GPU's) over the bins.
func (s *sim) account(seg Segment, label int) {
	w := int64(BinWidth)
	for b := (seg.Start - s.start) / w; b < int64(len(s.out.bins)); b++ {
		lo := max(seg.Start, s.start+b*w)
		hi := min(seg.End, s.start+(b+1)*w)
		if hi <= lo {
			break
		}
		d := float64(hi-lo) / 1e9
		s.binDur[b][label] += d
		j := seg.PowerW * d
		s.out.bins[b].Energy += j
		if label == lIdle {
			s.out.bins[b].Idle += j
		}
	}
}

// finishBins names each bin's dominant limiting resource: the one that held
// it longest (ties go to the earlier label in labelIndex).
func (s *sim) finishBins() {
	for i := range s.out.bins {
		best := lIdle
		for l, d := range s.binDur[i] {
			if d > s.binDur[i][best] {
				best = l
			}
		}
		s.out.bins[i].Label = labelIndex[best]
	}
	s.binDur = nil
}
