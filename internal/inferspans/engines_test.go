package inferspans

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// Each vLLM engine of a node exports its running count under its own
// resource, with the GPU hint its spans carry, at the scrape's instant;
// the count is the engine's own and moves over an episode.
func TestAppendRunningExportsEachEnginesCount(t *testing.T) {
	node, err := nvmlsim.NewNode("h200", "long_context", 8, 1)
	require.NoError(t, err)
	sc := node.Scenario()
	start := int64(sc.Episode) * 1000
	seen := map[float64]bool{}
	for at := start + int64(time.Minute); at < start+int64(sc.Episode); at += int64(30 * time.Second) {
		md := pmetric.NewMetrics()
		AppendRunning(md, node, at, env)
		require.Equal(t, len(sc.Engines), md.ResourceMetrics().Len())
		for i := range md.ResourceMetrics().Len() {
			rm := md.ResourceMetrics().At(i)
			uuid, ok := rm.Resource().Attributes().Get(GPUUUIDKey)
			require.True(t, ok)
			assert.Equal(t, env.GPUIDs[sc.Engines[i].GPUs[0]], uuid.Str())
			m := rm.ScopeMetrics().At(0).Metrics().At(0)
			assert.Equal(t, "vllm:num_requests_running", m.Name())
			dp := m.Gauge().DataPoints().At(0)
			assert.Equal(t, at, int64(dp.Timestamp()))
			assert.Equal(t, float64(node.Running(i, at)), dp.DoubleValue())
			seen[dp.DoubleValue()] = true
		}
	}
	assert.Greater(t, len(seen), 2, "the counts move: %v", seen)
}

// In mixed, every family's server exports its own gauge: TensorRT-LLM's
// (trtllm-serve) beside vLLM's, SGLang's and TGI's router's.
func TestAppendRunningNamesEachFamilysGauge(t *testing.T) {
	node, err := nvmlsim.NewNode("h200", "mixed", 8, 1)
	require.NoError(t, err)
	md := pmetric.NewMetrics()
	AppendRunning(md, node, int64(node.Scenario().Episode)*1000+int64(2*time.Minute), env)
	var names []string
	for i := range md.ResourceMetrics().Len() {
		names = append(names, md.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics().At(0).Name())
	}
	assert.Equal(t, []string{"vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size", "trtllm_num_requests_running"}, names)
}
