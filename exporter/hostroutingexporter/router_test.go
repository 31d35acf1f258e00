package hostroutingexporter

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/exporter/hostroutingexporter/internal/metadatatest"
)

func testRouter(t *testing.T, endpoints ...string) *router {
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: endpoints})
	rt, err := newRouter(cfg, componenttest.NewNopTelemetrySettings())
	require.NoError(t, err)
	require.NoError(t, rt.start(context.Background()))
	t.Cleanup(rt.shutdown)
	return rt
}

func keyOf(rt *router, host string) uint64 {
	m := pcommon.NewMap()
	m.PutStr("host.name", host)
	k, _ := rt.key(m)
	return k
}

// assignment maps each of n hosts to the endpoint it is routed to.
func assignment(rt *router, hosts []string) map[string]string {
	out := map[string]string{}
	for _, h := range hosts {
		r, _ := rt.pick(keyOf(rt, h), 0)
		out[h] = r.endpoint
	}
	return out
}

func TestRendezvousMovesOnlyTheHostsOfAReplicaThatLeaves(t *testing.T) {
	hosts := hostNames(1000)
	three := testRouter(t, "gw-0:4317", "gw-1:4317", "gw-2:4317")
	before := assignment(three, hosts)
	counts := map[string]int{}
	for _, e := range before {
		counts[e]++
	}
	for e, n := range counts {
		// 1000 hosts over 3 replicas: 333 each, give or take a few σ (√222 ≈ 15).
		assert.InDelta(t, 333, n, 60, "%s's share", e)
	}

	three.setEndpoints([]string{"gw-0:4317", "gw-2:4317"})
	after := assignment(three, hosts)
	for _, h := range hosts {
		if before[h] != "gw-1:4317" {
			assert.Equal(t, before[h], after[h], "%s stays where it was", h)
		} else {
			assert.NotEqual(t, "gw-1:4317", after[h])
		}
	}

	// Every agent picks the same replica: a new router, listing the same
	// replicas in another order, agrees.
	other := testRouter(t, "gw-2:4317", "gw-0:4317")
	assert.Equal(t, after, assignment(other, hosts))
}

func TestADownReplicaIsSkippedUntilDownForPasses(t *testing.T) {
	rt := testRouter(t, "gw-0:4317", "gw-1:4317")
	k := keyOf(rt, "gpu-node-07")
	first, up := rt.pick(k, 0)
	require.True(t, up)
	rt.markDown(context.Background(), first, 0, errors.New("connection refused"))
	second, up := rt.pick(k, 1)
	assert.True(t, up)
	assert.NotEqual(t, first.endpoint, second.endpoint)
	rt.markDown(context.Background(), second, 1, errors.New("connection refused"))
	anyOne, up := rt.pick(k, 2)
	assert.False(t, up, "none is up")
	assert.Equal(t, first, anyOne, "the best of all when none is up")
	back, up := rt.pick(k, int64(rt.downFor)+1)
	assert.True(t, up)
	assert.Equal(t, first, back, "the host returns once down_for has passed")
}

func TestAResourceWithoutTheAttributesIsUnkeyed(t *testing.T) {
	rt := testRouter(t, "gw-0:4317")
	_, ok := rt.key(pcommon.NewMap())
	assert.False(t, ok)
}

