package inferspans

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var base = time.Date(2026, 11, 30, 12, 0, 7, 0, time.UTC).UnixNano()

func at(d time.Duration) int64 { return base + int64(d) }

// Hand-built requests of one engine: one plain, one preempted twice (its
// prefill, from the first scheduling to the first token, includes the
// recomputation), one whose 16k-token prompt took many chunked-prefill
// steps, one aborted while decoding at the episode's end and one aborted
// before it was ever scheduled.
var (
	plain = infersim.Request{
		Seq: 41, Key: 0x1234,
		Arrival: at(0), Queued: at(800 * time.Microsecond), Scheduled: at(12 * time.Millisecond),
		FirstToken: at(95 * time.Millisecond), LastToken: at(3200 * time.Millisecond), Finished: at(3200 * time.Millisecond),
		PromptTokens: 900, OutputTokens: 220, MaxTokens: 2048, Finish: infersim.FinishStop, Steps: 222,
	}
	preempted = infersim.Request{
		Seq: 42, Key: 0x5678,
		Arrival: at(10 * time.Millisecond), Queued: at(11 * time.Millisecond), Scheduled: at(40 * time.Millisecond),
		FirstToken: at(2400 * time.Millisecond), LastToken: at(30 * time.Second), Finished: at(30 * time.Second),
		PromptTokens: 5200, OutputTokens: 2048, MaxTokens: 2048, Preemptions: 2, Finish: infersim.FinishLength, Steps: 2060,
	}
	chunked = infersim.Request{
		Seq: 43, Key: 0x9abc,
		Arrival: at(20 * time.Millisecond), Queued: at(28300 * time.Microsecond), Scheduled: at(30 * time.Millisecond),
		FirstToken: at(1830 * time.Millisecond), LastToken: at(9 * time.Second), Finished: at(9 * time.Second),
		PromptTokens: 16000, OutputTokens: 600, MaxTokens: 2048, Finish: infersim.FinishStop, Steps: 608,
	}
	abortedRunning = infersim.Request{
		Seq: 44, Key: 0xdef0,
		Arrival: at(30 * time.Millisecond), Queued: at(31 * time.Millisecond), Scheduled: at(50 * time.Millisecond),
		FirstToken: at(140 * time.Millisecond), LastToken: at(4 * time.Second), Finished: at(4010 * time.Millisecond),
		PromptTokens: 1200, OutputTokens: 180, MaxTokens: 2048, Finish: infersim.FinishAbort,
	}
	abortedQueued = infersim.Request{
		Seq: 45, Key: 0x1357,
		Arrival: at(40 * time.Millisecond), Queued: at(41 * time.Millisecond), Finished: at(4010 * time.Millisecond),
		PromptTokens: 3000, MaxTokens: 2048, Finish: infersim.FinishAbort,
	}
	requests = []infersim.Request{plain, preempted, chunked, abortedRunning, abortedQueued}
)

var env = Env{Host: "gpu-node-1", GPUIDs: []string{
	"GPU-simulated-h200-1-00", "GPU-simulated-h200-1-01", "GPU-simulated-h200-1-02", "GPU-simulated-h200-1-03",
	"GPU-simulated-h200-1-04", "GPU-simulated-h200-1-05", "GPU-simulated-h200-1-06", "GPU-simulated-h200-1-07",
}}

func engine(t *testing.T, family string, gpus ...int) infersim.Engine {
	t.Helper()
	m, err := infersim.LookupLLM("llama-3.1-70b")
	require.NoError(t, err)
	match := infersim.MatchAttribute
	if len(gpus) == len(env.GPUIDs) {
		match = infersim.MatchHost
	}
	return infersim.Engine{Name: family + "-0", LLM: m, GPUs: gpus, Family: family, Match: match}
}

// engines: one per family, laid out as a mixed node would be.
func engines(t *testing.T) map[string]infersim.Engine {
	return map[string]infersim.Engine{
		infersim.FamilyVLLM:   engine(t, infersim.FamilyVLLM, 0, 1, 2, 3),
		infersim.FamilySGLang: engine(t, infersim.FamilySGLang, 4, 5),
		infersim.FamilyTGI:    engine(t, infersim.FamilyTGI, 6),
		infersim.FamilyTriton: engine(t, infersim.FamilyTriton, 0, 1, 2, 3, 4, 5, 6, 7),
		infersim.FamilyTRTLLM: engine(t, infersim.FamilyTRTLLM, 7),
	}
}

