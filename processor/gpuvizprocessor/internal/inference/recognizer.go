// Package inference turns OTLP spans into inference requests.
//
// A Recognizer looks at one span (and its resource) and says whether it is an
// inference request of a known family — vLLM, SGLang, TensorRT-LLM
// (trtllm-serve), HuggingFace TGI, NVIDIA Triton, the OpenTelemetry GenAI
// conventions, or a user-configured rule — and if so, when the request ran
// and which phases (queue, prefill, decode, inference) it went through, with
// token counts, model and GPU hints. It knows nothing of GPU timelines. It
// never modifies the span and never panics, whatever the input.
//
// One request may be seen in several spans; only one of them counts as the
// request. The others are recognised but marked (Aggregate: batch steps and
// compute spans whose work the request's span accounts for; Client: the
// application's view of a request the server's span accounts for) or not
// recognised at all (SGLang's per-process and per-stage spans under its
// request span).
//
// Spans that are clearly of a family but cannot be trusted — timestamps
// missing or reversed, latencies of the wrong type or sign, phases that do
// not fit in the span — are Malformed, with a short stable reason (see
// Reasons).
package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Phase names.
const (
	PhaseQueue     = "queue"
	PhasePrefill   = "prefill"
	PhaseDecode    = "decode"
	PhaseInference = "inference" // prefill and decode together, when they cannot be told apart
)

// Family names (rules are "rule:" + the rule's name).
const (
	FamilyVLLM   = "vllm"
	FamilyGenAI  = "genai"
	FamilyTGI    = "tgi"
	FamilyTriton = "triton"
	FamilySGLang = "sglang"
	FamilyTRTLLM = "trtllm"
	familyRule   = "rule:"
)

// MaxPhases is the most phases a Request has.
const MaxPhases = 4

// Phase is one stage of a request, in wall-clock time.
type Phase struct {
	Name  string // "queue", "prefill", "decode", "inference" (when prefill/decode cannot be told apart)
	Start time.Time
	End   time.Time
}

// Request is what a recognised span says about one inference request.
type Request struct {
	Family       string    // "vllm", "sglang", "trtllm", "genai", "tgi", "triton", "rule:<rule name>"
	Start, End   time.Time // the request's window (the span's, unless the family says otherwise)
	Phases       []Phase   // in time order, non-overlapping, inside [Start, End], none empty, names distinct; may be empty
	InputTokens  int64     // -1 unknown
	OutputTokens int64     // -1 unknown
	Model        string    // gen_ai.request.model / gen_ai.response.model / triton.model_name; "" unknown
	GPUIDs       []string  // GPU UUIDs named by span or resource attributes (Config.GPUIDAttributes)
	GPUIndexes   []int     // GPU indexes named by attributes (Config.GPUIndexAttributes, Config.VisibleDevicesAttributes)
	PID          int64     // resource process.pid, 0 unknown
	Host         string    // resource host.name, "" unknown
	// The Kubernetes pod the server runs in, from the resource
	// (k8sattributes sets them): its PIDs and GPU indexes are its own.
	PodUID, PodNamespace, PodName string
	// SlurmJobID is the Slurm job the server runs in (slurm.job.id, on the
	// span or, where the span does not say, its resource): the job's GPUs
	// are the request's candidates, and its GPU indexes may be the job's
	// own (Slurm's device cgroup renumbers them).
	SlurmJobID string
	// Aggregate marks a span whose GPU work another recognised span already
	// accounts for as a request: TGI's batch-level prefill/decode steps and
	// per-step infer spans, Triton's compute span under its model span and
	// the model span of a model an ensemble or BLS model calls. It
	// is worth enriching, but counting it as a request would count the
	// request twice (in energy shares and per-request metrics).
	Aggregate bool
	// Client marks a client's view of a request another span (the
	// server's) accounts for: enriched with the GPU statistics of its
	// window, but it takes no energy share and is not counted as a request.
	// GenAI spans of kind CLIENT (the application's call, whose child is the
	// server's span) are.
	Client bool
	// Enriched marks a span that already carries attributes under
	// OwnAttributePrefix (a gpuviz collector upstream enriched it): the
	// processor replaces them rather than appending.
	Enriched bool
}

