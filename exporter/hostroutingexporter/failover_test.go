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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/gpuviz/gpuviz/exporter/hostroutingexporter/internal/metadatatest"
)

// scriptedReplica answers its n-th export (from 0) with answer(n).
type scriptedReplica struct {
	component.StartFunc
	component.ShutdownFunc
	mu     sync.Mutex
	calls  int
	answer func(n int) error
}

func (s *scriptedReplica) consume(context.Context, ptrace.Traces) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.answer(s.calls - 1)
}

// scriptedExporter routes traces to replicas answering as scripted, by
// endpoint, without a network.
func scriptedExporter(t *testing.T, answers map[string]func(int) error) *routingExporter[ptrace.Traces] {
	t.Helper()
	return scriptedExporterWith(t, answers, componenttest.NewNopTelemetrySettings())
}

// scriptedExporterWith is scriptedExporter reporting its own telemetry to set.
func scriptedExporterWith(t *testing.T, answers map[string]func(int) error, set component.TelemetrySettings) *routingExporter[ptrace.Traces] {
	t.Helper()
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	var endpoints []string
	for e := range answers {
		endpoints = append(endpoints, e)
	}
	cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: endpoints})
	rt, err := newRouter(cfg, set)
	require.NoError(t, err)
	sig := traces
	sig.create = func(_ context.Context, _ exporter.Settings, c *otlpexporter.Config) (consumerComponent[ptrace.Traces], error) {
		return &scriptedReplica{answer: answers[c.ClientConfig.Endpoint]}, nil
	}
	e := newRoutingExporter(sig, rt, exportertest.NewNopSettings(NewFactory().Type()), cfg)
	require.NoError(t, e.start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { assert.NoError(t, e.shutdown(context.Background())) })
	return e
}

func TestARefusalForGoodIsNotRetriedWithWhatFailedOver(t *testing.T) {
	permanent := consumererror.NewPermanent(errors.New("malformed"))
	transient := errors.New("unavailable")
	e := scriptedExporter(t, map[string]func(int) error{
		// a refuses its first export for good, then is unavailable; b is
		// unavailable throughout.
		"gw-a:4317": func(n int) error {
			if n == 0 {
				return permanent
			}
			return transient
		},
		"gw-b:4317": func(int) error { return transient },
	})
	hosts := hostNames(32)
	onB := 0
	for _, h := range hosts {
		if r, _ := e.router.pick(keyOf(e.router, h), 0); r.endpoint == "gw-b:4317" {
			onB++
		}
	}
	require.Positive(t, onB)
	require.Less(t, onB, len(hosts))

	err := e.push(context.Background(), hostTraces(hosts, 1))
	require.Error(t, err)
	assert.False(t, consumererror.IsPermanent(err), "what failed over and then failed is retried")
	var failed consumererror.Traces
	require.True(t, errors.As(err, &failed))
	assert.Equal(t, onB, failed.Data().ResourceSpans().Len(),
		"only b's hosts are handed back: a's first export was refused for good and is not retried")
}

// What a replica refuses for good is dropped; the exporter counts it, as
// exporterhelper cannot where the rest of the export is retried.
func TestARefusalForGoodIsCounted(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	e := scriptedExporterWith(t, map[string]func(int) error{
		"gw-a:4317": func(int) error { return consumererror.NewPermanent(errors.New("malformed")) },
		"gw-b:4317": func(int) error { return errors.New("unavailable") },
	}, tel.NewTelemetrySettings())
	hosts := hostNames(32)
	// b's hosts fail over to a, which refuses them too: a refuses every one.
	err := e.push(context.Background(), hostTraces(hosts, 1))
	require.Error(t, err)
	assert.True(t, consumererror.IsPermanent(err), "nothing is left to retry")
	metadatatest.AssertEqualExporterHostroutingResourcesRefused(t, tel, []metricdata.DataPoint[int64]{
		{Value: int64(len(hosts)), Attributes: attribute.NewSet(attribute.String("endpoint", "gw-a:4317"))},
	}, metricdatatest.IgnoreTimestamp())
}

