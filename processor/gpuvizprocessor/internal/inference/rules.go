package inference // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Rule recognises the spans of a home-grown inference server. Rules are
// tried before the built-in families, in order; the first that matches a
// span's name decides (the span is then never given to another family).
type Rule struct {
	Name           string // required, unique
	SpanName       string // exact span name to match (required unless SpanNamePrefix)
	SpanNamePrefix string
	// Optional attribute keys (span attributes first, then resource) holding phase durations in
	// seconds (double or int) or Rust Debug strings; phases follow one another from the span start
	// in the order queue, prefill, decode.
	QueueSecondsAttribute, PrefillSecondsAttribute, DecodeSecondsAttribute string
	InputTokensAttribute, OutputTokensAttribute, ModelAttribute            string
}

// Validate checks the rule on its own; messages name the field
// (rules[].name, rules[].span_name, ...). Config.Validate also checks that
// names are unique and gives the rule's index.
func (r Rule) Validate() error { return r.validate("rules[]") }

const maxRuleName = 128

func (r Rule) validate(field string) error {
	var errs []error
	switch {
	case r.Name == "":
		errs = append(errs, fmt.Errorf("%s.name: must not be empty", field))
	case len(r.Name) > maxRuleName:
		errs = append(errs, fmt.Errorf("%s.name: longer than %d bytes", field, maxRuleName))
	case strings.IndexFunc(r.Name, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) >= 0:
		errs = append(errs, fmt.Errorf("%s.name: %q has spaces or unprintable characters", field, r.Name))
	}
	switch {
	case r.SpanName == "" && r.SpanNamePrefix == "":
		errs = append(errs, fmt.Errorf("%s.span_name: set span_name (exact) or span_name_prefix", field))
	case r.SpanName != "" && r.SpanNamePrefix != "":
		errs = append(errs, fmt.Errorf("%s.span_name: set span_name or span_name_prefix, not both", field))
	}
	keys := []struct{ field, key string }{
		{"queue_seconds_attribute", r.QueueSecondsAttribute},
		{"prefill_seconds_attribute", r.PrefillSecondsAttribute},
		{"decode_seconds_attribute", r.DecodeSecondsAttribute},
		{"input_tokens_attribute", r.InputTokensAttribute},
		{"output_tokens_attribute", r.OutputTokensAttribute},
		{"model_attribute", r.ModelAttribute},
	}
	for i, k := range keys {
		if k.key != strings.TrimSpace(k.key) {
			errs = append(errs, fmt.Errorf("%s.%s: %q has leading or trailing spaces", field, k.field, k.key))
		}
		if k.key == "" {
			continue
		}
		for _, other := range keys[:i] {
			if other.key == k.key {
				errs = append(errs, fmt.Errorf("%s.%s: %q is also %s", field, k.field, k.key, other.field))
			}
		}
	}
	return errors.Join(errs...)
}

type compiledRule struct {
	Rule
	family string // "rule:" + Name
}

func (c *compiledRule) matches(name string) bool {
	if c.SpanName != "" {
		return name == c.SpanName
	}
	return strings.HasPrefix(name, c.SpanNamePrefix)
}

// matchRule returns the index of the first rule matching the span name, or -1.
func (r *Recognizer) matchRule(name string) int {
	for i := range r.rules {
		if r.rules[i].matches(name) {
			return i
		}
	}
	return -1
}

// recognize reads the rule's attributes. Durations are non-negative seconds
// (double or int) or Rust Debug strings ("1.5ms"); token counts are
// non-negative ints; the model is a string (other types are ignored).
func (c *compiledRule) recognize(span ptrace.Span, resource pcommon.Resource, req *Request, d *draft) string {
	sa, ra := span.Attributes(), resource.Attributes()
	for _, p := range [3]struct{ name, key string }{
		{PhaseQueue, c.QueueSecondsAttribute},
		{PhasePrefill, c.PrefillSecondsAttribute},
		{PhaseDecode, c.DecodeSecondsAttribute},
	} {
		if p.key == "" {
			continue
		}
		v, ok := lookup(sa, ra, p.key)
		if !ok {
			continue
		}
		var ns int64
		var why string
		if v.Type() == pcommon.ValueTypeStr {
			dur, err := ParseRustDuration(v.Str())
			if err != nil {
				return ReasonBadDurationString
			}
			ns = int64(dur)
		} else if ns, why = secondsNS(v); why != "" {
			return why
		}
		if why := d.next(p.name, ns); why != "" {
			return why
		}
	}
	for _, t := range [2]struct {
		key string
		to  *int64
	}{{c.InputTokensAttribute, &d.in}, {c.OutputTokensAttribute, &d.out}} {
		if t.key == "" {
			continue
		}
		if v, ok := lookup(sa, ra, t.key); ok {
			n, why := tokenCount(v)
			if why != "" {
				return why
			}
			*t.to = n
		}
	}
	if c.ModelAttribute != "" {
		if v, ok := lookup(sa, ra, c.ModelAttribute); ok {
			req.Model = str(v)
		}
	}
	return ""
}
