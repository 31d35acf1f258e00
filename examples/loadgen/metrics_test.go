package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// The servers' /metrics show each engine's running count at the moment of
// the scrape, in Prometheus' text format.
func TestRunningHandlerServesTheEnginesCounts(t *testing.T) {
	node, err := nvmlsim.NewNode("h200", "steady", 8, 1)
	require.NoError(t, err)
	at := time.Unix(0, int64(node.Scenario().Episode)*2000+int64(3*time.Minute))
	rec := httptest.NewRecorder()
	runningHandler(node, func() time.Time { return at }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Header().Get("Content-Type"), "text/plain; version=0.0.4")
	n := node.Running(0, at.UnixNano())
	assert.Positive(t, n, "three minutes into a steady episode")
	assert.Equal(t, strings.Join([]string{
		"# HELP vllm:num_requests_running Number of requests running.",
		"# TYPE vllm:num_requests_running gauge",
		fmt.Sprintf(`vllm:num_requests_running{engine="0",model_name="llama-3.1-70b"} %d`, n),
		"",
	}, "\n"), rec.Body.String())

	rec = httptest.NewRecorder()
	runningHandler(node, time.Now).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/metrics", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}
