package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
)

// factory keeps one core per *Config: the collector hands every pipeline
// that uses one component ID the same config pointer, so the traces and the
// metrics pipeline meet in one core. Keyed by pointer, never by value: two
// IDs with equal settings stay apart.
type factory struct {
	mu    sync.Mutex
	cores map[*Config]*core
}

// NewFactory returns the gpuviz processor's factory.
func NewFactory() processor.Factory {
	f := &factory{cores: map[*Config]*core{}}
	return processor.NewFactory(metadata.Type,
		func() component.Config { return createDefaultConfig() },
		processor.WithTraces(f.createTraces, metadata.TracesStability),
		processor.WithMetrics(f.createMetrics, metadata.MetricsStability))
}

// coreFor returns the config's core, creating it on first use. The core
// removes itself from the map when its last user shuts down.
func (f *factory) coreFor(set processor.Settings, cfg *Config) (*core, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.cores[cfg]; ok {
		c.users++
		return c, nil
	}
	c, err := newCore(set, cfg, func() {
		f.mu.Lock()
		delete(f.cores, cfg)
		f.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	c.users++
	f.cores[cfg] = c
	return c, nil
}

func (f *factory) createTraces(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
	c, err := f.coreFor(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	return &tracesProcessor{handle: handle{core: c}, next: next}, nil
}

func (f *factory) createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	c, err := f.coreFor(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	h := &handle{core: c}
	return processorhelper.NewMetrics(ctx, set, cfg, next, c.processMetrics,
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}),
		processorhelper.WithStart(h.start),
		processorhelper.WithShutdown(h.shutdown))
}