// OwnAttributePrefix starts every attribute the gpuviz processor writes on
// a span.
const OwnAttributePrefix = "gpuviz."

// Verdict is Recognize's classification of a span.
type Verdict uint8

// Verdicts.
const (
	NotInference Verdict = iota // not a span of any known family: leave it alone
	Recognized                  // an inference request; the Request is valid
	Malformed                   // of a known family, but unusable; the reason says why
)

func (v Verdict) String() string {
	switch v {
	case NotInference:
		return "not_inference"
	case Recognized:
		return "recognized"
	case Malformed:
		return "malformed"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Malformed reasons: short, stable, snake_case, fit for a metric attribute.
const (
	// ReasonBadTimestamp: the span's start or end is zero (unset) or beyond
	// what a time can hold (after the year 2262).
	ReasonBadTimestamp = "bad_timestamp"
	// ReasonEndBeforeStart: the span ends before it starts.
	ReasonEndBeforeStart = "end_before_start"
	// ReasonFutureEnd: the span ends later than now + Config.MaxFuture.
	ReasonFutureEnd = "future_end"
	// ReasonAbsurdDuration: the span is longer than Config.MaxDuration.
	ReasonAbsurdDuration = "absurd_duration"
	// ReasonNegativeLatency: a phase duration attribute is negative.
	ReasonNegativeLatency = "negative_latency"
	// ReasonBadLatency: a phase duration attribute has the wrong type (a
	// string where seconds are expected, a bool, ...) or is NaN or infinite.
	ReasonBadLatency = "bad_latency"
	// ReasonBadDurationString: a duration string is not Rust's Debug format
	// (TGI's timing fields, rules' string durations), or a TGI timing field
	// is not a string.
	ReasonBadDurationString = "bad_duration_string"
	// ReasonBadTokenCount: a token count is not a non-negative integer.
	ReasonBadTokenCount = "bad_token_count"
	// ReasonPhasesExceedSpan: a phase starts before the span or ends more
	// than 1 ms (clock rounding) after it.
	ReasonPhasesExceedSpan = "phases_exceed_span"
	// ReasonEventsOutOfOrder: Triton's phase events are missing their pair,
	// repeated, or out of order.
	ReasonEventsOutOfOrder = "events_out_of_order"
)

var reasons = []string{
	ReasonBadTimestamp, ReasonEndBeforeStart, ReasonFutureEnd, ReasonAbsurdDuration,
	ReasonNegativeLatency, ReasonBadLatency, ReasonBadDurationString, ReasonBadTokenCount,
	ReasonPhasesExceedSpan, ReasonEventsOutOfOrder,
}

// Reasons returns every reason Recognize can give for Malformed.
func Reasons() []string { return append([]string(nil), reasons...) }

// Config configures a Recognizer.
type Config struct {
	GPUIDAttributes          []string // default: hw.id, gpu.id, gpu.uuid, nvidia.gpu.uuid
	GPUIndexAttributes       []string // default: gpu.index, nvidia.gpu.index
	VisibleDevicesAttributes []string // default: cuda_visible_devices, CUDA_VISIBLE_DEVICES, process.env.CUDA_VISIBLE_DEVICES
	Rules                    []Rule
	MaxFuture                time.Duration // a span ending later than now+MaxFuture is malformed (default 1m)
	MaxDuration              time.Duration // a request longer than this is malformed/absurd (default 1h)
}

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		GPUIDAttributes:          []string{"hw.id", "gpu.id", "gpu.uuid", "nvidia.gpu.uuid"},
		GPUIndexAttributes:       []string{"gpu.index", "nvidia.gpu.index"},
		VisibleDevicesAttributes: []string{"cuda_visible_devices", "CUDA_VISIBLE_DEVICES", "process.env.CUDA_VISIBLE_DEVICES"},
		MaxFuture:                time.Minute,
		MaxDuration:              time.Hour,
	}
}

