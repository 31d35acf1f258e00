package score

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ReadTraces reads what the file exporter writes with format json: one
// ExportTraceServiceRequest in OTLP JSON per line. Blank lines are skipped;
// a line that does not parse is an error naming it.
func ReadTraces(r io.Reader) ([]ptrace.Traces, error) {
	// A line is a whole exported batch, easily megabytes: ReadBytes grows
	// its buffer to the line instead of failing at a fixed size.
	br := bufio.NewReaderSize(r, 1<<20)
	var u ptrace.JSONUnmarshaler
	var out []ptrace.Traces
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			td, uerr := u.UnmarshalTraces(line)
			if uerr != nil {
				return nil, fmt.Errorf("spans line %d: %w", n, uerr)
			}
			out = append(out, td)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("spans line %d: %w", n, err)
		}
	}
}