func TestNoReplicaListedYetIsRetried(t *testing.T) {
	e := scriptedExporter(t, map[string]func(int) error{"gw-a:4317": func(int) error { return nil }})
	e.router.replicas.Store(&[]*replica{}) // as DNS before its first answer
	err := e.push(context.Background(), hostTraces(hostNames(3), 1))
	require.Error(t, err)
	assert.False(t, consumererror.IsPermanent(err))
	var failed consumererror.Traces
	require.True(t, errors.As(err, &failed))
	assert.Equal(t, 3, failed.Data().ResourceSpans().Len())
}

func TestAReplicaIsTriedOncePerExportWhateverDownFor(t *testing.T) {
	transient := errors.New("unavailable")
	calls := map[string]*int{"gw-a:4317": new(int), "gw-b:4317": new(int)}
	answer := func(ep string) func(int) error {
		return func(int) error { *calls[ep]++; return transient }
	}
	e := scriptedExporter(t, map[string]func(int) error{"gw-a:4317": answer("gw-a:4317"), "gw-b:4317": answer("gw-b:4317")})
	// down_for shorter than a failed export (validation allows any
	// positive value): each replica is up again by the next round.
	e.router.downFor = time.Nanosecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := e.push(ctx, hostTraces(hostNames(8), 1))
	require.Error(t, err)
	var failed consumererror.Traces
	require.True(t, errors.As(err, &failed))
	assert.Equal(t, 8, failed.Data().ResourceSpans().Len())
	assert.NoError(t, ctx.Err(), "the export ends when every replica has failed it, not at its deadline")
	assert.Equal(t, 1, *calls["gw-a:4317"], "a tried once")
	assert.Equal(t, 1, *calls["gw-b:4317"], "b tried once")
}

func TestAnExportToAReplicaJustUnlistedFailsOverAndKeepsNoExporter(t *testing.T) {
	e := scriptedExporter(t, map[string]func(int) error{
		"gw-a:4317": func(int) error { return nil },
		"gw-b:4317": func(int) error { return nil },
	})
	a := (*e.router.replicas.Load())[0]
	require.Equal(t, "gw-a:4317", a.endpoint)
	// An export picked a, then the resolver dropped it before the export
	// reached a's exporter.
	e.router.setEndpoints([]string{"gw-b:4317"})
	err := e.send(context.Background(), a, hostTraces(hostNames(1), 1))
	require.Error(t, err, "not sent to a replica no longer listed")
	assert.False(t, consumererror.IsPermanent(err), "failed over, then retried")
	e.mu.Lock()
	defer e.mu.Unlock()
	assert.NotContains(t, e.replicas, "gw-a:4317", "no exporter kept for a replica no longer listed")
}

// Routed counts resources, per replica; unkeyed only those without any
// routing attribute.
func TestRoutedAndUnkeyedResourcesAreCounted(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	ok := func(int) error { return nil }
	e := scriptedExporterWith(t, map[string]func(int) error{"gw-a:4317": ok, "gw-b:4317": ok}, tel.NewTelemetrySettings())
	td := hostTraces(hostNames(16), 1)
	for range 2 {
		td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("no host")
	}
	require.NoError(t, e.push(context.Background(), td))
	assert.Equal(t, int64(18), counted(t, tel, "otelcol_exporter_hostrouting_resources_routed"))
	metadatatest.AssertEqualExporterHostroutingUnkeyedResources(t, tel, []metricdata.DataPoint[int64]{{Value: 2}},
		metricdatatest.IgnoreTimestamp())
}

// A replica tried only because every replica is down is not blamed again:
// no failover is counted (none happened) and it comes back when it would
// have.
func TestAReplicaAlreadyDownIsNotBlamedAgain(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	unavailable := func(int) error { return errors.New("unavailable") }
	e := scriptedExporterWith(t, map[string]func(int) error{"gw-a:4317": unavailable, "gw-b:4317": unavailable}, tel.NewTelemetrySettings())
	now := time.Now().UnixNano()
	for _, r := range *e.router.replicas.Load() {
		r.downUntil.Store(now + int64(time.Minute))
	}
	err := e.push(context.Background(), hostTraces(hostNames(8), 1))
	var failed consumererror.Traces
	require.True(t, errors.As(err, &failed))
	assert.Equal(t, 8, failed.Data().ResourceSpans().Len())
	for _, r := range *e.router.replicas.Load() {
		assert.Equal(t, now+int64(time.Minute), r.downUntil.Load(), "%s: down as long as before", r.endpoint)
	}
	_, err = tel.GetMetric("otelcol_exporter_hostrouting_failovers")
	assert.Error(t, err, "no failover counted")
}

