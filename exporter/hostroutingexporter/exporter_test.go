package hostroutingexporter

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configauth"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gpuviz/gpuviz/exporter/hostroutingexporter/internal/metadatatest"
	"github.com/gpuviz/gpuviz/internal/hostsink"
)

func newSinks(t *testing.T, n int) []*hostsink.Sink {
	sinks := make([]*hostsink.Sink, n)
	for i := range sinks {
		sinks[i] = hostsink.Start(t)
	}
	return sinks
}

func hostTraces(hosts []string, spansEach int) ptrace.Traces {
	td := ptrace.NewTraces()
	for _, h := range hosts {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("host.name", h)
		ss := rs.ScopeSpans().AppendEmpty()
		for range spansEach {
			ss.Spans().AppendEmpty().SetName("llm_request")
		}
	}
	return td
}

func hostMetrics(hosts []string, pointsEach int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for _, h := range hosts {
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("host.name", h)
		g := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge()
		for range pointsEach {
			g.DataPoints().AppendEmpty().SetDoubleValue(1)
		}
	}
	return md
}

func hostNames(n int) []string {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("gpu-node-%02d", i)
	}
	return hosts
}

// testConfig routes to sinks statically, with one attempt and no queue so
// that ConsumeTraces returns what happened.
func testConfig(sinks []*hostsink.Sink) *Config {
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	var endpoints []string
	for _, s := range sinks {
		endpoints = append(endpoints, s.Addr)
	}
	cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: endpoints})
	cfg.Protocol.OTLP.ClientConfig.TLS.Insecure = true
	cfg.Protocol.OTLP.TimeoutConfig.Timeout = 2 * time.Second
	cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	cfg.RetryConfig.Enabled = false
	return cfg
}

type started struct {
	traces  exporter.Traces
	metrics exporter.Metrics
	tel     *componenttest.Telemetry
}

func startBoth(t *testing.T, cfg *Config) started {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(tel)
	f := NewFactory()
	te, err := f.CreateTraces(context.Background(), set, cfg)
	require.NoError(t, err)
	me, err := f.CreateMetrics(context.Background(), set, cfg)
	require.NoError(t, err)
	host := componenttest.NewNopHost()
	require.NoError(t, te.Start(context.Background(), host))
	require.NoError(t, me.Start(context.Background(), host))
	t.Cleanup(func() {
		assert.NoError(t, te.Shutdown(context.Background()))
		assert.NoError(t, me.Shutdown(context.Background()))
	})
	return started{te, me, tel}
}

// owners returns, per host, the sinks that received its spans and its
// metrics.
func owners(sinks []*hostsink.Sink) (spans, metrics map[string][]int) {
	spans, metrics = map[string][]int{}, map[string][]int{}
	for i, s := range sinks {
		sp, mp := s.Counts()
		for h := range sp {
			spans[h] = append(spans[h], i)
		}
		for h := range mp {
			metrics[h] = append(metrics[h], i)
		}
	}
	return spans, metrics
}

func TestAHostsSpansAndMetricsMeetOnOneReplica(t *testing.T) {
	sinks := newSinks(t, 3)
	e := startBoth(t, testConfig(sinks))
	hosts := hostNames(24)
	for range 5 {
		require.NoError(t, e.traces.ConsumeTraces(context.Background(), hostTraces(hosts, 2)))
		require.NoError(t, e.metrics.ConsumeMetrics(context.Background(), hostMetrics(hosts, 3)))
	}
	spans, metrics := owners(sinks)
	perSink := make([]int, len(sinks))
	for _, h := range hosts {
		require.Len(t, spans[h], 1, "%s's spans went to one replica", h)
		require.Equal(t, spans[h], metrics[h], "%s's spans and metrics went to the same replica", h)
		perSink[spans[h][0]]++
	}
	for i, n := range perSink {
		assert.Positive(t, n, "replica %d got hosts", i)
	}
	total := 0
	for _, s := range sinks {
		sp, _ := s.Counts()
		for _, n := range sp {
			total += n
		}
	}
	assert.Equal(t, 24*2*5, total, "every span arrived once")
}

