package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Values the per-request metrics count requests under when their own
// cannot be: none given, or too many on the host.
const (
	unknownValue = "unknown"
	otherValue   = "other"
)

// maxValueBytes cuts a model or tenant name: the bound on the per-request
// metrics' memory is in bytes, and a label longer than this is a mistake.
const maxValueBytes = 256

// boundedValues bounds the values of one attribute of the per-request
// metrics (gen_ai.request.model, gpuviz.tenant) per host: the first max
// values seen on a host keep their name, later ones are counted as "other"
// until a named one has seen no request for the idle expiry (then its slot
// is free again). A missing value is "unknown"; "unknown" and "other" take
// no slot, so a host holds at most max + 2 values. The histograms and the
// accounting counters share the model's, so a request is "other" in both
// or neither.
type boundedValues struct {
	max    int
	byHost map[string]map[string]time.Time // host → value → last request
}

func newBoundedValues(maxValues int) *boundedValues {
	return &boundedValues{max: maxValues, byHost: map[string]map[string]time.Time{}}
}

// fold returns the name a request recorded at t with value v is counted
// under on host, and whether that is "other" for want of room.
func (b *boundedValues) fold(host, v string, t time.Time) (string, bool) {
	if v == "" {
		v = unknownValue
	}
	if len(v) > maxValueBytes {
		n := maxValueBytes
		for n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
		v = v[:n]
	}
	vs := b.byHost[host]
	if vs == nil {
		vs = map[string]time.Time{}
		b.byHost[host] = vs
	}
	folded := false
	if _, ok := vs[v]; !ok && v != unknownValue {
		named := len(vs)
		for _, reserved := range [...]string{otherValue, unknownValue} {
			if _, ok := vs[reserved]; ok {
				named-- // takes no slot
			}
		}
		if named >= b.max {
			v, folded = otherValue, true
		} else {
			v = strings.Clone(v) // not the span's memory
		}
	}
	if last, ok := vs[v]; !ok || t.After(last) {
		vs[v] = t
	}
	return v, folded
}

// expire forgets the values without a request for idle.
func (b *boundedValues) expire(now time.Time, idle time.Duration) {
	for host, vs := range b.byHost {
		for v, t := range vs {
			if now.Sub(t) > idle {
				delete(vs, v)
			}
		}
		if len(vs) == 0 {
			delete(b.byHost, host)
		}
	}
}