func withGPUs(r infersim.Request, e infersim.Engine) infersim.Request {
	r.GPUs = e.GPUs
	return r
}

// TestGolden renders every family's spans of the hand-built requests and
// compares them with testdata/<family>.golden (go test -update rewrites
// them).
func TestGolden(t *testing.T) {
	es := engines(t)
	withClient := es[infersim.FamilyVLLM]
	withClient.ClientSpans = true
	cases := map[string]infersim.Engine{"client": withClient}
	for f, e := range es {
		cases[f] = e
	}
	for name, e := range cases {
		t.Run(name, func(t *testing.T) {
			td := ptrace.NewTraces()
			for _, r := range requests {
				Append(td, withGPUs(r, e), e, env)
			}
			got := render(td)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(want), got)
		})
	}
}

// render is a stable text form of td: resources, scopes, spans with times
// relative to base and other spans named by name.
func render(td ptrace.Traces) string {
	names := map[pcommon.SpanID]string{}
	for _, sp := range allSpans(td) {
		names[sp.SpanID()] = sp.Name()
	}
	rel := func(ts pcommon.Timestamp) string { return time.Duration(int64(ts) - base).String() }
	var b strings.Builder
	for _, rs := range td.ResourceSpans().All() {
		fmt.Fprintf(&b, "resource\n%s", attrs(rs.Resource().Attributes(), "  "))
		for _, ss := range rs.ScopeSpans().All() {
			fmt.Fprintf(&b, "  scope %s\n", ss.Scope().Name())
			for _, sp := range ss.Spans().All() {
				parent := "-"
				if !sp.ParentSpanID().IsEmpty() {
					parent = names[sp.ParentSpanID()]
				}
				fmt.Fprintf(&b, "    span %q %s trace=%s id=%s parent=%q %s..%s status=%s\n", sp.Name(), sp.Kind(),
					sp.TraceID(), sp.SpanID(), parent, rel(sp.StartTimestamp()), rel(sp.EndTimestamp()), sp.Status().Code())
				b.WriteString(attrs(sp.Attributes(), "      "))
				for _, ev := range sp.Events().All() {
					fmt.Fprintf(&b, "      event %s %s\n", ev.Name(), rel(ev.Timestamp()))
				}
				for _, l := range sp.Links().All() {
					fmt.Fprintf(&b, "      link %q\n", names[l.SpanID()])
				}
			}
		}
	}
	return b.String()
}

func attrs(m pcommon.Map, indent string) string {
	var b strings.Builder
	for k, v := range m.All() {
		fmt.Fprintf(&b, "%s%s=%s (%s)\n", indent, k, v.AsString(), v.Type())
	}
	return b.String()
}

func allSpans(td ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				out = append(out, sp)
			}
		}
	}
	return out
}

func spanNamed(t *testing.T, td ptrace.Traces, name string) ptrace.Span {
	t.Helper()
	var found []ptrace.Span
	for _, sp := range allSpans(td) {
		if sp.Name() == name {
			found = append(found, sp)
		}
	}
	require.Len(t, found, 1, name)
	return found[0]
}

func double(t *testing.T, sp ptrace.Span, key string) float64 {
	t.Helper()
	v, ok := sp.Attributes().Get(key)
	require.True(t, ok, key)
	require.Equal(t, pcommon.ValueTypeDouble, v.Type(), key)
	return v.Double()
}

func ns(s float64) time.Duration { return time.Duration(s*1e9 + 0.5) }