// Validate reports every problem of the configuration, naming the field as
// the processor's configuration spells it (match.gpu_id_attributes,
// max_request_duration, rules[i]...).
func (c Config) Validate() error {
	var errs []error
	checkKeys := func(field string, keys []string) {
		for i, k := range keys {
			if k == "" {
				errs = append(errs, fmt.Errorf("%s[%d]: must not be empty", field, i))
			}
		}
	}
	checkKeys("match.gpu_id_attributes", c.GPUIDAttributes)
	checkKeys("match.gpu_index_attributes", c.GPUIndexAttributes)
	checkKeys("match.visible_devices_attributes", c.VisibleDevicesAttributes)
	if c.MaxFuture < 0 {
		errs = append(errs, fmt.Errorf("max_future: must not be negative, got %v", c.MaxFuture))
	}
	if c.MaxDuration <= 0 {
		errs = append(errs, fmt.Errorf("max_request_duration: must be positive, got %v", c.MaxDuration))
	}
	seen := make(map[string]int, len(c.Rules))
	for i, r := range c.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		if err := r.validate(field); err != nil {
			errs = append(errs, err)
		}
		if r.Name == "" {
			continue
		}
		if j, dup := seen[r.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name: %q is also the name of rules[%d]; names must be unique", field, r.Name, j))
			continue
		}
		seen[r.Name] = i
	}
	return errors.Join(errs...)
}

// Recognizer classifies spans. It is safe for concurrent use.
type Recognizer struct {
	rules       []compiledRule
	hintKeys    []hintKey
	hintLens    uint64 // bit n set: some hint key is n bytes long (n < 64)
	hintLong    bool   // some hint key is 64 bytes or longer
	maxFuture   time.Duration
	maxDuration int64 // ns
}

// NewRecognizer validates cfg and builds a Recognizer from it.
func NewRecognizer(cfg Config) (*Recognizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Recognizer{maxFuture: cfg.MaxFuture, maxDuration: int64(cfg.MaxDuration)}
	for _, rule := range cfg.Rules {
		r.rules = append(r.rules, compiledRule{Rule: rule, family: familyRule + rule.Name})
	}
	for _, k := range cfg.GPUIDAttributes {
		r.hintKeys = append(r.hintKeys, hintKey{key: k, kind: hintID})
	}
	for _, k := range cfg.GPUIndexAttributes {
		r.hintKeys = append(r.hintKeys, hintKey{key: k, kind: hintIndex})
	}
	for _, k := range cfg.VisibleDevicesAttributes {
		r.hintKeys = append(r.hintKeys, hintKey{key: k, kind: hintVisible})
	}
	for _, hk := range r.hintKeys {
		if n := len(hk.key); n < 64 {
			r.hintLens |= 1 << n
		} else {
			r.hintLong = true
		}
	}
	return r, nil
}

// Recognize classifies one span. now is the processor's clock (for the future
// check; a zero now skips it). reason is one of Reasons() when v is
// Malformed, "" otherwise. The span and resource are only read.
//
// Families are tried in order — rules, vLLM and TensorRT-LLM (both name
// their span llm_request), SGLang, Triton, TGI, GenAI — and the first whose
// span this is decides.
func (r *Recognizer) Recognize(span ptrace.Span, resource pcommon.Resource, now time.Time) (req Request, v Verdict, reason string) {
	name := span.Name()
	d := draft{}
	if i := r.matchRule(name); i >= 0 {
		rule := &r.rules[i]
		req.Family = rule.family
		if reason = r.window(span, &d, now); reason == "" {
			reason = rule.recognize(span, resource, &req, &d)
		}
	} else if name == vllmSpanName {
		trt := isTRTLLM(span.Attributes())
		req.Family = FamilyVLLM
		if trt {
			req.Family = FamilyTRTLLM
		}
		if reason = r.window(span, &d, now); reason == "" {
			if trt {
				reason = recognizeTRTLLM(span, &req, &d)
			} else {
				reason = recognizeVLLM(span, &req, &d)
			}
		}
	} else if mine, why := r.recognizeSGLang(span, resource, &req, &d, now); mine {
		req.Family, reason = FamilySGLang, why
	} else if mine, why := r.recognizeTriton(span, &req, &d, now); mine {
		req.Family, reason = FamilyTriton, why
		req.Aggregate = req.Aggregate || name == tritonComputeSpanName
	} else if mine, why := r.recognizeTGI(span, resource, &d, now); mine {
		req.Family, reason = FamilyTGI, why
		req.Aggregate = name == "prefill" || name == "decode" || name == "infer"
	} else if mine, why := r.recognizeGenAI(span, &req, &d, now); mine {
		req.Family, reason = FamilyGenAI, why
	} else {
		return Request{}, NotInference, ""
	}
	if reason == "" {
		reason = d.finish(&req)
	}
	if reason != "" {
		return Request{}, Malformed, reason
	}
	r.hints(&req, span.Attributes(), resource.Attributes())
	return req, Recognized, ""
}

