// Package inferspans builds, as pdata, the spans inference servers export
// for one request of the simulated engines of internal/infersim: vLLM,
// SGLang, HuggingFace TGI, Triton serving the TensorRT-LLM backend, and
// TensorRT-LLM's own server, each with the span names, kinds, attributes and
// resource its code sets (each family's file names the code it follows),
// and the application's GenAI client span around them where the scenario
// has one. Timestamps are the engine's own, so the spans describe exactly
// what the simulated GPUs did.
//
// Every span of a request is in trace r.TraceID(); the server span that
// stands for the request (the one the gpuviz processor enriches) has ID
// r.SpanID(), and the others IDs drawn from r.Key.
package inferspans // import "github.com/gpuviz/gpuviz/internal/inferspans"

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// Env is what a deployment gives the servers beyond the requests.
type Env struct {
	// Host is the node's host name. No server here puts host.name on its
	// resource; SGLang's thread spans carry the machine's id, which is
	// derived from Host.
	Host string
	// GPUIDs are the node's GPU UUIDs by NVML index.
	GPUIDs []string
	// Resource is what the deployment adds to every server resource
	// (OTEL_RESOURCE_ATTRIBUTES, a collector's resource processor), in the
	// forms pcommon.Value.FromRaw takes.
	Resource map[string]any
}

// GPUUUIDKey is the resource attribute that names an engine's GPUs when it
// shares the node (infersim.MatchAttribute): its UUIDs, comma-separated, as
// NVIDIA_VISIBLE_DEVICES lists them. The Python and C++ SDKs take it from
// OTEL_RESOURCE_ATTRIBUTES (commas percent-encoded) or Triton's
// --trace-config opentelemetry,resource=...; TGI replaces its SDK's resource,
// so there a collector's resource processor adds it.
const GPUUUIDKey = "gpu.uuid"

// Append appends to td the spans that engine e's server exports for r, and
// the application's client span before them when e has client spans. It
// reports whether the server exported any: vLLM and TensorRT-LLM export
// nothing for an aborted request. Spans of one resource and scope share one
// ScopeSpans in td, as an SDK batches them.
func Append(td ptrace.Traces, r infersim.Request, e infersim.Engine, env Env) bool {
	var parent pcommon.SpanID
	if e.ClientSpans {
		parent = appendClient(td, r, e)
	}
	switch e.Family {
	case infersim.FamilyVLLM:
		return appendVLLM(td, r, e, env, parent)
	case infersim.FamilySGLang:
		return appendSGLang(td, r, e, env, parent)
	case infersim.FamilyTGI:
		appendTGI(td, r, e, env, parent)
		return true
	case infersim.FamilyTriton:
		appendTriton(td, r, e, env, parent)
		return true
	case infersim.FamilyTRTLLM:
		return appendTRTLLM(td, r, e, env, parent)
	}
	panic(fmt.Sprintf("inferspans: engine %s has unknown family %q", e.Name, e.Family))
}

// The versions the servers' SDK resources report.
const (
	pythonSDKVersion = "1.38.0" // opentelemetry-sdk (vLLM, SGLang, TensorRT-LLM)
	cppSDKVersion    = "1.8.3"  // opentelemetry-cpp (Triton)
)

// resource is the attribute set of a server's resource: what the deployment
// adds, then what the server sets (it wins), then the GPU hint.
func resource(e infersim.Engine, env Env, own ...kv) pcommon.Map {
	m := pcommon.NewMap()
	keys := make([]string, 0, len(env.Resource))
	for k := range env.Resource {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := m.PutEmpty(k).FromRaw(env.Resource[k]); err != nil {
			panic(fmt.Sprintf("inferspans: Env.Resource[%q]: %v", k, err))
		}
	}
	for _, a := range own {
		m.PutStr(a.k, a.v)
	}
	if e.Match == infersim.MatchAttribute {
		ids := make([]string, len(e.GPUs))
		for i, g := range e.GPUs {
			ids[i] = env.GPUIDs[g]
		}
		m.PutStr(GPUUUIDKey, strings.Join(ids, ","))
	}
	return m
}

// kv is a string attribute.
type kv struct{ k, v string }

// pythonSDK is the resource the OpenTelemetry Python SDK's Resource.create
// starts from.
func pythonSDK(service string) []kv {
	return []kv{
		{"telemetry.sdk.language", "python"},
		{"telemetry.sdk.name", "opentelemetry"},
		{"telemetry.sdk.version", pythonSDKVersion},
		{"service.name", service},
	}
}