func TestEachReplicaGetsOnlyItsOwnResources(t *testing.T) {
	a, b := &ctxReplica{}, &ctxReplica{}
	e := ctxExporter(t, map[string]*ctxReplica{"gw-a:4317": a, "gw-b:4317": b})
	// One host on each replica.
	var onA, onB string
	for _, h := range hostNames(32) {
		if r, _ := e.router.pick(keyOf(e.router, h), 0); r.endpoint == "gw-a:4317" {
			onA = h
		} else {
			onB = h
		}
	}
	require.NotEmpty(t, onA)
	require.NotEmpty(t, onB)
	require.NoError(t, e.push(context.Background(), hostTraces([]string{onA, onB}, 1)))
	assert.Equal(t, map[string]int{onA: 1}, a.got)
	assert.Equal(t, map[string]int{onB: 1}, b.got)
}

// An export whose time was up before it began blames no replica: each is
// sent to and fails on the context, through no fault of its own.
func TestAnExportOutOfTimeAtItsStartBlamesNoReplica(t *testing.T) {
	a, b := &ctxReplica{}, &ctxReplica{}
	e := ctxExporter(t, map[string]*ctxReplica{"gw-a:4317": a, "gw-b:4317": b})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := e.push(ctx, hostTraces(hostNames(8), 1))
	var failed consumererror.Traces
	require.True(t, errors.As(err, &failed))
	assert.Equal(t, 8, failed.Data().ResourceSpans().Len(), "all handed back for retry")
	now := e.router.now().UnixNano()
	for _, r := range *e.router.replicas.Load() {
		assert.True(t, r.up(now), "%s is up", r.endpoint)
	}
}

// The exporter of a replica the resolver no longer lists is shut down (its
// gRPC connection closed); those of the replicas still listed are kept.
func TestTheExporterOfAReplicaNoLongerListedIsShutDown(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: []string{"gw-a:4317", "gw-b:4317"}})
	rt, err := newRouter(cfg, componenttest.NewNopTelemetrySettings())
	require.NoError(t, err)
	var mu sync.Mutex
	created, shut := map[string]int{}, map[string]int{}
	sig := traces
	sig.create = func(_ context.Context, _ exporter.Settings, c *otlpexporter.Config) (consumerComponent[ptrace.Traces], error) {
		ep := c.ClientConfig.Endpoint
		mu.Lock()
		defer mu.Unlock()
		created[ep]++
		return &scriptedReplica{
			answer: func(int) error { return nil },
			ShutdownFunc: func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				shut[ep]++
				return nil
			},
		}, nil
	}
	e := newRoutingExporter(sig, rt, exportertest.NewNopSettings(NewFactory().Type()), cfg)
	require.NoError(t, e.start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { assert.NoError(t, e.shutdown(context.Background())) })
	hosts := hostTraces(hostNames(16), 1)
	require.NoError(t, e.push(context.Background(), hosts))
	require.Equal(t, map[string]int{"gw-a:4317": 1, "gw-b:4317": 1}, created)

	rt.setEndpoints([]string{"gw-b:4317", "gw-c:4317"})
	require.NoError(t, e.push(context.Background(), hosts))
	e.retiring.Wait()
	mu.Lock()
	assert.Equal(t, map[string]int{"gw-a:4317": 1}, shut, "a's exporter shut down, b's kept")
	assert.Equal(t, 1, created["gw-b:4317"], "b's exporter not made again")
	mu.Unlock()
	e.mu.Lock()
	assert.NotContains(t, e.replicas, "gw-a:4317")
	e.mu.Unlock()
}
