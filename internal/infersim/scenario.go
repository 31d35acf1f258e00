package infersim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Span families: which inference server an engine is, and so which spans
// its requests produce.
const (
	FamilyVLLM   = "vllm"
	FamilySGLang = "sglang"
	FamilyTGI    = "tgi"
	FamilyTriton = "triton" // Triton serving the TensorRT-LLM backend
	FamilyTRTLLM = "trtllm" // TensorRT-LLM's own server (trtllm-serve)
)

// How the spans of an engine's requests find their GPUs in a real
// deployment: by host when one engine owns the node, by an attribute that
// names the GPUs (NVIDIA_VISIBLE_DEVICES) when several engines share it.
const (
	MatchHost      = "host"
	MatchAttribute = "attribute"
)

// Scenario is a node's workload: its engines, their traffic, and the power
// limit its GPUs run under.
type Scenario struct {
	Name        string
	Description string
	// Episode is the length of one episode; Drain how long before its end
	// arrivals stop, so that nearly every request finishes inside it.
	Episode, Drain time.Duration
	// PowerLimitW overrides the board's power limit; 0 keeps it.
	PowerLimitW float64
	Engines     []Engine
}

// Engine is one inference server on a tensor-parallel group of GPUs.
type Engine struct {
	Name   string // its service name: the family ("vllm") for the only engine of a node, else e.g. "vllm-0"
	LLM    LLM
	GPUs   []int // NVML indexes of its tensor-parallel group
	Family string
	Match  string
	// ClientSpans: the application's GenAI CLIENT span wraps each request
	// (the server span is its child).
	ClientSpans bool
	Scheduler   SchedulerConfig
	// Host cost of one step (scheduling, input preparation, sampling,
	// detokenisation), during which the GPU waits: HostStep plus
	// HostPerSeq for every request in the step.
	HostStep, HostPerSeq time.Duration
	Traffic              Traffic
}

// SchedulerConfig mirrors vLLM's scheduler settings.
type SchedulerConfig struct {
	MaxNumSeqs       int     // requests running at once
	MaxBatchedTokens int     // tokens per step (prompt chunks and decodes)
	BlockSize        int     // tokens per KV-cache block
	MemoryFraction   float64 // gpu_memory_utilization: weights, KV pool and activations
}

// Traffic is an engine's arrival process and request shapes.
type Traffic struct {
	Rate  float64 // mean arrivals per second (in the "on" state when bursty)
	Burst Burst
	// Prompt and output lengths, tokens.
	Prompt, Output Lengths
	// MaxTokens caps the output; a request that reaches it finishes with
	// "length".
	MaxTokens int
}

// Burst makes arrivals a two-state Markov-modulated Poisson process: Rate
// while on, OffRate while off, for exponentially distributed stretches of
// mean MeanOn and MeanOff. Zero MeanOn means plain Poisson at Rate.
type Burst struct {
	OffRate         float64
	MeanOn, MeanOff time.Duration
}

// Lengths is a log-normal distribution of token counts, clipped.
type Lengths struct {
	Median   float64
	Sigma    float64 // of the log
	Min, Max int
}

// engineShape is an engine of a scenario before it is placed on GPUs.
type engineShape struct {
	tp     int
	llm    string
	family string
	client bool
	sched  SchedulerConfig
	host   [2]time.Duration
	load   Traffic
}

type scenarioShape struct {
	description    string
	episode, drain time.Duration
	powerFraction  float64 // of the board limit; 0: the board's
	engines        []engineShape
}

var (
	defaultSched = SchedulerConfig{MaxNumSeqs: 256, MaxBatchedTokens: 2048, BlockSize: 16, MemoryFraction: 0.9}
	chatPrompt   = Lengths{Median: 900, Sigma: 0.9, Min: 16, Max: 8192}
	chatOutput   = Lengths{Median: 220, Sigma: 0.8, Min: 4, Max: 2048}
	vllmHost     = [2]time.Duration{1500 * time.Microsecond, 15 * time.Microsecond}
)