// TestVLLMLatencies checks the arithmetic of vLLM's do_tracing on the
// engine's timestamps: the phases add up to inference, e2e is arrival to
// export, and the hop from arrival to the engine's queue is in e2e and
// time_to_first_token but in no phase.
func TestVLLMLatencies(t *testing.T) {
	e := engines(t)[infersim.FamilyVLLM]
	for _, r := range []infersim.Request{plain, preempted, chunked} {
		td := ptrace.NewTraces()
		require.True(t, Append(td, r, e, env))
		sp := spanNamed(t, td, "llm_request")
		queue := ns(double(t, sp, "gen_ai.latency.time_in_queue"))
		prefill := ns(double(t, sp, "gen_ai.latency.time_in_model_prefill"))
		decode := ns(double(t, sp, "gen_ai.latency.time_in_model_decode"))
		inference := ns(double(t, sp, "gen_ai.latency.time_in_model_inference"))
		ttft := ns(double(t, sp, "gen_ai.latency.time_to_first_token"))
		e2e := ns(double(t, sp, "gen_ai.latency.e2e"))

		hop := time.Duration(r.Queued - r.Arrival)
		assert.Equal(t, time.Duration(r.Scheduled-r.Queued), queue, "queued_ts to the first scheduled_ts")
		assert.Equal(t, time.Duration(r.FirstToken-r.Scheduled), prefill, "preemptions and chunks stay in prefill")
		assert.Equal(t, prefill+decode, inference)
		assert.Equal(t, hop+queue+prefill, ttft)
		assert.Equal(t, ttft+decode, e2e, "the last token ends the request")
		assert.Equal(t, e2e, time.Duration(sp.EndTimestamp()-sp.StartTimestamp()), "start = arrival, end = export")
		assert.Equal(t, r.Arrival, int64(sp.StartTimestamp()))
	}
	// Preemption does not move the first scheduling: the preempted request's
	// prefill is 2.36 s though its prompt alone takes far less.
	td := ptrace.NewTraces()
	Append(td, preempted, e, env)
	assert.InDelta(t, 2.36, double(t, spanNamed(t, td, "llm_request"), "gen_ai.latency.time_in_model_prefill"), 1e-9)
}

// requestSpan is the span each family's request is: the one with r.SpanID().
var requestSpan = map[string]string{
	infersim.FamilyVLLM:   "llm_request",
	infersim.FamilySGLang: " Req ",
	infersim.FamilyTGI:    "chat_completions",
	infersim.FamilyTriton: "tensorrt_llm",
	infersim.FamilyTRTLLM: "llm_request",
}

func TestSpanIDs(t *testing.T) {
	for family, e := range engines(t) {
		for _, r := range requests {
			td := ptrace.NewTraces()
			if !Append(td, withGPUs(r, e), e, env) {
				// Without this, a family that exported nothing passed.
				assert.Equal(t, infersim.FinishAbort, r.Finish, "%s %x: only an aborted request may go without spans", family, r.Key)
				assert.Zero(t, td.SpanCount(), "%s %x: no span", family, r.Key)
				continue
			}
			ids := map[pcommon.SpanID]ptrace.Span{}
			for _, sp := range allSpans(td) {
				assert.Equal(t, pcommon.TraceID(r.TraceID()), sp.TraceID(), "%s: one trace per request", sp.Name())
				assert.NotContains(t, ids, sp.SpanID(), "%s: unique span IDs", sp.Name())
				ids[sp.SpanID()] = sp
			}
			req, ok := ids[r.SpanID()]
			require.True(t, ok, "%s: a span has r.SpanID()", family)
			assert.True(t, strings.HasPrefix(req.Name(), requestSpan[family]), "%s: %q", family, req.Name())
			for _, sp := range ids {
				if !sp.ParentSpanID().IsEmpty() {
					assert.Contains(t, ids, sp.ParentSpanID(), "%s: parent in the trace", sp.Name())
				}
			}
		}
	}
}

func TestClientSpanIsTheServersParent(t *testing.T) {
	for family, e := range engines(t) {
		e.ClientSpans = true
		td := ptrace.NewTraces()
		require.True(t, Append(td, withGPUs(plain, e), e, env))
		client := spanNamed(t, td, "chat meta-llama/Llama-3.1-70B-Instruct")
		assert.Equal(t, ptrace.SpanKindClient, client.Kind())
		assert.True(t, client.ParentSpanID().IsEmpty())
		assert.Less(t, int64(client.StartTimestamp()), plain.Arrival)
		assert.Greater(t, int64(client.EndTimestamp()), plain.Finished)
		var roots []string
		for _, sp := range allSpans(td) {
			if sp.ParentSpanID() == client.SpanID() {
				roots = append(roots, sp.Name())
			}
		}
		assert.Len(t, roots, 1, "%s: the server's top span is the client's child: %v", family, roots)
		in, _ := client.Attributes().Get("gen_ai.usage.input_tokens")
		assert.Equal(t, int64(plain.PromptTokens), in.Int())
		out, _ := client.Attributes().Get("gen_ai.usage.output_tokens")
		assert.Equal(t, int64(plain.OutputTokens), out.Int())
	}
}

