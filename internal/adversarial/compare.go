package adversarial

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Single returns a copy of sp, alone under a copy of its resource and
// scope: a span as a whole, to compare what went in with what came out.
func Single(res pcommon.Resource, scope pcommon.InstrumentationScope, sp ptrace.Span) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	res.CopyTo(rs.Resource())
	ss := rs.ScopeSpans().AppendEmpty()
	scope.CopyTo(ss.Scope())
	sp.CopyTo(ss.Spans().AppendEmpty())
	return td
}

// EachSpan calls f with each span of td, its resource and scope.
func EachSpan(td ptrace.Traces, f func(res pcommon.Resource, scope pcommon.InstrumentationScope, sp ptrace.Span)) {
	rss := td.ResourceSpans()
	for i := range rss.Len() {
		rs := rss.At(i)
		for j := range rs.ScopeSpans().Len() {
			ss := rs.ScopeSpans().At(j)
			for k := range ss.Spans().Len() {
				f(rs.Resource(), ss.Scope(), ss.Spans().At(k))
			}
		}
	}
}

// Check compares one span that came out (got, as Single makes it) with what
// went in (sent). Spans passed through must be identical, field by field
// and bit by bit (NaN included); an Enriched case's span may also have
// gained attributes under gpuviz. (the processor's, which overwrite any the
// sender set there), nothing else; one the processor must pass through
// unenriched (Case.Unenriched) may not.
func Check(c Case, sent, got ptrace.Traces) error {
	if c.Outcome == Enriched && c.Unenriched == "" {
		sent, got = withoutGPUViz(sent), withoutGPUViz(got)
	}
	return CheckUntouched(c, sent, got)
}

// CheckUntouched is Check for a span that must come out exactly as it went
// in whatever its case: with the processor's results_on: child, an
// Enriched case's span too.
func CheckUntouched(c Case, sent, got ptrace.Traces) error {
	var m ptrace.ProtoMarshaler
	a, err := m.MarshalTraces(sent)
	if err != nil {
		return err
	}
	b, err := m.MarshalTraces(got)
	if err != nil {
		return err
	}
	if bytes.Equal(a, b) {
		return nil
	}
	return fmt.Errorf("%s (%s): what came out differs from what went in: %s", c.Name, c.Outcome, firstDifference(sent, got))
}

func withoutGPUViz(td ptrace.Traces) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	attrs := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes()
	attrs.RemoveIf(func(k string, _ pcommon.Value) bool { return strings.HasPrefix(k, "gpuviz.") })
	return out
}

// firstDifference shows where the JSON encodings of two single-span traces
// part, for the failure message.
func firstDifference(a, b ptrace.Traces) string {
	var m ptrace.JSONMarshaler
	ja, errA := m.MarshalTraces(a)
	jb, errB := m.MarshalTraces(b)
	if err := errors.Join(errA, errB); err != nil {
		return err.Error()
	}
	i := 0
	for i < len(ja) && i < len(jb) && ja[i] == jb[i] {
		i++
	}
	from := max(0, i-60)
	clip := func(s []byte) string { return string(s[from:min(len(s), i+60)]) }
	return fmt.Sprintf("at byte %d of the JSON: sent …%s… got …%s…", i, clip(ja), clip(jb))
}