var scenarios = map[string]scenarioShape{
	"steady": {
		description: "one vLLM engine over the whole node (Llama-3.1-70B, TP over every GPU), Poisson chat traffic",
		episode:     10 * time.Minute, drain: 60 * time.Second,
		engines: []engineShape{{tp: 8, llm: "llama-3.1-70b", family: FamilyVLLM, sched: defaultSched, host: vllmHost,
			load: Traffic{Rate: 8, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}}},
	},
	"bursty": {
		description: "the steady engine under on/off bursts: 20 req/s for ~10 s, 1 req/s for ~20 s",
		episode:     10 * time.Minute, drain: 60 * time.Second,
		engines: []engineShape{{tp: 8, llm: "llama-3.1-70b", family: FamilyVLLM, sched: defaultSched, host: vllmHost,
			load: Traffic{Rate: 20, Burst: Burst{OffRate: 1, MeanOn: 10 * time.Second, MeanOff: 20 * time.Second},
				Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}}},
	},
	"long_context": {
		description: "Llama-3.1-70B in FP8, one engine per GPU, with 4k-32k-token prompts: the KV cache fills and requests are preempted",
		episode:     10 * time.Minute, drain: 150 * time.Second,
		engines: []engineShape{{tp: 1, llm: "llama-3.1-70b-fp8", family: FamilyVLLM, sched: defaultSched, host: vllmHost,
			load: Traffic{Rate: 0.13, Prompt: Lengths{Median: 16000, Sigma: 0.4, Min: 4000, Max: 32000},
				Output: Lengths{Median: 600, Sigma: 0.6, Min: 16, Max: 2048}, MaxTokens: 2048}}},
	},
	"power_capped": {
		description: "the steady engine with long prompts under a power limit of 60% of the board's: prefill holds the clocks down",
		episode:     10 * time.Minute, drain: 60 * time.Second, powerFraction: 0.6,
		engines: []engineShape{{tp: 8, llm: "llama-3.1-70b", family: FamilyVLLM, sched: defaultSched, host: vllmHost,
			load: Traffic{Rate: 4, Prompt: Lengths{Median: 3000, Sigma: 0.6, Min: 256, Max: 16000}, Output: chatOutput, MaxTokens: 2048}}},
	},
	"host_starved": {
		description: "one Llama-3.1-8B engine per GPU whose host work per step (12 ms + 0.1 ms per request) outlasts the GPU's",
		episode:     10 * time.Minute, drain: 60 * time.Second,
		engines: []engineShape{{tp: 1, llm: "llama-3.1-8b", family: FamilyVLLM, sched: defaultSched,
			host: [2]time.Duration{12 * time.Millisecond, 100 * time.Microsecond},
			load: Traffic{Rate: 3, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}}},
	},
	"tensor_parallel": {
		description: "Llama-3.1-70B on TP4 engines (vLLM and SGLang), 8k-token prefill chunks: heavy NVLink all-reduce",
		episode:     10 * time.Minute, drain: 60 * time.Second,
		engines: []engineShape{
			{tp: 4, llm: "llama-3.1-70b", family: FamilyVLLM, sched: SchedulerConfig{MaxNumSeqs: 256, MaxBatchedTokens: 8192, BlockSize: 16, MemoryFraction: 0.9},
				host: vllmHost, load: Traffic{Rate: 5, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}},
			{tp: 4, llm: "llama-3.1-70b", family: FamilySGLang, sched: SchedulerConfig{MaxNumSeqs: 256, MaxBatchedTokens: 8192, BlockSize: 1, MemoryFraction: 0.88},
				host: [2]time.Duration{1 * time.Millisecond, 10 * time.Microsecond}, load: Traffic{Rate: 5, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}},
		},
	},
	"mixed": {
		description: "several engines and models on one node: vLLM (70B, TP4), SGLang (32B, TP2), TGI and TensorRT-LLM (8B, one GPU each); GenAI client spans around the vLLM requests",
		episode:     10 * time.Minute, drain: 60 * time.Second,
		engines: []engineShape{
			{tp: 4, llm: "llama-3.1-70b", family: FamilyVLLM, client: true, sched: defaultSched, host: vllmHost,
				load: Traffic{Rate: 4, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}},
			{tp: 2, llm: "qwen2.5-32b", family: FamilySGLang, sched: SchedulerConfig{MaxNumSeqs: 256, MaxBatchedTokens: 4096, BlockSize: 1, MemoryFraction: 0.88},
				host: [2]time.Duration{1 * time.Millisecond, 10 * time.Microsecond}, load: Traffic{Rate: 4, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}},
			{tp: 1, llm: "llama-3.1-8b", family: FamilyTGI, sched: SchedulerConfig{MaxNumSeqs: 128, MaxBatchedTokens: 4096, BlockSize: 16, MemoryFraction: 0.9},
				host: [2]time.Duration{2 * time.Millisecond, 20 * time.Microsecond}, load: Traffic{Rate: 5, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}},
			{tp: 1, llm: "llama-3.1-8b", family: FamilyTRTLLM, sched: SchedulerConfig{MaxNumSeqs: 256, MaxBatchedTokens: 8192, BlockSize: 32, MemoryFraction: 0.9},
				host: [2]time.Duration{500 * time.Microsecond, 5 * time.Microsecond}, load: Traffic{Rate: 5, Prompt: chatPrompt, Output: chatOutput, MaxTokens: 2048}},
		},
	},
}

