package infersim

import (
	"encoding/binary"
	"time"
)

// BinWidth is the resolution of the per-GPU ground truth: engine steps are
// shorter than any GPU counter can resolve, so truth is kept per bin.
const BinWidth = 100 * time.Millisecond

// The limiting resources, named as gpuviz's bottleneck labels.
const (
	LabelIdle              = "idle"
	LabelComputeBound      = "compute_bound"
	LabelMemoryBound       = "memory_bound"
	LabelMemoryCapacity    = "memory_capacity"
	LabelInterconnectBound = "interconnect_bound"
	LabelPowerThrottled    = "power_throttled"
	LabelThermalThrottled  = "thermal_throttled"
	LabelHostBound         = "host_bound"
)

// Labels lists the limiting resources in a fixed order.
var Labels = []string{
	LabelComputeBound, LabelMemoryBound, LabelMemoryCapacity, LabelInterconnectBound,
	LabelPowerThrottled, LabelThermalThrottled, LabelHostBound, LabelIdle,
}

// Finish reasons.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort" // still running at the episode's end
)

// Request is one request's true history. Times are Unix nanoseconds; a
// phase that never began has a zero time.
type Request struct {
	Episode int64
	Engine  int   // index into Scenario.Engines
	GPUs    []int // the engine's GPUs (shared: do not modify)
	Seq     int   // arrival order within the engine's episode
	// Key identifies the request across processes: a hash of (seed,
	// episode, engine, seq). TraceID and SpanID derive from it.
	Key uint64
	// Arrival: the server received it (vLLM's arrival_time). Queued: it
	// entered the engine's waiting queue after tokenisation (queued_ts).
	// Scheduled: first scheduled (scheduled_ts; preemption does not move
	// it). FirstToken and LastToken: the ends of the steps that produced
	// them. Finished: when the engine let go of it (LastToken, or the
	// last nanosecond of the episode for an abort).
	Arrival, Queued, Scheduled, FirstToken, LastToken, Finished int64
	PromptTokens, OutputTokens                                  int
	MaxTokens                                                   int
	Preemptions                                                 int
	Finish                                                      string
	Steps                                                       int // steps it took part in
	// Chunks are the steps before its first token (its prompt, in
	// chunks) and those that recomputed more than one of its tokens after
	// a preemption; in every other step it took part in it decoded one
	// token.
	Chunks []Chunk
	// Preempted are the moments it was preempted: sent back to the front
	// of the queue, its KV cache dropped.
	Preempted []int64
	// Energy is its true energy summed over its GPUs, J; PrefillEnergy
	// the part in steps up to its first token, DecodeEnergy the rest.
	// Queue time takes none. See the conventions in docs/accuracy.md.
	Energy, PrefillEnergy, DecodeEnergy float64
}

// Chunk is one step's share of a request's prompt or recomputation.
type Chunk struct {
	Start, End int64 // the step's
	Tokens     int
}

// TraceID is the request's trace ID: 16 bytes from its Key.
func (r Request) TraceID() [16]byte {
	var id [16]byte
	binary.BigEndian.PutUint64(id[:8], mix(r.Key^0x7472616365))
	binary.BigEndian.PutUint64(id[8:], mix(r.Key^0x6964))
	return id
}

// SpanID is the ID of the request's server span.
func (r Request) SpanID() [8]byte {
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], mix(r.Key^0x7370616e)|1)
	return id
}

// Bin is the truth of one GPU over [Start, Start+BinWidth).
type Bin struct {
	GPU   int
	Start int64
	// Label is the limiting resource that held the GPU longest in the bin.
	Label string
	// Energy drawn, J; Idle the part drawn while no request was running
	// (it belongs to no request).
	Energy, Idle float64
}

// mix is SplitMix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
