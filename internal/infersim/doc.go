// Package infersim is a seeded, deterministic model of LLM inference
// engines batching requests on the GPUs of one node, the way vLLM V1's
// scheduler does: continuous batching under a per-step token budget,
// chunked prefill mixed into decode steps, a paged KV cache that grows per
// token, preemption when it is full, and a host-side cost per step.
//
// Step times come from a roofline cost model of a named LLM on a named GPU;
// power from the step's activity, clamped by the power limit (clocks drop,
// steps slow down); temperature from a first-order thermal model.
//
// Time is cut into episodes anchored to wall-clock epochs. Each episode is
// replayed from an empty engine, so any process (the collector's simulated
// GPUs, the load generator) reconstructs any moment from (scenario, seed,
// time) alone. Arrivals stop a drain period before an episode's end; what is
// still running at the end is aborted.
//
// The model records the ground truth gpuviz is scored against: per
// request, its timeline and its true energy; per GPU and 100 ms bin, the
// dominant limiting resource and the energy. See docs/accuracy.md for the
// conventions. Nothing in the gpuviz processor may read it.
package infersim // import "github.com/gpuviz/gpuviz/internal/infersim"