func TestDeterministic(t *testing.T) {
	var m ptrace.JSONMarshaler
	for _, e := range engines(t) {
		e.ClientSpans = true
		var runs [2][]byte
		for i := range runs {
			td := ptrace.NewTraces()
			for _, r := range requests {
				Append(td, withGPUs(r, e), e, env)
			}
			var err error
			runs[i], err = m.MarshalTraces(td)
			require.NoError(t, err)
		}
		assert.Equal(t, string(runs[0]), string(runs[1]), e.Family)
	}
	// Different requests differ in every ID.
	assert.NotEqual(t, spanID(plain, saltClient), spanID(preempted, saltClient))
	assert.NotEqual(t, hexID(plain, saltRequestID), hexID(preempted, saltRequestID))
}

func TestAborted(t *testing.T) {
	es := engines(t)
	for _, r := range []infersim.Request{abortedRunning, abortedQueued} {
		for family, exported := range map[string]bool{
			infersim.FamilyVLLM: false, infersim.FamilyTRTLLM: false,
			infersim.FamilySGLang: true, infersim.FamilyTGI: true, infersim.FamilyTriton: true,
		} {
			e := es[family]
			e.ClientSpans = true
			td := ptrace.NewTraces()
			assert.Equal(t, exported, Append(td, withGPUs(r, e), e, env), family)
			client := spanNamed(t, td, "chat meta-llama/Llama-3.1-70B-Instruct")
			assert.Equal(t, ptrace.StatusCodeError, client.Status().Code(), "the application gave up")
			if !exported {
				assert.Equal(t, 1, td.SpanCount(), "%s: the client span alone", family)
			}
		}
	}
	// The parts of an aborted request that happened are there, no more.
	td := ptrace.NewTraces()
	Append(td, abortedQueued, es[infersim.FamilyTriton], env)
	assert.Equal(t, 2, td.SpanCount(), "Triton: never scheduled, no compute span")
	td = ptrace.NewTraces()
	Append(td, abortedRunning, es[infersim.FamilyTGI], env)
	_, ok := spanNamed(t, td, "chat_completions").Attributes().Get("inference_time")
	assert.False(t, ok, "TGI records its timing fields on success only")
	td = ptrace.NewTraces()
	Append(td, abortedRunning, es[infersim.FamilySGLang], env)
	_, ok = spanNamed(t, td, " Req "+hexID(abortedRunning, saltRequestID)[:8]).Attributes().Get("gen_ai.latency.e2e")
	assert.False(t, ok, "SGLang's abort path sets no gen_ai attributes")
}

func TestGPUHint(t *testing.T) {
	for family, e := range engines(t) {
		e.ClientSpans = true
		td := ptrace.NewTraces()
		Append(td, withGPUs(plain, e), e, env)
		require.Equal(t, 2, td.ResourceSpans().Len())
		for _, rs := range td.ResourceSpans().All() {
			service, _ := rs.Resource().Attributes().Get("service.name")
			hint, ok := rs.Resource().Attributes().Get(GPUUUIDKey)
			switch {
			case service.Str() == clientService:
				assert.False(t, ok, "the application runs on no GPU")
			case e.Match == infersim.MatchHost:
				assert.False(t, ok, "%s owns the node: no hint", family)
			default:
				var want []string
				for _, g := range e.GPUs {
					want = append(want, env.GPUIDs[g])
				}
				assert.Equal(t, strings.Join(want, ","), hint.Str(), family)
			}
			for _, k := range []string{"host.name", "process.pid"} {
				_, ok := rs.Resource().Attributes().Get(k)
				assert.False(t, ok, "%s: no server sets %s", family, k)
			}
		}
	}
}

