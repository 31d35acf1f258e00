package hostroutingexporter // import "github.com/gpuviz/gpuviz/exporter/hostroutingexporter"

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/otlpexporter"

	"github.com/gpuviz/gpuviz/exporter/hostroutingexporter/internal/metadata"
)

// NewFactory returns the host routing exporter's factory.
func NewFactory() exporter.Factory {
	return exporter.NewFactory(metadata.Type, createDefaultConfig,
		exporter.WithTraces(createTraces, metadata.TracesStability),
		exporter.WithMetrics(createMetrics, metadata.MetricsStability))
}

func createDefaultConfig() component.Config {
	otlp := otlpexporter.NewFactory().CreateDefaultConfig().(*otlpexporter.Config)
	// The OTLP exporter's own validation wants an endpoint; each replica's
	// exporter gets the resolver's instead.
	otlp.ClientConfig.Endpoint = "replica-from-resolver:4317"
	return &Config{
		TimeoutConfig: exporterhelper.NewDefaultTimeoutConfig(),
		QueueConfig:   configoptional.Some(exporterhelper.NewDefaultQueueConfig()),
		RetryConfig:   configretry.NewDefaultBackOffConfig(),
		Protocol:      ProtocolConfig{OTLP: *otlp},
		Resolver: ResolverConfig{
			// DNS of a headless Service follows its ready pods within
			// seconds; 5 s is contrib's load-balancing exporter's default.
			DNS: configoptional.Default(DNSResolverConfig{Interval: 5 * time.Second, Timeout: time.Second}),
		},
		RoutingAttributes: []string{"host.name"},
		// Long enough that a replica restarting is not retried at every
		// export, short enough that its hosts return soon after it does.
		DownFor: 15 * time.Second,
	}
}

// routers holds one router per configuration, shared by its signals.
var routers = struct {
	sync.Mutex
	m map[*Config]*router
}{m: map[*Config]*router{}}

func routerFor(cfg *Config, set exporter.Settings) (*router, error) {
	routers.Lock()
	defer routers.Unlock()
	if rt := routers.m[cfg]; rt != nil {
		return rt, nil
	}
	rt, err := newRouter(cfg, set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	rt.forget = func() {
		routers.Lock()
		defer routers.Unlock()
		delete(routers.m, cfg)
	}
	routers.m[cfg] = rt
	return rt, nil
}

func createTraces(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Traces, error) {
	cfg := c.(*Config)
	rt, err := routerFor(cfg, set)
	if err != nil {
		return nil, err
	}
	e := newRoutingExporter(traces, rt, set, cfg)
	return exporterhelper.NewTraces(ctx, set, cfg, e.push, options(cfg, e.start, e.shutdown)...)
}

func createMetrics(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Metrics, error) {
	cfg := c.(*Config)
	rt, err := routerFor(cfg, set)
	if err != nil {
		return nil, err
	}
	e := newRoutingExporter(metrics, rt, set, cfg)
	return exporterhelper.NewMetrics(ctx, set, cfg, e.push, options(cfg, e.start, e.shutdown)...)
}

func options(cfg *Config, start component.StartFunc, shutdown component.ShutdownFunc) []exporterhelper.Option {
	return []exporterhelper.Option{
		exporterhelper.WithTimeout(cfg.TimeoutConfig),
		exporterhelper.WithQueue(cfg.QueueConfig),
		exporterhelper.WithRetry(cfg.RetryConfig),
		exporterhelper.WithStart(start),
		exporterhelper.WithShutdown(shutdown),
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
	}
}
