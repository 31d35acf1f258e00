package otlpsend

import (
	"math/rand/v2"
	"os"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
)

// FloodShape bounds the requests of VLLM's payloads and of
// examples/loadgen's flood mode: the whole request (arrival to end), the
// queueing and the prefill; the decode is the rest.
var FloodShape = struct {
	Total, Queue, Prefill  [2]time.Duration
	PromptRate, OutputRate float64 // tokens per second of prefill and decode
}{
	Total:      [2]time.Duration{500 * time.Millisecond, 3500 * time.Millisecond},
	Queue:      [2]time.Duration{time.Millisecond, 20 * time.Millisecond},
	Prefill:    [2]time.Duration{50 * time.Millisecond, 400 * time.Millisecond},
	PromptRate: 10000,
	OutputRate: 60,
}

// VLLM returns n payloads of batch vLLM llm_request spans each
// (inferspans, vLLM V1's span and resource) from one vLLM server on host
// with no GPU hint, so the gpuviz processor matches them to every GPU of
// the host. Within a payload the requests end 1/rate seconds apart, as
// they would at that rate. The payloads differ in their requests' shapes
// (seeded by seed).
func VLLM(host string, n, batch int, rate float64, seed uint64) ([]*Payload, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	between := func(r [2]time.Duration) int64 { return int64(r[0]) + rng.Int64N(int64(r[1]-r[0])) }
	e := infersim.Engine{Name: "vllm", Family: infersim.FamilyVLLM, Match: infersim.MatchHost}
	env := inferspans.Env{Host: host, Resource: map[string]any{"host.name": host, "process.pid": int64(os.Getpid())}}
	step := int64(float64(time.Second) / rate)
	// Template times start an hour after the epoch: a zero timestamp is
	// absent from the encoding, so a send could not move it.
	const epoch = int64(time.Hour)
	out := make([]*Payload, 0, n)
	for i := range n {
		td := ptrace.NewTraces()
		for j := range batch {
			end := epoch + int64(j)*step
			arrival := end - between(FloodShape.Total)
			scheduled := arrival + between(FloodShape.Queue)
			prefill := between(FloodShape.Prefill)
			output := max(1, int(float64(end-scheduled-prefill)/1e9*FloodShape.OutputRate))
			inferspans.Append(td, infersim.Request{
				Seq: i*batch + j, Key: rng.Uint64(),
				Arrival: arrival, Queued: arrival, Scheduled: scheduled,
				FirstToken: scheduled + prefill, LastToken: end, Finished: end,
				PromptTokens: max(1, int(float64(prefill)/1e9*FloodShape.PromptRate)), OutputTokens: output,
				MaxTokens: 4096, Finish: infersim.FinishStop,
			}, e, env)
		}
		p, err := Encode(td)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
