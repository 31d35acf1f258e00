package inference

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// The spans internal/inferspans builds for the simulated engines are what
// the accuracy harness feeds the processor: every span standing for a
// request must be recognised, with the phases the engine's own timestamps
// give, and no other span may count as a request.

const simGPUs = 8

func simEnv() inferspans.Env {
	ids := make([]string, simGPUs)
	for i := range ids {
		ids[i] = nvmlsim.SimulatedUUID("h200", 1, i)
	}
	return inferspans.Env{Host: "gpu-node-1", GPUIDs: ids}
}

// simRequests are hand-built requests of one engine beside the simulated
// ones, for what an episode may not have: a one-token answer, a request
// aborted while decoding and one aborted before it was scheduled.
func simRequests(base int64) []infersim.Request {
	at := func(d time.Duration) int64 { return base + int64(d) }
	return []infersim.Request{
		{
			Seq: 1, Key: 0x1234, Arrival: at(0), Queued: at(800 * time.Microsecond), Scheduled: at(12 * ms),
			FirstToken: at(95 * ms), LastToken: at(3200 * ms), Finished: at(3200 * ms),
			PromptTokens: 900, OutputTokens: 220, MaxTokens: 2048, Finish: infersim.FinishStop,
		},
		{
			Seq: 2, Key: 0x2345, Arrival: at(ms), Queued: at(1050 * time.Microsecond), Scheduled: at(1100 * time.Microsecond),
			FirstToken: at(40 * ms), LastToken: at(40 * ms), Finished: at(40 * ms),
			PromptTokens: 50, OutputTokens: 1, MaxTokens: 1, Finish: infersim.FinishLength,
		},
		{
			Seq: 3, Key: 0xdef0, Arrival: at(30 * ms), Queued: at(31 * ms), Scheduled: at(50 * ms),
			FirstToken: at(140 * ms), LastToken: at(4 * time.Second), Finished: at(4010 * ms),
			PromptTokens: 1200, OutputTokens: 180, MaxTokens: 2048, Finish: infersim.FinishAbort,
		},
		{
			Seq: 4, Key: 0x1357, Arrival: at(40 * ms), Queued: at(41 * ms), Finished: at(4010 * ms),
			PromptTokens: 3000, MaxTokens: 2048, Finish: infersim.FinishAbort,
		},
	}
}

func TestRecognizeSimulatedSpans(t *testing.T) {
	node, err := nvmlsim.NewNode("h200", "mixed", simGPUs, 1)
	require.NoError(t, err)
	ep := node.Episode(node.EpisodeIndex(t0.UnixNano()))
	clock := time.Unix(0, ep.End).Add(time.Minute)
	env := simEnv()
	r := newTestRecognizer(t)

	const perEngine = 200 // enough of each engine's shapes, quick under -race
	seen := map[int]int{}
	engines := node.Scenario().Engines
	for i, e := range engines {
		if e.Family != infersim.FamilySGLang && e.Family != infersim.FamilyTRTLLM && !e.ClientSpans {
			continue
		}
		for _, q := range simRequests(ep.Start + int64(time.Minute)) {
			q.Engine, q.GPUs = i, e.GPUs
			checkSimulated(t, r, q, e, env, clock)
		}
	}
	for _, q := range ep.Requests() {
		e := engines[q.Engine]
		if e.Family != infersim.FamilySGLang && e.Family != infersim.FamilyTRTLLM && !e.ClientSpans {
			continue
		}
		if seen[q.Engine] == perEngine {
			continue
		}
		seen[q.Engine]++
		checkSimulated(t, r, q, e, env, clock)
	}
	// The mixed scenario has all three: SGLang, TensorRT-LLM and vLLM behind
	// the application's client spans.
	families := map[string]bool{}
	for i, n := range seen {
		assert.Equal(t, perEngine, n, engines[i].Name)
		families[engines[i].Family] = true
		families["client"] = families["client"] || engines[i].ClientSpans
	}
	assert.Equal(t, map[string]bool{"sglang": true, "trtllm": true, "vllm": true, "client": true}, families)
}

