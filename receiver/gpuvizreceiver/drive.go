package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"context"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.uber.org/zap"
)

// Driven is the receiver's scraper and sampling clock for a program that
// drives them itself on a virtual clock, such as the processor's accuracy
// harness; a collector uses the factory. It reads the GPUs one after the
// other on the caller's goroutine, and hands on what it read at the same
// moments the live receiver does.
type Driven struct {
	s      *gpuScraper
	ticks  map[*gpu]*tickRecorder
	ticked int
}

// NewDriven returns a Driven reading lib (already initialised, of the
// named backend) on the clock now.
func NewDriven(cfg *Config, set receiver.Settings, lib nvml.Interface, backend Backend, now func() time.Time) *Driven {
	s := newGPUScraper(cfg, set)
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, backend, nil }
	s.now = now
	return &Driven{s: s, ticks: map[*gpu]*tickRecorder{}}
}

// Start discovers the GPUs.
func (d *Driven) Start(ctx context.Context) error { return d.s.start(ctx, nil) }

// Scrape is one scrape of the collection interval.
func (d *Driven) Scrape(ctx context.Context) (pmetric.Metrics, error) { return d.s.scrape(ctx) }

// Tick reads every GPU at the clock's now, as one tick of samples.interval
// does. On every tick that ends a flush_interval it returns, first, what
// the ticks before it read (ok true), as the live receiver hands it on.
// With samples off it does nothing: the scrape reads everything.
func (d *Driven) Tick() (md pmetric.Metrics, ok bool) {
	cfg := d.s.cfg.Samples
	if !cfg.Enabled {
		return md, false
	}
	d.ticked++
	flushTick := d.ticked%ticksPerFlush(cfg) == 0
	if flushTick {
		md, ok = pmetric.NewMetrics(), true
		for _, g := range d.s.gpus {
			if t := d.ticks[g]; t != nil {
				t.handOn(md, d.s.resource)
			}
		}
	}
	at := d.s.now()
	for _, g := range d.s.gpus {
		t := d.ticks[g]
		if t == nil {
			t = newTickRecorder(g, d.s.newBuilder())
			d.ticks[g] = t
		}
		t.record(g.tick.read(d.s.lib, d.s.syms, at, flushTick))
	}
	return md, ok
}

// Shutdown releases the GPUs.
func (d *Driven) Shutdown(ctx context.Context) error { return d.s.shutdown(ctx) }