// tolerance is how far phases may run past the span's end (clock rounding).
const tolerance = int64(time.Millisecond)

const maxPhases = MaxPhases

type phaseNS struct {
	name       string
	start, end int64 // ns since the Unix epoch
}

// draft is a request's window and phases in integer nanoseconds, built by a
// family and checked and converted by finish.
type draft struct {
	start, end int64
	endTol     int64 // end + tolerance, saturated
	cursor     int64 // where the next sequential phase starts
	n          int
	phases     [maxPhases]phaseNS
	// tokens as found; -1 unknown
	in, out int64
}

// window reads the span's start and end into d and applies the checks every
// family shares. It returns a reason when they fail.
func (r *Recognizer) window(span ptrace.Span, d *draft, now time.Time) string {
	st, et := uint64(span.StartTimestamp()), uint64(span.EndTimestamp())
	if st == 0 || et == 0 || st > math.MaxInt64 || et > math.MaxInt64 {
		return ReasonBadTimestamp
	}
	d.start, d.end, d.cursor = int64(st), int64(et), int64(st)
	d.endTol = d.end + tolerance
	if d.end > math.MaxInt64-tolerance {
		d.endTol = math.MaxInt64
	}
	d.in, d.out = -1, -1
	if d.end < d.start {
		return ReasonEndBeforeStart
	}
	if !now.IsZero() && time.Unix(0, d.end).After(now.Add(r.maxFuture)) {
		return ReasonFutureEnd
	}
	if d.end-d.start > r.maxDuration {
		return ReasonAbsurdDuration
	}
	return ""
}

// at is the time off nanoseconds after the window's start (before it when
// off is negative), saturated at the largest time: off comes from a latency
// attribute and may be anything.
func (d *draft) at(off int64) int64 {
	if off > math.MaxInt64-d.start {
		return math.MaxInt64
	}
	return d.start + off
}

// next appends a phase of length dur starting where the previous one ended.
func (d *draft) next(name string, dur int64) string {
	if dur > d.endTol-d.cursor {
		return ReasonPhasesExceedSpan
	}
	return d.add(name, d.cursor, d.cursor+dur)
}

// add appends a phase at absolute times.
func (d *draft) add(name string, start, end int64) string {
	if d.n == maxPhases {
		return ReasonEventsOutOfOrder
	}
	d.phases[d.n] = phaseNS{name: name, start: start, end: end}
	d.n++
	d.cursor = end
	return ""
}

// finish checks the phases against the window and fills req: phases must be
// ordered and inside [start, end+1ms]; ends past the span's end are clamped
// to it and phases left empty are dropped.
func (d *draft) finish(req *Request) string {
	prev := d.start
	kept := 0
	for i := 0; i < d.n; i++ {
		p := d.phases[i]
		if p.start < d.start || p.end < d.start || p.start > d.endTol || p.end > d.endTol {
			return ReasonPhasesExceedSpan
		}
		if p.end < p.start {
			return ReasonEventsOutOfOrder
		}
		p.end = min(p.end, d.end)
		p.start = min(p.start, d.end)
		if p.start < prev {
			return ReasonEventsOutOfOrder
		}
		prev = p.end
		if p.end > p.start {
			d.phases[kept] = p
			kept++
		}
	}
	req.Start = time.Unix(0, d.start).UTC()
	req.End = time.Unix(0, d.end).UTC()
	req.InputTokens, req.OutputTokens = d.in, d.out
	if kept > 0 {
		req.Phases = make([]Phase, kept)
		for i := 0; i < kept; i++ {
			p := d.phases[i]
			req.Phases[i] = Phase{Name: p.name, Start: time.Unix(0, p.start).UTC(), End: time.Unix(0, p.end).UTC()}
		}
	}
	return ""
}
