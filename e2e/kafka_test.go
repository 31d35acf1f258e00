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
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := env("GPUVIZ_COLLECTOR", filepath.Join(root, "_build/otelcol-gpuviz"))
	_, err = os.Stat(bin)
	require.NoError(t, err, "build the collector first: make build")
	work := t.TempDir()

	ports, err := procs.FreePorts(13)
	require.NoError(t, err)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(ports[12]),
		kfake.SeedTopics(4, "otlp_spans", "otlp_metrics"))
	require.NoError(t, err)
	defer cluster.Close()
	brokers := "[" + strings.Join(cluster.ListenAddrs(), ", ") + "]"

	group, err := procs.NewGroup(work)
	require.NoError(t, err)
	t.Cleanup(func() {
		group.Stop()
		if t.Failed() {
			for _, p := range group.Procs() {
				if b, err := os.ReadFile(p.Log); err == nil {
					t.Logf("%s log:\n%s", p.Name, tail(b, 4000))
					t.Logf("%s warnings:\n%s", p.Name, warnings(b))
				}
			}
		}
	})

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
		require.NoError(t, os.WriteFile(override, fmt.Appendf(nil, fleetGatewayOverride, health, telemetry[i]), 0o644))
		p, err := group.SpawnEnv(fmt.Sprintf("gateway-%d", i), []string{
			"GPUVIZ_KAFKA=" + brokers, "GPUVIZ_LISTEN=" + listen[i],
			"GPUVIZ_GATEWAYS=[" + strings.Join(listen, ", ") + "]",
			"GPUVIZ_TRACES_ENDPOINT=" + dests[i], "GPUVIZ_METRICS_ENDPOINT=" + dests[i],
		}, bin, "--config", filepath.Join(root, "examples/kafka/gateway.yaml"), "--config", override)
		require.NoError(t, err)
		require.NoError(t, procs.WaitReady(context.Background(), p, procs.TCPReady(listen[i])))
	}
	var agentOTLP []string
	for i, h := range fleetHosts {
		grpcPort, httpPort, health := ports[6+3*i], ports[7+3*i], ports[8+3*i]
		override := filepath.Join(work, fmt.Sprintf("agent-%d.yaml", i))
		require.NoError(t, os.WriteFile(override, fmt.Appendf(nil, kafkaAgentOverride, h.seed, grpcPort, httpPort, health), 0o644))
		p, err := group.SpawnEnv("agent-"+h.name, []string{"GPUVIZ_HOST_NAME=" + h.name, "GPUVIZ_KAFKA=" + brokers},
			bin, "--config", filepath.Join(root, "examples/kafka/agent.yaml"), "--config", override)
		require.NoError(t, err)
		addr := fmt.Sprintf("127.0.0.1:%d", grpcPort)
		require.NoError(t, procs.WaitReady(context.Background(), p, procs.TCPReady(addr)))
		agentOTLP = append(agentOTLP, addr)
	}
	began := time.Now()
	require.Eventually(t, func() bool {
		for _, h := range fleetHosts {
			if len(sink.metricsReplicas(h.name, began)) == 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "both hosts' GPU metrics come through Kafka to a gateway")
	time.Sleep(2 * time.Second)

	sender := &fleetSender{sent: map[pcommon.SpanID]sentSpan{}}
	ctx, stopSending := context.WithCancel(context.Background())
	sending := make(chan struct{})
	go func() { defer close(sending); sender.run(ctx, t, agentOTLP) }()
	time.Sleep(15 * time.Second)
	stopSending()
	<-sending
	sentUntil := time.Now()

	sent := sender.snapshot()
	require.Eventually(t, func() bool {
		got := sink.snapshot()
		for id := range sent {
			if len(got[id]) == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every span comes through Kafka")
	got := sink.snapshot()
	owner := map[string]int{}
	enriched, duplicates := 0, 0
	for id, s := range sent {
		rs := got[id]
		if len(rs) > 1 {
			duplicates++
		}
		r := rs[0]
		host := fleetHosts[s.host].name
		assert.Equal(t, host, r.host)
		if o, ok := owner[host]; ok {
			assert.Equal(t, o, r.replica, "all of %s's spans are joined at one replica", host)
		}
		owner[host] = r.replica
		if len(r.gpus) > 0 {
			enriched++
			for _, g := range r.gpus {
				assert.True(t, strings.HasPrefix(g, fmt.Sprintf("GPU-simulated-h200-%d-", fleetHosts[s.host].seed)),
					"%s's span enriched from %s, a GPU of another host", host, g)
			}
		}
	}
	assert.Zero(t, duplicates, "no span arrives twice")
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

// warnings returns a log's first warnings and errors.
func warnings(log []byte) string {
	var out []string
	for _, line := range strings.Split(string(log), "\n") {
		if (strings.Contains(line, "\twarn\t") || strings.Contains(line, "\terror\t")) && !strings.Contains(line, "kubelet.sock") {
			out = append(out, line[:min(len(line), 600)])
		}
		if len(out) == 10 {
			break
		}
	}
	return strings.Join(out, "\n")
}
