package gpuvizreceiver

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// BenchmarkScrape8SimulatedGPUs measures one full scrape of a simulated
// 8-GPU H200 server with every default metric: the receiver's own work plus
// the simulation's (cheap: cached schedules, no allocation). Results and the
// command are in docs/benchmarks.md.
func BenchmarkScrape8SimulatedGPUs(b *testing.B) {
	cfg := defaultConfig()
	cfg.Backend = BackendSimulated
	lib, err := openSimulated(cfg.Simulated)
	if err != nil {
		b.Fatal(err)
	}
	s := newGPUScraper(cfg, receivertest.NewNopSettings(metadata.Type))
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, BackendSimulated, nil }
	ctx := context.Background()
	if err := s.start(ctx, nil); err != nil {
		b.Fatal(err)
	}
	defer s.shutdown(ctx)
	b.ReportAllocs()
	points := 0
	for b.Loop() {
		m, err := s.scrape(ctx)
		if err != nil {
			b.Fatal(err)
		}
		points = m.DataPointCount()
	}
	b.ReportMetric(float64(points), "points/scrape")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8/1000, "µs/GPU")
}