func TestDNSResolverFollowsTheNameAndKeepsTheListWhenItFails(t *testing.T) {
	var mu sync.Mutex
	answer := []net.IPAddr{{IP: net.ParseIP("10.0.0.1")}, {IP: net.ParseIP("10.0.0.2")}}
	var fail bool
	d := &dnsResolver{
		hostname: "gpuviz-gateway-headless", port: "4317", interval: 10 * time.Millisecond, timeout: 5 * time.Millisecond,
		logger: zap.NewNop(),
		lookup: func(context.Context, string) ([]net.IPAddr, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return nil, errors.New("SERVFAIL")
			}
			return answer, nil
		},
	}
	updates := make(chan []string, 100)
	require.NoError(t, d.start(context.Background(), func(e []string) { updates <- e }))
	defer d.shutdown()
	assert.Equal(t, []string{"10.0.0.1:4317", "10.0.0.2:4317"}, <-updates, "the first list is there when start returns")

	mu.Lock()
	answer = []net.IPAddr{{IP: net.ParseIP("10.0.0.2")}, {IP: net.ParseIP("fd00::3")}}
	mu.Unlock()
	require.Eventually(t, func() bool {
		select {
		case e := <-updates:
			return len(e) == 2 && e[1] == "[fd00::3]:4317"
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond)

	mu.Lock()
	fail = true
	mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	for len(updates) > 0 {
		assert.Equal(t, []string{"10.0.0.2:4317", "[fd00::3]:4317"}, <-updates, "a failed lookup does not update")
	}
}

func TestRoutingKeyRules(t *testing.T) {
	tests := []struct {
		name       string
		attributes []string
		a, b       map[string]any
		same       bool
	}{
		{"a host's resources share a key", []string{"host.name"},
			map[string]any{"host.name": "gpu-node-01", "service.name": "vllm"}, map[string]any{"host.name": "gpu-node-01"}, true},
		{"two hosts do not", []string{"host.name"},
			map[string]any{"host.name": "gpu-node-01"}, map[string]any{"host.name": "gpu-node-02"}, false},
		{"every routing attribute counts", []string{"host.name", "k8s.pod.name"},
			map[string]any{"host.name": "gpu-node-01", "k8s.pod.name": "vllm-0"}, map[string]any{"host.name": "gpu-node-01", "k8s.pod.name": "vllm-1"}, false},
		{"values do not run together", []string{"host.name", "k8s.pod.name"},
			map[string]any{"host.name": "gpu-node-01"}, map[string]any{"host.name": "gpu-node-0", "k8s.pod.name": "1"}, false},
		{"a value keeps its attribute", []string{"host.name", "k8s.pod.name"},
			map[string]any{"host.name": "vllm-0"}, map[string]any{"k8s.pod.name": "vllm-0"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &router{attributes: tt.attributes}
			key := func(attrs map[string]any) uint64 {
				m := pcommon.NewMap()
				require.NoError(t, m.FromRaw(attrs))
				k, keyed := rt.key(m)
				assert.True(t, keyed, "%v has a routing attribute", attrs)
				return k
			}
			assert.Equal(t, tt.same, key(tt.a) == key(tt.b))
		})
	}
}

func TestAResolverUpdateKeepsAReplicasHealth(t *testing.T) {
	rt := testRouter(t, "gw-0:4317", "gw-1:4317")
	rt.markDown(context.Background(), (*rt.replicas.Load())[0], 0, errors.New("connection refused"))
	rt.setEndpoints([]string{"gw-1:4317", "gw-2:4317", "gw-0:4317"})
	for _, r := range *rt.replicas.Load() {
		assert.Equal(t, r.endpoint != "gw-0:4317", r.up(1), "%s", r.endpoint)
	}
}

// The gauge counts replicas, each once, however often the resolver lists
// it.
func TestTheEndpointsGaugeCountsReplicasByState(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: []string{"gw-0:4317", "gw-1:4317", "gw-0:4317", "gw-2:4317"}})
	rt, err := newRouter(cfg, tel.NewTelemetrySettings())
	require.NoError(t, err)
	require.NoError(t, rt.start(context.Background()))
	t.Cleanup(rt.shutdown)
	rt.markDown(context.Background(), (*rt.replicas.Load())[0], time.Now().UnixNano(), errors.New("connection refused"))
	metadatatest.AssertEqualExporterHostroutingEndpoints(t, tel, []metricdata.DataPoint[int64]{
		{Value: 2, Attributes: attribute.NewSet(attribute.String("state", "up"))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("state", "down"))},
	}, metricdatatest.IgnoreTimestamp())
}

func TestAnEmptyDNSAnswerKeepsTheReplicas(t *testing.T) {
	d := &dnsResolver{
		hostname: "gpuviz-gateway-headless", port: "4317", timeout: time.Second, logger: zap.NewNop(),
		lookup: func(context.Context, string) ([]net.IPAddr, error) { return nil, nil },
	}
	d.resolve(func(e []string) { t.Errorf("updated to %v", e) })
}

// pickExcept skips only the replicas an export has failed on, wherever
// they are listed: a host goes to the replica it would have on a router
// listing the others alone, whether they are up or every one is marked
// down, and to none once every replica has failed.
func TestPickExceptSkipsOnlyTheReplicasThatFailed(t *testing.T) {
	endpoints := []string{"gw-0:4317", "gw-1:4317", "gw-2:4317"}
	rt := testRouter(t, endpoints...)
	hosts := hostNames(64)
	for _, allDown := range []bool{false, true} {
		if allDown {
			for _, r := range *rt.replicas.Load() {
				rt.markDown(context.Background(), r, 0, errors.New("connection refused"))
			}
		}
		for i, failed := range *rt.replicas.Load() {
			others := testRouter(t, append(append([]string{}, endpoints[:i]...), endpoints[i+1:]...)...)
			for _, h := range hosts {
				r, up := rt.pickExcept(keyOf(rt, h), 1, map[*replica]bool{failed: true})
				require.NotNil(t, r, "%s with %s failed (all down: %v)", h, failed.endpoint, allDown)
				want, _ := others.pick(keyOf(others, h), 1)
				assert.Equal(t, want.endpoint, r.endpoint, "%s with %s failed (all down: %v)", h, failed.endpoint, allDown)
				assert.Equal(t, !allDown, up)
			}
		}
		every := map[*replica]bool{}
		for _, r := range *rt.replicas.Load() {
			every[r] = true
		}
		r, _ := rt.pickExcept(keyOf(rt, "gpu-node-07"), 1, every)
		assert.Nil(t, r, "every replica has failed")
	}
}