// scopeSpans returns the spans of scope under resource res in td, adding
// them if td has none yet.
func scopeSpans(td ptrace.Traces, res pcommon.Map, scope string) ptrace.SpanSlice {
	rss := td.ResourceSpans()
	var rs ptrace.ResourceSpans
	found := false
	for i := range rss.Len() {
		if rss.At(i).Resource().Attributes().Equal(res) {
			rs, found = rss.At(i), true
			break
		}
	}
	if !found {
		rs = rss.AppendEmpty()
		res.MoveTo(rs.Resource().Attributes())
	}
	for i := range rs.ScopeSpans().Len() {
		if ss := rs.ScopeSpans().At(i); ss.Scope().Name() == scope {
			return ss.Spans()
		}
	}
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName(scope)
	return ss.Spans()
}

// newSpan appends a span of r's trace to ss.
func newSpan(ss ptrace.SpanSlice, r infersim.Request, name string, kind ptrace.SpanKind, id, parent pcommon.SpanID, start, end int64) ptrace.Span {
	sp := ss.AppendEmpty()
	sp.SetTraceID(r.TraceID())
	sp.SetSpanID(id)
	sp.SetParentSpanID(parent)
	sp.SetName(name)
	sp.SetKind(kind)
	sp.SetStartTimestamp(pcommon.Timestamp(start))
	sp.SetEndTimestamp(pcommon.Timestamp(end))
	return sp
}

// event adds a timestamped event to sp.
func event(sp ptrace.Span, name string, at int64) {
	ev := sp.Events().AppendEmpty()
	ev.SetName(name)
	ev.SetTimestamp(pcommon.Timestamp(at))
}

// Salts of the per-request draws: each span and each value drawn from r.Key
// has its own.
const (
	saltClient = iota + 1
	saltClientLead
	saltClientTail
	saltRequestID
	saltTemperature
	saltTopP
	saltSeed
	saltThread
	saltTGIServer
	saltTritonRoot
	saltTritonCompute
	saltSGLangThread // + the thread's index
)

// draw is a uniform 64-bit value, a pure function of the request and salt.
func draw(r infersim.Request, salt uint64) uint64 {
	return rand.NewPCG(r.Key, salt).Uint64()
}

// spanID is the ID of one of r's spans other than the request span.
func spanID(r infersim.Request, salt uint64) pcommon.SpanID {
	var id pcommon.SpanID
	binary.BigEndian.PutUint64(id[:], draw(r, salt)|1)
	return id
}

// hexID is 32 hex digits from r (a uuid4().hex, as the Python servers name
// requests).
func hexID(r infersim.Request, salt uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], draw(r, salt))
	binary.BigEndian.PutUint64(b[8:], draw(r, salt<<32))
	return hex.EncodeToString(b[:])
}

// between is a duration drawn uniformly from [lo, hi) nanoseconds.
func between(r infersim.Request, salt uint64, lo, hi int64) int64 {
	return lo + int64(draw(r, salt)%uint64(hi-lo))
}

// The clients' sampling parameters, drawn per request.
var (
	temperatures = []float64{0.7, 1, 0.2, 0.8, 0.6}
	topPs        = []float64{0.95, 1, 0.9}
)

func temperature(r infersim.Request) float64 {
	return temperatures[draw(r, saltTemperature)%uint64(len(temperatures))]
}

func topP(r infersim.Request) float64 { return topPs[draw(r, saltTopP)%uint64(len(topPs))] }

// finishReasons is the JSON string the Python servers report
// (json.dumps([reason])).
func finishReasons(r infersim.Request) string { return `["` + r.Finish + `"]` }

// secs is a latency in seconds, as the Python servers report them.
func secs(ns int64) float64 { return float64(ns) / 1e9 }

// hfModels are the Hugging Face ids the engines serve infersim's LLMs as.
var hfModels = map[string]string{
	"llama-3.1-8b":      "meta-llama/Llama-3.1-8B-Instruct",
	"llama-3.1-70b":     "meta-llama/Llama-3.1-70B-Instruct",
	"llama-3.1-70b-fp8": "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8",
	"qwen2.5-32b":       "Qwen/Qwen2.5-32B-Instruct",
}

// modelName is the name e serves its LLM under.
func modelName(e infersim.Engine) string {
	if id, ok := hfModels[e.LLM.Name]; ok {
		return id
	}
	return e.LLM.Name
}

// serverPID is the PID of e's front-end process (HTTP server, tokenizer):
// not a GPU process, so NVML never reports it.
func serverPID(e infersim.Engine) int64 {
	if len(e.GPUs) == 0 {
		return 2000
	}
	return 2000 + 10*int64(e.GPUs[0])
}