func TestAFailedReplicasHostsMoveToTheOthersAndReturn(t *testing.T) {
	sinks := newSinks(t, 2)
	cfg := testConfig(sinks)
	cfg.DownFor = time.Hour
	e := startBoth(t, cfg)
	hosts := hostNames(16)
	require.NoError(t, e.traces.ConsumeTraces(context.Background(), hostTraces(hosts, 1)))
	before, _ := owners(sinks)

	sinks[0].Stop() // a crash: its hosts must go to replica 1, nothing lost
	require.NoError(t, e.traces.ConsumeTraces(context.Background(), hostTraces(hosts, 1)))
	require.NoError(t, e.metrics.ConsumeMetrics(context.Background(), hostMetrics(hosts, 1)))
	sp1, mp1 := sinks[1].Counts()
	for _, h := range hosts {
		want := 1
		if before[h][0] == 1 {
			want = 2
		}
		assert.Equal(t, want, sp1[h], "%s: spans of the second export at replica 1", h)
		assert.Equal(t, 1, mp1[h], "%s: metrics at replica 1 while replica 0 is down", h)
	}
	assert.Positive(t, counted(t, e.tel, "otelcol_exporter_hostrouting_failovers"))
}

func TestTheRouterIsSharedByTheSignalsAndForgottenAfterThem(t *testing.T) {
	cfg := testConfig(newSinks(t, 1))
	routers.Lock()
	before := len(routers.m)
	routers.Unlock()
	f := NewFactory()
	set := exportertest.NewNopSettings(f.Type())
	te, err := f.CreateTraces(context.Background(), set, cfg)
	require.NoError(t, err)
	me, err := f.CreateMetrics(context.Background(), set, cfg)
	require.NoError(t, err)
	routers.Lock()
	require.Len(t, routers.m, before+1, "one router for the configuration")
	routers.Unlock()
	host := componenttest.NewNopHost()
	require.NoError(t, te.Start(context.Background(), host))
	require.NoError(t, me.Start(context.Background(), host))
	require.NoError(t, te.Shutdown(context.Background()))
	routers.Lock()
	assert.Len(t, routers.m, before+1, "kept while the metrics exporter runs")
	routers.Unlock()
	require.NoError(t, me.Shutdown(context.Background()))
	routers.Lock()
	assert.Len(t, routers.m, before, "forgotten with its last user")
	routers.Unlock()
}

func TestEveryReplicaDownReturnsWhatFailedForRetry(t *testing.T) {
	sinks := newSinks(t, 2)
	e := startBoth(t, testConfig(sinks))
	for _, s := range sinks {
		s.Stop()
	}
	err := e.traces.ConsumeTraces(context.Background(), hostTraces(hostNames(6), 1))
	require.Error(t, err)
	assert.False(t, consumererror.IsPermanent(err), "retryable")
	var failed consumererror.Traces
	require.True(t, errors.As(err, &failed))
	assert.Equal(t, 6, failed.Data().ResourceSpans().Len(), "every resource is handed back for retry")
}

// counted sums a counter of the exporter's own telemetry.
func counted(t *testing.T, tel *componenttest.Telemetry, name string) int64 {
	m, err := tel.GetMetric(name)
	require.NoError(t, err)
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		n += dp.Value
	}
	return n
}

