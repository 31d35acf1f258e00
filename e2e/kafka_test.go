//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/internal/procs"
)

const kafkaAgentOverride = `receivers:
  gpuviz:
    collection_interval: 1s
    backend: simulated
    simulated: {model: h200, gpus: 4, seed: %d}
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:%d}
      http: {endpoint: 127.0.0.1:%d}
extensions:
  health_check: {endpoint: 127.0.0.1:%d}
service:
  telemetry:
    metrics:
      level: none
`

// TestKafka runs the Kafka topology on loopback from the example files
// (examples/kafka) against franz-go's in-process Kafka (kfake): two agents
// write their hosts' spans and GPU samples to the otlp_spans and
// otlp_metrics topics (4 partitions each); two gateway replicas in one
// consumer group consume them, route by host.name to the replica that owns
// the host, and join there. Every span arrives once, enriched from its own
// host's GPUs; each host's spans and samples meet at one replica; and the
// replicas did forward to each other (Kafka alone does not keep a host
// together). It needs only the collector (make build):
//
//	go test -tags e2e -count=1 -run TestKafka -v ./e2e/
func TestKafka(t *testing.T) {
	root, bin := builtCollector(t)
	group, work := collectorGroup(t)
	ports, err := procs.FreePorts(7)
	require.NoError(t, err)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(ports[6]),
		kfake.SeedTopics(4, "otlp_spans", "otlp_metrics"))
	require.NoError(t, err)
	defer cluster.Close()
	brokers := "[" + strings.Join(cluster.ListenAddrs(), ", ") + "]"

	sink, dests := serveFleetSink(t, 2)
	var listen []string
	for i := range 2 {
		listen = append(listen, fmt.Sprintf("127.0.0.1:%d", ports[3*i]))
	}
	telemetry := make([]int, 2)
	for i := range 2 {
		health := ports[3*i+1]
		telemetry[i] = ports[3*i+2]
		override := filepath.Join(work, fmt.Sprintf("gateway-%d.yaml", i))
		require.NoError(t, os.WriteFile(override, fmt.Appendf(nil, fleetGatewayOverride, fleetSettle, health, telemetry[i]), 0o644))
		p, err := group.SpawnEnv(fmt.Sprintf("gateway-%d", i), []string{
			"GPUVIZ_KAFKA=" + brokers, "GPUVIZ_LISTEN=" + listen[i],
			"GPUVIZ_GATEWAYS=[" + strings.Join(listen, ", ") + "]",
			"GPUVIZ_TRACES_ENDPOINT=" + dests[i], "GPUVIZ_METRICS_ENDPOINT=" + dests[i],
		}, bin, "--config", filepath.Join(root, "examples/kafka/gateway.yaml"), "--config", override)
		require.NoError(t, err)
		require.NoError(t, procs.WaitReady(context.Background(), p, procs.TCPReady(listen[i])))
	}
	agentOTLP := spawnAgents(t, group, root, bin, "examples/kafka/agent.yaml",
		func(i, grpc, http, health int) string {
			return fmt.Sprintf(kafkaAgentOverride, fleetHosts[i].seed, grpc, http, health)
		},
		func(host string) []string { return []string{"GPUVIZ_HOST_NAME=" + host, "GPUVIZ_KAFKA=" + brokers} })
	sink.waitForHosts(t, 60*time.Second)

	sender := &fleetSender{sent: map[pcommon.SpanID]sentSpan{}}
	ctx, stopSending := context.WithCancel(context.Background())
	sending := make(chan struct{})
	go func() { defer close(sending); sender.run(ctx, t, agentOTLP) }()
	time.Sleep(15 * time.Second)
	stopSending()
	<-sending
	sentUntil := time.Now()

	sent := sender.snapshot()
	require.NotEmpty(t, sent, "spans were sent in 15 s")
	require.Eventually(t, func() bool {
		got := sink.snapshot()
		for id := range sent {
			if len(got[id]) == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every span comes through Kafka")
	owner, _, enriched := checkJoin(t, sent, sink.snapshot(), func(sentSpan) bool { return true })
	assert.GreaterOrEqual(t, float64(enriched), 0.95*float64(len(sent)), "spans enriched through Kafka")
	for host, r := range owner {
		assert.Equal(t, []int{r}, sink.metricsReplicas(host, sentUntil.Add(-3*time.Second)),
			"%s's GPU samples are joined where its spans are", host)
	}
	// Each replica consumed a share of the partitions, so at least one
	// forwarded resources to the other.
	forwarded := 0.0
	for i, port := range telemetry {
		forwarded += telemetryOf(t, port).sum("otelcol_exporter_hostrouting_resources_routed", `endpoint="`+listen[1-i]+`"`)
	}
	t.Logf("kafka: %d spans, %d enriched, owners %v; %.0f resources forwarded between replicas", len(sent), enriched, owner, forwarded)
	assert.Positive(t, forwarded, "the replicas route what they consume to the host's owner")
}
