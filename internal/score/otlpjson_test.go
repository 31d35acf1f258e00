package score

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// exportLine is one line as the file exporter writes it, with n spans.
func exportLine(t testing.TB, n int) []byte {
	t.Helper()
	td := ptrace.NewTraces()
	spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	for i := range n {
		s := spans.AppendEmpty()
		s.SetTraceID(traceID(byte(i + 1)))
		s.SetSpanID(spanID(byte(i + 1)))
		s.SetName("llm_request")
		s.Attributes().PutDouble(attrEnergy, float64(i))
	}
	b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadTraces(t *testing.T) {
	// Blank lines, CRLF, and a last line without its newline.
	in := bytes.Join([][]byte{exportLine(t, 2), {}, append(exportLine(t, 3), '\r'), exportLine(t, 1)}, []byte("\n"))
	got, err := ReadTraces(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var counts []int
	for _, td := range got {
		counts = append(counts, td.SpanCount())
	}
	if fmt.Sprint(counts) != "[2 3 1]" {
		t.Errorf("span counts per line %v, want [2 3 1]", counts)
	}
}

func TestReadTracesNamesTheBadLine(t *testing.T) {
	in := string(exportLine(t, 1)) + "\n\n" + `{"resourceSpans": [` + "\n" + string(exportLine(t, 1))
	_, err := ReadTraces(strings.NewReader(in))
	if err == nil || !strings.HasPrefix(err.Error(), "spans line 3: ") {
		t.Errorf("error %v, want one for spans line 3", err)
	}
}

// ReadTraces never panics, reads one batch per non-blank line, and names a
// line that exists when it fails.
func FuzzReadTraces(f *testing.F) {
	line := exportLine(f, 2)
	f.Add(line)
	f.Add(append(append(append([]byte{}, line...), "\n\n"...), line...))
	f.Add([]byte("{}\n{\"resourceSpans\":[{}]}\r\n"))
	f.Add([]byte("{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"zz\"}]}]}]}"))
	f.Add([]byte("\n\n  \n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ReadTraces(bytes.NewReader(in))
		lines := bytes.Split(in, []byte("\n"))
		if err != nil {
			var n int
			if _, scanErr := fmt.Sscanf(err.Error(), "spans line %d:", &n); scanErr != nil || n < 1 || n > len(lines) {
				t.Fatalf("error %q names no line of the %d", err, len(lines))
			}
			return
		}
		nonBlank := 0
		for _, l := range lines {
			if len(bytes.TrimSpace(l)) > 0 {
				nonBlank++
			}
		}
		if len(got) != nonBlank {
			t.Fatalf("%d batches from %d non-blank lines", len(got), nonBlank)
		}
	})
}
