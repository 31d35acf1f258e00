package gpuvizreceiver

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// foundationMetrics are the metrics of the receiver's first release: the
// budget (100 µs, 200 allocations per GPU per scrape) was set for them.
var foundationMetrics = []string{
	"hw.gpu.utilization", "hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.gpu.memory.utilization",
	"hw.power", "hw.energy", "hw.temperature", "hw.status", "nvidia.gpu.memory_controller.utilization",
	"nvidia.gpu.clock.frequency", "nvidia.gpu.power.limit", "nvidia.gpu.performance_state",
	"nvidia.gpu.fan.speed", "nvidia.gpu.info",
}

// onlyMetrics disables every metric not named, by the metric configs'
// mapstructure tags.
func onlyMetrics(m *metadata.MetricsConfig, names []string) {
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		name := strings.Split(v.Type().Field(i).Tag.Get("mapstructure"), ",")[0]
		keep := false
		for _, n := range names {
			keep = keep || n == name
		}
		v.Field(i).FieldByName("Enabled").SetBool(keep)
	}
}

// BenchmarkScrape8SimulatedGPUs measures one scrape of a simulated 8-GPU
// H200 server in steady state: a simulated clock advances 10 s (the default
// interval) between scrapes, so every scrape drains 10 s of driver samples
// and spans a full GPM interval, as in production. The simulation's own
// cost is included (it is small: cached schedules, exact integrals).
// Results and the command are in docs/benchmarks.md.
func BenchmarkScrape8SimulatedGPUs(b *testing.B) {
	for _, bc := range []struct {
		name string
		tune func(*Config)
	}{
		{"foundation", func(c *Config) {
			onlyMetrics(&c.Metrics, foundationMetrics)
			c.Samples.Enabled, c.Processes.Enabled = false, false
		}},
		// samples_off: the scrape makes the fast readings too; default: they
		// are the sampling clock's.
		{"samples_off", func(c *Config) { c.Samples.Enabled = false }},
		{"default", func(*Config) {}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := defaultConfig()
			cfg.Backend = BackendSimulated
			cfg.XidEvents.Enabled = false // a goroutine blocked in EventSetWait; no scrape cost
			bc.tune(cfg)
			clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			now := func() time.Time { return clock }
			lib, err := nvmlsim.New(cfg.Simulated.Model, cfg.Simulated.GPUs, cfg.Simulated.Seed, now)
			if err != nil {
				b.Fatal(err)
			}
			s := newGPUScraper(cfg, receivertest.NewNopSettings(metadata.Type))
			s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, BackendSimulated, nil }
			s.now = now
			ctx := context.Background()
			if err := s.start(ctx, nil); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.shutdown(ctx) }()
			scrape := func() int {
				clock = clock.Add(10 * time.Second)
				m, err := s.scrape(ctx)
				if err != nil {
					b.Fatal(err)
				}
				return m.DataPointCount()
			}
			scrape() // the first scrape drains the driver's whole sample history
			b.ReportAllocs()
			points := 0
			for b.Loop() {
				points = scrape()
			}
			b.ReportMetric(float64(points)/8, "points/GPU")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8/1000, "µs/GPU")
		})
	}
}

// BenchmarkTick8SimulatedGPUs measures one tick of the sampling clock over a
// simulated 8-GPU H200 server serving the default scenario, the clock
// advancing one interval per tick, flushes included (every fourth tick at
// the defaults: the driver's sample buffers are drained and the builder
// emptied). The GPUs are read one after the other here; the live clock
// reads them concurrently. B/op over a flush's ticks is what a pending
// tick costs in memory (docs/benchmarks.md).
func BenchmarkTick8SimulatedGPUs(b *testing.B) {
	for _, interval := range []time.Duration{250 * time.Millisecond, 100 * time.Millisecond} {
		b.Run(interval.String(), func(b *testing.B) {
			cfg := defaultConfig()
			cfg.Samples.Interval = interval
			d, clock := startTickBench(b, cfg)
			points := 0
			tick := func() {
				clock.advance(interval)
				if m, ok := d.Tick(); ok {
					points += m.DataPointCount()
				}
			}
			for range 2 * ticksPerFlush(cfg.Samples) { // drain the driver's history, open GPM
				tick()
			}
			points = 0
			b.ReportAllocs()
			for b.Loop() {
				tick()
			}
			b.ReportMetric(float64(points)/float64(b.N)/8, "points/GPU/tick")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8/1000, "µs/GPU/tick")
		})
	}
}

// BenchmarkPendingTickBytes measures what a tick waiting for the pipeline
// holds: the heap that ticks recorded and not yet handed on keep live, per
// GPU, on the simulated 8-GPU server (the default scenario's busy GPUs, so
// few runs to leave points out of). It bounds the receiver's buffer:
// max_pending_ticks × GPUs × this (docs/benchmarks.md).
func BenchmarkPendingTickBytes(b *testing.B) {
	const pending = 40
	cfg := defaultConfig()
	cfg.Samples.FlushInterval = pending * cfg.Samples.Interval // no hand-on while measured
	d, clock := startTickBench(b, cfg)
	tick := func() {
		clock.advance(cfg.Samples.Interval)
		d.Tick()
	}
	for range pending { // open GPM, fill the episode cache, reach a hand-on
		tick()
	}
	var held float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range pending - 1 { // the pending-th tick hands on
			tick()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (pending - 1) / float64(cfg.Simulated.GPUs)
		tick()
	}
	b.ReportMetric(held, "heap-B/GPU/pending-tick")
}

// startTickBench starts a Driven over cfg's simulated server (the default
// 8 H200s, steady) on a virtual clock; it is shut down when b ends.
func startTickBench(b *testing.B, cfg *Config) (*Driven, *virtualClock) {
	b.Helper()
	cfg.Backend = BackendSimulated
	cfg.XidEvents.Enabled = false // a goroutine blocked in EventSetWait; no tick cost
	clock := newVirtualClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	sim := cfg.Simulated
	lib, err := nvmlsim.New(sim.Model, sim.GPUs, sim.Seed, clock.now, nvmlsim.WithScenario(sim.Scenario))
	if err != nil {
		b.Fatal(err)
	}
	d := NewDriven(cfg, receivertest.NewNopSettings(metadata.Type), lib, BackendSimulated, clock.now)
	if err := d.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Shutdown(context.Background()) })
	return d, clock
}
