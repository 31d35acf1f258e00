package score

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// maxJaegerTraces bounds one search: Jaeger's in-memory store holds a run's
// traces (100,000 by default, and it refuses a search deeper than that);
// a larger run should export to a file. Jaeger answers a search with at
// most the traces asked for and says nothing of the rest, so a search that
// comes back full is an error, not a score of some of its requests (the
// rest would read as spans gpuviz never exported).
var maxJaegerTraces = 100_000

// FetchJaeger reads from Jaeger v2's API v3 (base, e.g.
// http://127.0.0.1:16686) every trace of every service that started in
// [from, to): OTLP JSON, as Jaeger stores what the collector exported. A
// trace that spans several services comes back once per service; each span
// is kept once.
func FetchJaeger(ctx context.Context, client *http.Client, base string, from, to time.Time) ([]ptrace.Traces, error) {
	var services struct{ Services []string }
	switch err := getJaeger(ctx, client, base+"/api/v3/services", &services); {
	case errors.Is(err, errNotFound):
		// Jaeger v2 answers the list, empty or not: this is not its API.
		return nil, fmt.Errorf("%w (not Jaeger's query API v3?)", err)
	case err != nil:
		return nil, err
	}
	seen := map[[24]byte]bool{}
	var out []ptrace.Traces
	for _, svc := range services.Services {
		q := url.Values{
			"query.service_name":   {svc},
			"query.start_time_min": {from.UTC().Format(time.RFC3339Nano)},
			"query.start_time_max": {to.UTC().Format(time.RFC3339Nano)},
			"query.num_traces":     {strconv.Itoa(maxJaegerTraces)},
		}
		var resp struct{ Result json.RawMessage }
		switch err := getJaeger(ctx, client, base+"/api/v3/traces?"+q.Encode(), &resp); {
		case errors.Is(err, errNotFound):
			continue // Jaeger's "No traces found"
		case err != nil:
			return nil, fmt.Errorf("service %s: %w", svc, err)
		}
		var u ptrace.JSONUnmarshaler
		td, err := u.UnmarshalTraces(resp.Result)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", svc, err)
		}
		if n := traceCount(td); n >= maxJaegerTraces {
			return nil, fmt.Errorf("service %s: %d traces or more between %s and %s: Jaeger returns only as many as asked for; export the run's spans to a file and score it with --spans",
				svc, maxJaegerTraces, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		}
		removeSeen(td, seen)
		out = append(out, td)
	}
	return out, nil
}

// traceCount is the number of distinct traces in td.
func traceCount(td ptrace.Traces) int {
	ids := map[pcommon.TraceID]struct{}{}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				ids[s.TraceID()] = struct{}{}
			}
		}
	}
	return len(ids)
}

// removeSeen drops the spans of td already in seen, and adds the rest.
func removeSeen(td ptrace.Traces, seen map[[24]byte]bool) {
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			ss.Spans().RemoveIf(func(s ptrace.Span) bool {
				k := spanKey(s.TraceID(), s.SpanID())
				if seen[k] {
					return true
				}
				seen[k] = true
				return false
			})
			return ss.Spans().Len() == 0
		})
		return rs.ScopeSpans().Len() == 0
	})
}

func spanKey(t pcommon.TraceID, s pcommon.SpanID) [24]byte {
	var k [24]byte
	copy(k[:16], t[:])
	copy(k[16:], s[:])
	return k
}

// errNotFound is a 404: Jaeger's "No traces found" for a search.
var errNotFound = errors.New("404 Not Found")

// getJaeger GETs u into v; errors name u.
func getJaeger(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("GET %s: %w", u, errNotFound)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET %s: %s: %.200s", u, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: not JSON: %w", u, err)
	}
	return nil
}

// traceLead is how long before a request's arrival its trace may start (a
// GenAI client span opens before the server sees the request).
const traceLead = 10 * time.Second

// TraceWindow is when the truth's traces started: from before the first
// arrival to the last finish.
func TraceWindow(truth *infersim.Truth) (from, to time.Time) {
	var lo, hi int64
	for i, r := range truth.Requests {
		if i == 0 || r.Arrival < lo {
			lo = r.Arrival
		}
		hi = max(hi, r.Finished)
	}
	return time.Unix(0, lo).Add(-traceLead), time.Unix(0, hi)
}
