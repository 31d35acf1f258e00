package hostroutingexporter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ctxReplica answers as a gRPC client would: an export whose context is
// done fails at once; hang makes it wait for that.
type ctxReplica struct {
	component.StartFunc
	component.ShutdownFunc
	hang bool
	mu   sync.Mutex
	got  map[string]int
}

func (r *ctxReplica) consume(ctx context.Context, td ptrace.Traces) error {
	if r.hang {
		<-ctx.Done()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range td.ResourceSpans().Len() {
		h, _ := td.ResourceSpans().At(i).Resource().Attributes().Get("host.name")
		r.got[h.Str()]++
	}
	return nil
}

func ctxExporter(t *testing.T, replicas map[string]*ctxReplica) *routingExporter[ptrace.Traces] {
	t.Helper()
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	var endpoints []string
	for e, r := range replicas {
		endpoints = append(endpoints, e)
		r.got = map[string]int{}
	}
	cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: endpoints})
	rt, err := newRouter(cfg, componenttest.NewNopTelemetrySettings())
	require.NoError(t, err)
	sig := traces
	sig.create = func(_ context.Context, _ exporter.Settings, c *otlpexporter.Config) (consumerComponent[ptrace.Traces], error) {
		return replicas[c.ClientConfig.Endpoint], nil
	}
	e := newRoutingExporter(sig, rt, exportertest.NewNopSettings(NewFactory().Type()), cfg)
	require.NoError(t, e.start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { assert.NoError(t, e.shutdown(context.Background())) })
	return e
}

func TestAHungReplicaDoesNotTakeTheOthersDown(t *testing.T) {
	hung, b, c := &ctxReplica{hang: true}, &ctxReplica{}, &ctxReplica{}
	e := ctxExporter(t, map[string]*ctxReplica{"gw-a:4317": hung, "gw-b:4317": b, "gw-c:4317": c})
	// The hung replica's hosts first, so that it is sent to first.
	var onA, others []string
	for _, h := range hostNames(32) {
		if r, _ := e.router.pick(keyOf(e.router, h), 0); r.endpoint == "gw-a:4317" {
			onA = append(onA, h)
		} else {
			others = append(others, h)
		}
	}
	require.NotEmpty(t, onA)
	require.NotEmpty(t, others)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := e.push(ctx, hostTraces(append(onA, others...), 1))
	require.Error(t, err)
	assert.False(t, consumererror.IsPermanent(err))
	var failed consumererror.Traces
	require.True(t, errors.As(err, &failed))
	assert.Equal(t, len(onA), failed.Data().ResourceSpans().Len(),
		"only the hung replica's hosts are handed back for retry")
	for _, h := range others {
		assert.Equal(t, 1, b.got[h]+c.got[h], "%s delivered by its own replica", h)
	}
	now := e.router.now().UnixNano()
	for _, r := range *e.router.replicas.Load() {
		assert.Equal(t, r.endpoint == "gw-a:4317", !r.up(now), "%s: only the hung replica is down", r.endpoint)
	}
}
