package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"math"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// secondsNS converts a latency in seconds (double or int) to nanoseconds.
// Values too large for int64 nanoseconds come back as math.MaxInt64, which no
// span can hold, so they fail the phase checks.
func secondsNS(v pcommon.Value) (int64, string) {
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		s := v.Double()
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return 0, ReasonBadLatency
		}
		if s < 0 {
			return 0, ReasonNegativeLatency
		}
		ns := math.Round(s * 1e9)
		if ns >= math.MaxInt64 {
			return math.MaxInt64, ""
		}
		return int64(ns), ""
	case pcommon.ValueTypeInt:
		s := v.Int()
		if s < 0 {
			return 0, ReasonNegativeLatency
		}
		if s > math.MaxInt64/int64(time.Second) {
			return math.MaxInt64, ""
		}
		return s * int64(time.Second), ""
	}
	return 0, ReasonBadLatency
}

// tokenCount reads a token count: a non-negative int.
func tokenCount(v pcommon.Value) (int64, string) {
	if v.Type() != pcommon.ValueTypeInt || v.Int() < 0 {
		return 0, ReasonBadTokenCount
	}
	return v.Int(), ""
}

// str returns v's string, or "" when v is not a string.
func str(v pcommon.Value) string {
	if v.Type() != pcommon.ValueTypeStr {
		return ""
	}
	return v.Str()
}

// lookup finds key on the span's attributes first, then the resource's.
func lookup(span, resource pcommon.Map, key string) (pcommon.Value, bool) {
	if v, ok := span.Get(key); ok {
		return v, true
	}
	return resource.Get(key)
}

type hintKind uint8

const (
	hintID      hintKind = iota // a GPU UUID (or an index, when the value is a number)
	hintIndex                   // a GPU index (or a UUID, when the value starts with GPU-/MIG-)
	hintVisible                 // a CUDA_VISIBLE_DEVICES list
)

type hintKey struct {
	key  string
	kind hintKind
}

// Bounds on GPU hints, against absurd attribute values.
const (
	maxHints    = 64
	maxGPUIndex = 1 << 16
)

// hints fills the request's GPU hints, PID, host and Enriched. GPU hints come from the
// span's attributes; only when those name no GPU are the resource's used
// (what a span says is more specific than what its process says). Each map
// is read once; keys are screened by length before being compared.
// Placement returns what a server's resource says of where it runs (host,
// process, pod, Slurm job, GPU hints), as a span of that resource would
// carry it, with a window of the instant at: for matching the server's own
// metrics to its GPUs.
func (r *Recognizer) Placement(resource pcommon.Resource, at time.Time) Request {
	req := Request{Start: at, End: at}
	r.hints(&req, pcommon.NewMap(), resource.Attributes())
	return req
}

func (r *Recognizer) hints(req *Request, span, resource pcommon.Map) {
	for k, v := range span.All() {
		req.Enriched = req.Enriched || strings.HasPrefix(k, OwnAttributePrefix)
		if k == SlurmJobIDAttribute {
			req.SlurmJobID = slurmJobID(v)
			continue
		}
		if kind, ok := r.hintKind(k); ok {
			addHint(req, v, kind)
		}
	}
	fromResource := len(req.GPUIDs) == 0 && len(req.GPUIndexes) == 0
	for k, v := range resource.All() {
		switch k {
		case "process.pid":
			if v.Type() == pcommon.ValueTypeInt && v.Int() > 0 {
				req.PID = v.Int()
			}
			continue
		case "host.name":
			req.Host = str(v)
			continue
		case "k8s.pod.uid":
			req.PodUID = str(v)
			continue
		case "k8s.pod.name":
			req.PodName = str(v)
			continue
		case "k8s.namespace.name":
			req.PodNamespace = str(v)
			continue
		case SlurmJobIDAttribute:
			if req.SlurmJobID == "" { // the span's own wins
				req.SlurmJobID = slurmJobID(v)
			}
			continue
		}
		if !fromResource {
			continue
		}
		if kind, ok := r.hintKind(k); ok {
			addHint(req, v, kind)
		}
	}
}

