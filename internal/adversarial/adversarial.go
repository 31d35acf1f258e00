// Package adversarial generates adversarial inference spans for the gpuviz
// processor: every edge case each recogniser of
// processor/gpuvizprocessor/internal/inference reads (vLLM, TensorRT-LLM,
// SGLang, TGI, Triton, GenAI), the checks they all share (timestamps unset,
// beyond int64, reversed, in the future, absurd durations), and spans no
// recogniser should take (huge names, invalid UTF-8, NaN and infinite values,
// deep attributes, many events and links), with well-formed spans of each
// family mixed in so the processor's normal path runs too.
//
// The table (Cases) has one row per edge case with the outcome the processor
// must give it. A Generator cycles the table, seeded and deterministic, with
// fresh trace and span IDs; each span carries AttrCase and AttrSeq, so what
// comes out of a collector can be checked against what went in.
package adversarial // import "github.com/gpuviz/gpuviz/internal/adversarial"

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Attributes every generated span carries: its case's name and its
// sequence number (unique per Generator). No recogniser reads them.
const (
	AttrCase = "adversarial.case"
	AttrSeq  = "adversarial.seq"
)

// Outcome is what the gpuviz processor must do with a case's spans.
type Outcome uint8

// Outcomes.
const (
	// Enriched: recognised; enriched with GPU attributes and Phases phase
	// spans when its GPUs have samples (else passed through, counted
	// no_gpu, no_samples or overflow).
	Enriched Outcome = iota + 1
	// Malformed: of a family but unusable: passed through untouched and
	// counted unenriched with reason "malformed_" + Reason.
	Malformed
	// NotInference: no family's: passed through untouched, not counted.
	NotInference
)

