package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/scraper"
	"go.opentelemetry.io/collector/scraper/scraperhelper"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/internal/podresources"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// NewFactory returns the gpuviz receiver's factory.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithMetrics(createMetrics, metadata.MetricsStability))
}

func createDefaultConfig() component.Config {
	cc := scraperhelper.NewDefaultControllerConfig()
	cc.CollectionInterval = 10 * time.Second
	return &Config{
		ControllerConfig:     cc,
		MetricsBuilderConfig: metadata.NewDefaultMetricsBuilderConfig(),
		Backend:              BackendNVML,
		Simulated:            SimulatedConfig{Model: "h200", GPUs: 8, Seed: 1, Scenario: nvmlsim.DefaultScenario},
		Samples:              SamplesConfig{Enabled: true, Interval: defaultSampleInterval, FlushInterval: time.Second, MaxPendingTicks: 40},
		Processes:            ProcessesConfig{Enabled: true, Top: 10},
		XidEvents:            XidEventsConfig{Enabled: true},
		Kubernetes: KubernetesConfig{PodResources: PodResourcesConfig{
			Enabled: true, Socket: podresources.DefaultSocket, Interval: 5 * time.Second, Timeout: 2 * time.Second,
		}},
		Slurm: SlurmConfig{Environ: true},
	}
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	c := cfg.(*Config)
	s := newGPUScraper(c, set)
	sc, err := scraper.NewMetrics(s.scrape, scraper.WithStart(s.start), scraper.WithShutdown(s.shutdown))
	if err != nil {
		return nil, err
	}
	controller, err := scraperhelper.NewMetricsController(c.controllerConfig(), set, next,
		scraperhelper.AddMetricsScraper(metadata.Type, sc))
	if err != nil {
		return nil, err
	}
	if !c.Samples.Enabled {
		return controller, nil
	}
	sp, err := newSampler(s, set, next)
	if err != nil {
		return nil, err
	}
	return &sampledReceiver{Metrics: controller, sampler: sp}, nil
}