// A replica's exporter sends once, whatever protocol.otlp asks: a replica
// that is gone is given up at its first failure and its hosts fail over at
// once, rather than after the OTLP exporter's own backoff (5 s at first)
// and queue.
func TestAReplicaExporterSendsOnce(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	cfg.Resolver.Static = configoptional.Some(StaticResolverConfig{Hostnames: []string{"gw-0:4317"}})
	cfg.Protocol.OTLP.RetryConfig.Enabled = true
	cfg.Protocol.OTLP.QueueConfig = configoptional.Some(exporterhelper.NewDefaultQueueConfig())
	rt, err := newRouter(cfg, componenttest.NewNopTelemetrySettings())
	require.NoError(t, err)
	var made []*otlpexporter.Config
	sig := traces
	sig.create = func(_ context.Context, _ exporter.Settings, c *otlpexporter.Config) (consumerComponent[ptrace.Traces], error) {
		made = append(made, c)
		return &ctxReplica{got: map[string]int{}}, nil
	}
	e := newRoutingExporter(sig, rt, exportertest.NewNopSettings(NewFactory().Type()), cfg)
	require.NoError(t, e.start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { assert.NoError(t, e.shutdown(context.Background())) })
	require.NoError(t, e.push(context.Background(), hostTraces(hostNames(2), 1)))
	require.Len(t, made, 1)
	assert.False(t, made[0].RetryConfig.Enabled, "a replica's own retries")
	assert.False(t, made[0].QueueConfig.HasValue(), "a replica's own queue")
	assert.Equal(t, "gw-0:4317", made[0].ClientConfig.Endpoint)
}

// A protocol.otlp that cannot start (a ca_file that is not there, an auth
// extension the collector does not have) fails the exporter's start, as it
// would a plain OTLP exporter's, naming the field: the replicas'
// exporters are made only at their first export, and there the failure
// blamed every replica in turn, counted failovers and sent everything to
// retry until it was dropped.
func TestAProtocolThatCannotStartFailsTheStart(t *testing.T) {
	for name, set := range map[string]func(*otlpexporter.Config){
		"missing ca_file": func(c *otlpexporter.Config) {
			c.ClientConfig.TLS.Insecure = false
			c.ClientConfig.TLS.CAFile = filepath.Join(t.TempDir(), "no-such-ca.crt")
		},
		"unknown authenticator": func(c *otlpexporter.Config) {
			c.ClientConfig.Auth = configoptional.Some(configauth.Config{AuthenticatorID: component.MustNewIDWithName("bearertokenauth", "agent")})
		},
	} {
		t.Run(name, func(t *testing.T) {
			sinks := newSinks(t, 2)
			cfg := testConfig(sinks)
			set(&cfg.Protocol.OTLP)
			f := NewFactory()
			te, err := f.CreateTraces(context.Background(), exportertest.NewNopSettings(f.Type()), cfg)
			require.NoError(t, err)
			err = te.Start(context.Background(), componenttest.NewNopHost())
			t.Cleanup(func() { assert.NoError(t, te.Shutdown(context.Background())) })
			require.Error(t, err)
			assert.Contains(t, err.Error(), "protocol.otlp")
		})
	}
}

// While every replica is marked down (a rolling update: a restarted before
// its down_for ran out, then b went), a host whose replica fails goes to
// the next replica, down or not, that has not failed this export: the
// retry takes over only when every replica fails, as docs/fleet.md says.
// It went back for retry while a, which it could have had, took exports.
func TestEveryReplicaMarkedDownTheHostsOfAFailingOneGoToTheNext(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	e := scriptedExporter(t, map[string]func(int) error{
		"gw-a:4317": func(int) error { mu.Lock(); defer mu.Unlock(); got["gw-a:4317"]++; return nil },
		"gw-b:4317": func(int) error { return errors.New("unavailable") },
	})
	now := e.router.now().UnixNano()
	for _, r := range *e.router.replicas.Load() {
		r.downUntil.Store(now + int64(time.Minute))
	}
	var onB []string
	for _, h := range hostNames(32) {
		if r, _ := e.router.pick(keyOf(e.router, h), now); r.endpoint == "gw-b:4317" {
			onB = append(onB, h)
		}
	}
	require.NotEmpty(t, onB)
	require.NoError(t, e.push(context.Background(), hostTraces(onB, 1)), "b's hosts went to a")
	assert.Equal(t, map[string]int{"gw-a:4317": 1}, got, "one export to a, with b's hosts")
}