func (o Outcome) String() string {
	switch o {
	case Enriched:
		return "enriched"
	case Malformed:
		return "malformed"
	case NotInference:
		return "not_inference"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Case is one edge case.
type Case struct {
	Name    string // family/edge, unique
	Family  string // the recogniser it aims at ("" for none)
	Outcome Outcome
	Reason  string // the recogniser's reason, for Malformed
	// Unenriched, for an Enriched case whose window holds no GPU sample
	// (far in the past, or empty), is the reason the processor passes its
	// spans through untouched, unenriched and without phase spans.
	Unenriched string
	// Phases is how many phase spans the processor adds under an enriched
	// span of this case (its request's non-empty phases).
	Phases int
	// PerCycle is how often the case comes in one cycle of the table: the
	// cases with large payloads come less often than the others.
	PerCycle int
	res      resource
	build    func(sp ptrace.Span, c clock)
}

// clock is what a span is timed against: now, and the end of a
// well-formed span (a little before now, so its GPU samples are in).
type clock struct{ now, end int64 }

const sec = int64(time.Second)

// HugeBytes is the size of the cases' huge values (names, attribute
// values): far past what any server sends, well inside OTLP's default 4 MiB
// message with a batch of them.
const HugeBytes = 16 << 10

// ManyEvents is how many events (and a quarter as many links) the "many
// events" cases carry.
const ManyEvents = 512

// resource is the resource a case's spans come under.
type resource uint8

const (
	resPlain    resource = iota // service.name only
	resSGLang                   // service.name sglang: marks SGLang roots
	resTGI                      // service.name text-generation-inference: marks TGI backend spans
	resMistyped                 // the attributes the recognisers read on a resource, of the wrong types
	resHuge                     // a huge attribute value
	resEmpty                    // no attributes at all
	numResources
)

func (r resource) fill(m pcommon.Map) {
	switch r {
	case resPlain:
		m.PutStr("service.name", "adversarial")
	case resSGLang:
		m.PutStr("service.name", "sglang")
	case resTGI:
		m.PutStr("service.name", "text-generation-inference")
	case resMistyped:
		m.PutInt("service.name", 42)
		m.PutBool("host.name", true)
		m.PutStr("process.pid", "1234")
		m.PutDouble("gpu.index", nan)
		m.PutEmptyMap("k8s.pod.uid").PutStr("x", "y")
		m.PutEmptyBytes("CUDA_VISIBLE_DEVICES").FromRaw([]byte{0xff, 0})
	case resHuge:
		m.PutStr("service.name", "adversarial")
		m.PutStr("huge.resource.attribute", huge('r'))
	case resEmpty:
	}
}

// Cases returns the table, in a fixed order.
func Cases() []Case { return append([]Case(nil), cases...) }

// Generator makes batches of the table's spans.
type Generator struct {
	seed  uint64
	seq   uint64
	cycle []int // indexes into cases, each PerCycle times, shuffled by the seed
}

// NewGenerator returns a generator whose IDs and case order follow seed.
func NewGenerator(seed uint64) *Generator {
	var cycle []int
	for i, c := range cases {
		for range c.PerCycle {
			cycle = append(cycle, i)
		}
	}
	rand.New(rand.NewPCG(seed, 0)).Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
	return &Generator{seed: seed, cycle: cycle}
}

// CycleLen is the number of spans in one cycle of the table.
func (g *Generator) CycleLen() int { return len(g.cycle) }

// Batch returns the next n spans of the cycle, timed against now (spans
// meant to be well-formed end 2 s before it), under one ResourceSpans per
// resource kind.
func (g *Generator) Batch(n int, now time.Time) ptrace.Traces {
	td := ptrace.NewTraces()
	var spans [numResources]ptrace.SpanSlice
	var have [numResources]bool
	c := clock{now: now.UnixNano(), end: now.UnixNano() - 2*sec}
	for range n {
		i := g.cycle[g.seq%uint64(len(g.cycle))]
		cs := &cases[i]
		if !have[cs.res] {
			rs := td.ResourceSpans().AppendEmpty()
			cs.res.fill(rs.Resource().Attributes())
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName("adversarial")
			spans[cs.res], have[cs.res] = ss.Spans(), true
		}
		sp := spans[cs.res].AppendEmpty()
		g.ids(sp)
		cs.build(sp, c)
		sp.Attributes().PutStr(AttrCase, cs.Name)
		sp.Attributes().PutInt(AttrSeq, int64(g.seq))
		g.seq++
	}
	return td
}

// ids gives sp fresh trace, span and parent IDs drawn from the seed and
// the span's sequence number.
func (g *Generator) ids(sp ptrace.Span) {
	r := rand.NewPCG(g.seed, g.seq)
	var tid pcommon.TraceID
	binary.BigEndian.PutUint64(tid[:8], r.Uint64())
	binary.BigEndian.PutUint64(tid[8:], r.Uint64()|1)
	var sid, pid pcommon.SpanID
	binary.BigEndian.PutUint64(sid[:], r.Uint64()|1)
	binary.BigEndian.PutUint64(pid[:], r.Uint64()|1)
	sp.SetTraceID(tid)
	sp.SetSpanID(sid)
	sp.SetParentSpanID(pid)
}

// CaseOf returns the case and sequence number of a generated span.
func CaseOf(sp ptrace.Span) (Case, int64, bool) {
	name, ok := sp.Attributes().Get(AttrCase)
	if !ok {
		return Case{}, 0, false
	}
	seq, ok := sp.Attributes().Get(AttrSeq)
	if !ok || seq.Type() != pcommon.ValueTypeInt {
		return Case{}, 0, false
	}
	i, ok := caseIndex[name.Str()]
	if !ok {
		return Case{}, 0, false
	}
	return cases[i], seq.Int(), true
}

var caseIndex = func() map[string]int {
	m := make(map[string]int, len(cases))
	for i, c := range cases {
		if _, dup := m[c.Name]; dup {
			panic("adversarial: two cases named " + c.Name)
		}
		if c.PerCycle < 1 {
			panic("adversarial: case " + c.Name + " never comes")
		}
		m[c.Name] = i
	}
	return m
}()