func TestResources(t *testing.T) {
	es := engines(t)
	td := ptrace.NewTraces()
	withEnv := env
	withEnv.Resource = map[string]any{"host.name": "gpu-node-1", "process.pid": int64(4103)}
	for _, r := range []infersim.Request{plain, preempted, chunked} {
		Append(td, r, es[infersim.FamilyVLLM], withEnv)
		Append(td, r, es[infersim.FamilyTGI], withEnv)
	}
	require.Equal(t, 2, td.ResourceSpans().Len(), "one resource per server")
	for _, rs := range td.ResourceSpans().All() {
		require.Equal(t, 1, rs.ScopeSpans().Len(), "one scope per server")
		a := rs.Resource().Attributes()
		pid, _ := a.Get("process.pid")
		assert.Equal(t, pcommon.ValueTypeInt, pid.Type(), "the deployment's attributes keep their types")
		host, _ := a.Get("host.name")
		assert.Equal(t, "gpu-node-1", host.Str())
	}
	assert.Equal(t, 3, td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().Len())
	assert.Equal(t, 6, td.ResourceSpans().At(1).ScopeSpans().At(0).Spans().Len())
}

func TestSGLangThreads(t *testing.T) {
	e := engines(t)[infersim.FamilySGLang]
	td := ptrace.NewTraces()
	Append(td, withGPUs(chunked, e), e, env)
	byName := map[string]ptrace.Span{}
	for _, sp := range allSpans(td) {
		byName[sp.Name()] = sp
	}
	host := machineID(env.Host)
	for rank, gpu := range e.GPUs {
		name := fmt.Sprintf("Scheduler [TP %d] (host:%s | pid:%d)", rank, host[:8], nvmlsim.SimulatedPID(gpu))
		sched, ok := byName[name]
		require.True(t, ok, "a thread span per TP rank: %s", name)
		pid, _ := sched.Attributes().Get("pid")
		assert.Equal(t, int64(nvmlsim.SimulatedPID(gpu)), pid.Int(), "the scheduler is the GPU's process")
	}
	tok, ok := byName[fmt.Sprintf("Tokenizer(host:%s | pid:%d)", host[:8], serverPID(e))]
	require.True(t, ok)
	// The tokenizer's stages under its thread span, named as SGLang's
	// python/sglang/srt/observability/req_time_stats.py (sgl-project/sglang)
	// names RequestStage.TOKENIZE and API_SERVER_DISPATCH.
	var stages []string
	for _, sp := range allSpans(td) {
		if sp.ParentSpanID() == tok.SpanID() {
			stages = append(stages, sp.Name())
		}
	}
	assert.Equal(t, []string{"tokenize", "api_server_dispatch"}, stages)
	// The stages follow each other and the engine's timestamps.
	for _, s := range []struct {
		name       string
		start, end int64
	}{
		{"prefill_waiting", chunked.Queued, chunked.Scheduled},
		{"decode_forward", chunked.FirstToken, chunked.Finished},
	} {
		n := 0
		for _, sp := range allSpans(td) {
			if sp.Name() == s.name {
				n++
				assert.Equal(t, s.start, int64(sp.StartTimestamp()), s.name)
				assert.Equal(t, s.end, int64(sp.EndTimestamp()), s.name)
				require.Equal(t, 1, sp.Links().Len(), "%s links to the stage before", s.name)
			}
		}
		assert.Equal(t, len(e.GPUs), n, "%s on every rank", s.name)
	}
}

func TestRustDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                  "0ns",
		12:                                 "12ns",
		999:                                "999ns",
		time.Microsecond:                   "1µs",
		850 * time.Microsecond:             "850µs",
		1500:                               "1.5µs",
		1_234_567:                          "1.234567ms",
		time.Millisecond:                   "1ms",
		1_000_001:                          "1.000001ms",
		999_999_999:                        "999.999999ms",
		time.Second:                        "1s",
		2500 * time.Millisecond:            "2.5s",
		time.Second + 1:                    "1.000000001s",
		3*time.Minute + 7*time.Millisecond: "180.007s",
		-time.Second:                       "0ns",
	} {
		assert.Equal(t, want, rustDuration(d), "%d", int64(d))
	}
}

func TestUnknownFamilyPanics(t *testing.T) {
	e := engines(t)[infersim.FamilyVLLM]
	e.Family = "ollama"
	assert.PanicsWithValue(t, `inferspans: engine vllm-0 has unknown family "ollama"`, func() { Append(ptrace.NewTraces(), plain, e, env) })
}
