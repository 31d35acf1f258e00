package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/scraper"
	"go.uber.org/zap"
)

// NewScraper returns the scraper the receiver runs every collection
// interval, reading lib (already initialised, of the named backend) on the
// clock now. It is for programs that drive the scraper themselves on a
// virtual clock, such as the processor's accuracy harness; a collector
// uses the factory.
func NewScraper(cfg *Config, set receiver.Settings, lib nvml.Interface, backend Backend, now func() time.Time) (scraper.Metrics, error) {
	s := newGPUScraper(cfg, set)
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, backend, nil }
	s.now = now
	return scraper.NewMetrics(s.scrape, scraper.WithStart(s.start), scraper.WithShutdown(s.shutdown))
}