// SlurmJobIDAttribute names the Slurm job a span's request ran in, on the
// span or its resource (OTEL_RESOURCE_ATTRIBUTES=slurm.job.id=$SLURM_JOB_ID
// in the job script); the gpuviz receiver's series carry the same key.
const SlurmJobIDAttribute = "slurm.job.id"

// maxSlurmJobID bounds a Slurm job id (Slurm's are 32-bit numbers; the
// receiver takes ids of up to 64 bytes from job mapping files).
const maxSlurmJobID = 64

// slurmJobID reads a Slurm job id: a string of 1 to 64 bytes, or a
// non-negative int; "" otherwise.
func slurmJobID(v pcommon.Value) string {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		if s := v.Str(); len(s) <= maxSlurmJobID {
			return s
		}
	case pcommon.ValueTypeInt:
		if v.Int() >= 0 {
			return strconv.FormatInt(v.Int(), 10)
		}
	}
	return ""
}

// hintKind says whether key is a configured GPU hint key, and of which kind
// (the first configured wins).
func (r *Recognizer) hintKind(key string) (hintKind, bool) {
	if n := len(key); n < 64 {
		if r.hintLens&(1<<n) == 0 {
			return 0, false
		}
	} else if !r.hintLong {
		return 0, false
	}
	for _, hk := range r.hintKeys {
		if hk.key == key {
			return hk.kind, true
		}
	}
	return 0, false
}

// addHint adds what one attribute value says: a string (a comma-separated
// list is split, as in CUDA_VISIBLE_DEVICES="0,1,3"), an int, or a slice of
// strings and ints. Entries starting with GPU- or MIG- are UUIDs, unsigned
// decimal numbers are indexes; other strings are UUIDs for GPU ID attributes
// and ignored elsewhere, as are values of other types.
func addHint(req *Request, v pcommon.Value, kind hintKind) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		addHintString(req, v.Str(), kind)
	case pcommon.ValueTypeInt:
		addIndex(req, v.Int())
	case pcommon.ValueTypeSlice:
		s := v.Slice()
		for i := 0; i < s.Len(); i++ {
			switch e := s.At(i); e.Type() {
			case pcommon.ValueTypeStr:
				addHintString(req, e.Str(), kind)
			case pcommon.ValueTypeInt:
				addIndex(req, e.Int())
			}
		}
	}
}

func addHintString(req *Request, s string, kind hintKind) {
	for s != "" {
		var entry string
		entry, s, _ = strings.Cut(s, ",")
		entry = strings.TrimSpace(entry)
		switch {
		case entry == "":
		case strings.HasPrefix(entry, "GPU-") || strings.HasPrefix(entry, "MIG-"):
			addID(req, entry)
		case isUnsigned(entry):
			if len(entry) <= 6 {
				var n int64
				for i := 0; i < len(entry); i++ {
					n = n*10 + int64(entry[i]-'0')
				}
				addIndex(req, n)
			}
		case kind == hintID:
			addID(req, entry)
		}
	}
}

func isUnsigned(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func addID(req *Request, id string) {
	if len(req.GPUIDs) >= maxHints {
		return
	}
	for _, have := range req.GPUIDs {
		if have == id {
			return
		}
	}
	if req.GPUIDs == nil {
		req.GPUIDs = make([]string, 0, 2)
	}
	req.GPUIDs = append(req.GPUIDs, id)
}

func addIndex(req *Request, n int64) {
	if n < 0 || n >= maxGPUIndex || len(req.GPUIndexes) >= maxHints {
		return
	}
	for _, have := range req.GPUIndexes {
		if have == int(n) {
			return
		}
	}
	if req.GPUIndexes == nil {
		req.GPUIndexes = make([]int, 0, 8)
	}
	req.GPUIndexes = append(req.GPUIndexes, int(n))
}