// checkSimulated recognises every span inferspans exports for q.
func checkSimulated(t *testing.T, r *Recognizer, q infersim.Request, e infersim.Engine, env inferspans.Env, clock time.Time) {
	t.Helper()
	td := ptrace.NewTraces()
	exported := inferspans.Append(td, q, e, env)
	requests := 0
	var dispatched int64 // SGLang's api_server_dispatch slice's end: the request reaches the scheduler
	type found struct {
		span ptrace.Span
		res  pcommon.Resource
	}
	var all []found
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				all = append(all, found{sp, rs.Resource()})
				if sp.Name() == "api_server_dispatch" {
					dispatched = int64(sp.EndTimestamp())
				}
			}
		}
	}
	name := e.Name + "/" + q.Finish + "/" + time.Duration(q.Finished-q.Arrival).String()
	for _, f := range all {
		sp := f.span
		got, v, reason := r.Recognize(sp, f.res, clock)
		switch {
		case sp.Kind() == ptrace.SpanKindClient:
			require.Equal(t, Recognized, v, "%s: client span: %s", name, reason)
			assert.Equal(t, FamilyGenAI, got.Family, name)
			assert.True(t, got.Client, name)
			assert.Equal(t, sp.StartTimestamp().AsTime(), got.Start, name)
			assert.Equal(t, sp.EndTimestamp().AsTime(), got.End, name)
		case sp.SpanID() == q.SpanID():
			require.Equal(t, Recognized, v, "%s: %s", name, reason)
			assert.False(t, got.Client || got.Aggregate, name)
			requests++
			if e.Family == infersim.FamilyVLLM {
				assert.Equal(t, FamilyVLLM, got.Family, name)
				continue
			}
			assert.Equal(t, simWant(q, e, env, dispatched), got, name)
		default:
			// SGLang's thread and stage spans.
			assert.Equal(t, infersim.FamilySGLang, e.Family, "%s: unexpected span %q", name, sp.Name())
			assert.Equal(t, NotInference, v, "%s: %q", name, sp.Name())
		}
	}
	want := 0
	if exported {
		want = 1
	}
	assert.Equal(t, want, requests, "%s: spans counted as the request", name)
}

// simWant is what the server span of q should say, from the engine's own
// timestamps.
func simWant(q infersim.Request, e infersim.Engine, env inferspans.Env, dispatched int64) Request {
	want := Request{
		Family: e.Family, Start: time.Unix(0, q.Arrival).UTC(), End: time.Unix(0, q.Finished).UTC(),
		InputTokens: int64(q.PromptTokens), OutputTokens: int64(q.OutputTokens),
	}
	if e.Match == infersim.MatchAttribute {
		for _, g := range e.GPUs {
			want.GPUIDs = append(want.GPUIDs, env.GPUIDs[g])
		}
	}
	phase := func(name string, from, to int64) {
		if to > from {
			want.Phases = append(want.Phases, Phase{Name: name, Start: time.Unix(0, from).UTC(), End: time.Unix(0, to).UTC()})
		}
	}
	switch e.Family {
	case infersim.FamilySGLang:
		if q.Finish == infersim.FinishAbort {
			want.InputTokens, want.OutputTokens = -1, -1
			return want
		}
		want.Model = simModel(e)
		phase(PhasePrefill, dispatched, q.FirstToken)
		phase(PhaseDecode, q.FirstToken, q.Finished)
	case infersim.FamilyTRTLLM:
		phase(PhaseQueue, q.Arrival, q.Scheduled)
		phase(PhasePrefill, q.Scheduled, q.FirstToken)
		phase(PhaseDecode, q.FirstToken, q.LastToken)
	}
	return want
}

// simModel is the Hugging Face id SGLang reports for e's model, as
// inferspans names them.
func simModel(e infersim.Engine) string {
	switch {
	case strings.HasPrefix(e.LLM.Name, "qwen2.5-32b"):
		return "Qwen/Qwen2.5-32B-Instruct"
	case e.LLM.Name == "llama-3.1-70b":
		return "meta-llama/Llama-3.1-70B-Instruct"
	case e.LLM.Name == "llama-3.1-8b":
		return "meta-llama/Llama-3.1-8B-Instruct"
	}
	return e.LLM.Name
}
