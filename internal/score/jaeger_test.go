package score

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jaegerTrace is Jaeger's API v3 answer for one trace of two services, as
// its gogo jsonpb marshaller writes it (enums and int64s as numbers and
// strings, IDs in hex).
const jaegerTrace = `{"result":{"resourceSpans":[
 {"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"app"}}]},
  "scopeSpans":[{"scope":{},"spans":[{"traceId":"000000000000000000000000000000aa","spanId":"0000000000000001","name":"chat m","kind":3,
   "startTimeUnixNano":"1000","endTimeUnixNano":"2000"}]}]},
 {"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},
  "scopeSpans":[{"scope":{},"spans":[{"traceId":"000000000000000000000000000000aa","spanId":"0000000000000002","parentSpanId":"0000000000000001",
   "name":"llm_request","kind":2,"startTimeUnixNano":"1100","endTimeUnixNano":"1900",
   "attributes":[{"key":"gpuviz.energy","value":{"doubleValue":12.5}},{"key":"gen_ai.usage.prompt_tokens","value":{"intValue":"7"}}]}]}]}]}}`

func TestFetchJaegerReadsAPIv3(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v3/services":
			_, _ = w.Write([]byte(`{"services":["app","vllm","idle"]}`))
		case "/api/v3/traces":
			queries = append(queries, r.URL.Query().Get("query.service_name"))
			assert.Equal(t, "2026-12-01T10:00:00Z", r.URL.Query().Get("query.start_time_min"))
			if r.URL.Query().Get("query.service_name") == "idle" {
				http.Error(w, `{"error":{"httpCode":404,"message":"No traces found"}}`, http.StatusNotFound)
				return
			}
			_, _ = w.Write([]byte(jaegerTrace))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	from := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	got, err := FetchJaeger(context.Background(), srv.Client(), srv.URL, from, from.Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, []string{"app", "vllm", "idle"}, queries)
	spans := 0
	for _, td := range got {
		spans += td.SpanCount()
	}
	assert.Equal(t, 2, spans, "the trace came back for both services; each span is kept once")
	server := got[0].ResourceSpans().At(1).ScopeSpans().At(0).Spans().At(0)
	assert.Equal(t, "llm_request", server.Name())
	e, ok := server.Attributes().Get("gpuviz.energy")
	require.True(t, ok)
	assert.Equal(t, 12.5, e.Double())
	tok, _ := server.Attributes().Get("gen_ai.usage.prompt_tokens")
	assert.Equal(t, int64(7), tok.Int())
}

func TestFetchJaegerSaysWhatFailed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v3/services" {
			_, _ = w.Write([]byte(`{"services":["vllm"]}`))
			return
		}
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	_, err := FetchJaeger(context.Background(), srv.Client(), srv.URL, time.Now(), time.Now())
	assert.ErrorContains(t, err, "service vllm: GET")
	assert.ErrorContains(t, err, "500 Internal Server Error: boom")
}

// A URL that is not Jaeger's query API (a wrong port or path: a 404 for
// the service list, or an HTML page) is an error naming the URL, not a run
// without traces.
func TestFetchJaegerRefusesWhatIsNotItsAPI(t *testing.T) {
	notFound := func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }
	page := func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("<!doctype html><title>Grafana</title>"))
	}
	for _, tc := range []struct {
		handler http.HandlerFunc
		want    string
	}{
		{notFound, "/api/v3/services: 404 Not Found (not Jaeger's query API v3?)"},
		{page, "/api/v3/services: not JSON: invalid character '<'"},
	} {
		srv := httptest.NewServer(tc.handler)
		_, err := FetchJaeger(context.Background(), srv.Client(), srv.URL, time.Now(), time.Now())
		srv.Close()
		assert.ErrorContains(t, err, "GET "+srv.URL+tc.want)
	}
}

// Jaeger answers a search with at most query.num_traces traces and says
// nothing of the rest: a search that comes back full is an error, not a
// score of some of its requests; one with fewer is read whole. Jaeger
// refuses a search deeper than its store's max_traces (500, "search depth
// must be greater than 0 and less than max traces"), which the scorer's
// bound is.
func TestFetchJaegerRefusesATruncatedSearch(t *testing.T) {
	defer func(n int) { maxJaegerTraces = n }(maxJaegerTraces)
	maxJaegerTraces = 2
	for _, tc := range []struct {
		stored  int
		wantErr string
	}{
		{1, ""},
		{2, "service vllm: 2 traces or more between 2026-12-01T10:00:00Z and 2026-12-01T10:01:00Z"},
		{3, "service vllm: 2 traces or more between 2026-12-01T10:00:00Z and 2026-12-01T10:01:00Z"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v3/services" {
				_, _ = w.Write([]byte(`{"services":["vllm"]}`))
				return
			}
			n, err := strconv.Atoi(r.URL.Query().Get("query.num_traces"))
			require.NoError(t, err)
			if n <= 0 || n > 2 { // a store of max_traces 2
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(`{"error":{"httpCode":500,"message":"search depth must be greater than 0 and less than max traces"}}`))
				return
			}
			var spans []string
			for i := range min(n, tc.stored) {
				spans = append(spans, fmt.Sprintf(`{"traceId":"%032x","spanId":"0000000000000001","name":"llm_request","startTimeUnixNano":"1000","endTimeUnixNano":"2000"}`, i+1))
			}
			fmt.Fprintf(w, `{"result":{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{},"spans":[%s]}]}]}}`, strings.Join(spans, ","))
		}))
		from := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		got, err := FetchJaeger(context.Background(), srv.Client(), srv.URL, from, from.Add(time.Minute))
		srv.Close()
		if tc.wantErr == "" {
			require.NoError(t, err)
			require.Len(t, got, 1)
			assert.Equal(t, tc.stored, got[0].SpanCount())
			continue
		}
		assert.ErrorContains(t, err, tc.wantErr)
	}
}