// DefaultScenario is what the simulated backend runs unless told otherwise.
const DefaultScenario = "steady"

// Scenarios lists the scenario names, sorted.
func Scenarios() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupScenario lays scenario name out on a node of gpus GPUs: its engine
// shapes are placed in order on consecutive GPUs, repeated until the GPUs
// run out, each tensor-parallel group no larger than what is left. An
// engine that owns the whole node is matched by host, the others by
// attribute. A model that does not fit its group's memory is an error.
func LookupScenario(name string, gpus int, hw Hardware) (Scenario, error) {
	shape, ok := scenarios[strings.ToLower(name)]
	if !ok {
		return Scenario{}, fmt.Errorf("unknown scenario %q: use one of %s", name, strings.Join(Scenarios(), ", "))
	}
	if gpus < 1 {
		return Scenario{}, fmt.Errorf("a scenario needs at least one GPU, not %d", gpus)
	}
	sc := Scenario{Name: strings.ToLower(name), Description: shape.description, Episode: shape.episode, Drain: shape.drain}
	if shape.powerFraction > 0 {
		sc.PowerLimitW = hw.PowerLimitW * shape.powerFraction
	}
	next := 0
	for i := 0; next < gpus; i++ {
		es := shape.engines[i%len(shape.engines)]
		tp := min(es.tp, gpus-next)
		llm, err := LookupLLM(es.llm)
		if err != nil {
			return Scenario{}, err
		}
		e := Engine{
			Name: fmt.Sprintf("%s-%d", es.family, len(sc.Engines)), LLM: llm, Family: es.family, Match: MatchAttribute,
			ClientSpans: es.client, Scheduler: es.sched, HostStep: es.host[0], HostPerSeq: es.host[1], Traffic: es.load,
		}
		for g := next; g < next+tp; g++ {
			e.GPUs = append(e.GPUs, g)
		}
		if kvBlocks(e, hw) < 1 {
			return Scenario{}, fmt.Errorf("scenario %s: %s does not fit on %d %s GPU(s): give the simulated server more GPUs", sc.Name, llm.Name, tp, hw.Name)
		}
		next += tp
		sc.Engines = append(sc.Engines, e)
	}
	if len(sc.Engines) == 1 {
		// It owns the node: matched by host, and named as its server
		// names itself (OTEL_SERVICE_NAME=vllm).
		sc.Engines[0].Match = MatchHost
		sc.Engines[0].Name = sc.Engines[0].Family
	}
	return sc, nil
}
