package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/scraper/scrapererror"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/internal/podresources"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// gpuScraper reads every selected GPU once per collection interval.
type gpuScraper struct {
	cfg      *Config
	settings receiver.Settings
	logger   *zap.Logger
	// open is the backend opener; tests replace it to read a go-nvml mock.
	open func(*Config, *zap.Logger) (nvml.Interface, Backend, error)

	// procRoot is where procfs is mounted; tests point it elsewhere.
	procRoot string
	// now is the scraper's clock; benchmarks drive it alongside a simulation.
	now func() time.Time

	lib      nvml.Interface
	syms     symbols
	gpus     []*gpu
	xid      *xidWatcher
	pods     *podresources.Watcher
	mb       *metadata.MetricsBuilder
	resource pcommon.Resource
}

func newGPUScraper(cfg *Config, settings receiver.Settings) *gpuScraper {
	return &gpuScraper{cfg: cfg.complemented(), settings: settings, logger: settings.Logger, open: openBackend, procRoot: "/proc", now: time.Now}
}

func (s *gpuScraper) start(_ context.Context, _ component.Host) error {
	lib, backend, err := s.open(s.cfg, s.logger)
	if err != nil {
		return err
	}
	if err := s.discover(lib); err != nil {
		lib.Shutdown()
		return err
	}
	s.lib = lib
	if s.cfg.XidEvents.Enabled && s.cfg.Metrics.NvidiaGpuXidErrors.Enabled {
		s.xid = startXidWatcher(lib, s.gpus, s.logger)
	}
	if err := s.startPods(); err != nil {
		s.shutdown(context.Background())
		return err
	}

	s.mb = metadata.NewMetricsBuilder(s.builderConfig(), s.settings)
	rb := s.mb.NewResourceBuilder()
	if backend == BackendSimulated {
		rb.SetGpuvizBackendSimulated()
	} else {
		rb.SetGpuvizBackendNvml()
	}
	if host, err := os.Hostname(); err == nil {
		rb.SetHostName(host)
	}
	s.resource = rb.Emit()
	s.logger.Info("gpuviz receiver reading GPUs", zap.String("backend", string(backend)), zap.Int("gpus", len(s.gpus)))
	return nil
}

// builderConfig is the configured MetricsBuilderConfig with
// process.command_line switched on when processes.command_line asks for it,
// so that one flag controls it.
func (s *gpuScraper) builderConfig() metadata.MetricsBuilderConfig {
	mbc := s.cfg.MetricsBuilderConfig
	if s.cfg.Processes.CommandLine {
		m := &mbc.Metrics
		m.NvidiaGpuProcessMemoryUsage.EnabledAttributes = append(slices.Clone(m.NvidiaGpuProcessMemoryUsage.EnabledAttributes),
			metadata.NvidiaGpuProcessMemoryUsageMetricAttributeKeyProcessCommandLine)
		m.NvidiaGpuProcessUtilization.EnabledAttributes = append(slices.Clone(m.NvidiaGpuProcessUtilization.EnabledAttributes),
			metadata.NvidiaGpuProcessUtilizationMetricAttributeKeyProcessCommandLine)
	}
	return mbc
}

// discover probes the library and reads the static facts of the selected
// GPUs. A GPU that cannot even be identified is logged and left out: it
// must not keep the others from being read.
func (s *gpuScraper) discover(lib nvml.Interface) error {
	s.syms = probeSymbols(lib)
	if !s.syms.totalEnergy {
		s.logger.Info("this NVML has no nvmlDeviceGetTotalEnergyConsumption: hw.energy will not be reported")
	}
	if !s.syms.clocksEventReasons && !s.syms.clocksThrottleReasons {
		s.logger.Info("this NVML reports no clock event reasons: nvidia.gpu.throttle.active will not be reported")
	}
	indexes, err := selectGPUs(lib, s.cfg.Devices)
	if err != nil {
		return err
	}
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		driver = ""
	}
	s.gpus = s.gpus[:0]
	for _, idx := range indexes {
		g, err := openGPU(lib, idx, driver)
		if err != nil {
			s.logger.Error("GPU left out: it could not be identified at start", zap.Error(err))
			continue
		}
		if !s.syms.clocksEventReasons && !s.syms.clocksThrottleReasons {
			g.unsupported.add(readThrottleReasons)
		}
		g.fields = newFieldRequest(&s.cfg.Metrics)
		logger := s.logger.With(zap.Int("gpu", g.index), zap.String("hw.id", g.id))
		g.tick = newTickState(s.cfg, s.syms, lib, g.dev, logger)
		if g.tick.gpm == nil && (gpmEnabled(&s.cfg.Metrics) || migGPMEnabled(&s.cfg.Metrics)) {
			logger.Info("no GPM on this GPU (Hopper or newer, and a driver with GPM, are needed): SM, tensor and DRAM activity will not be reported")
		}
		s.gpus = append(s.gpus, g)
	}
	if len(indexes) == 0 {
		s.logger.Warn("NVML sees no GPU: the gpuviz receiver will report nothing")
	}
	return nil
}

func (s *gpuScraper) shutdown(context.Context) error {
	if s.lib == nil {
		return nil
	}
	if s.xid != nil {
		s.xid.shutdown()
		s.xid = nil
	}
	if s.pods != nil {
		s.pods.Shutdown()
		s.pods = nil
	}
	for _, g := range s.gpus {
		if !g.tickAbandoned {
			g.tick.free(s.lib)
		}
	}
	ret := s.lib.Shutdown()
	s.lib = nil
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlShutdown: %w", ret)
	}
	return nil
}

func (s *gpuScraper) scrape(ctx context.Context) (pmetric.Metrics, error) {
	var errs scrapererror.ScrapeErrors
	for i, g := range s.gpus {
		if err := ctx.Err(); err != nil {
			errs.AddPartial(len(s.gpus)-i, fmt.Errorf("scrape timed out before GPU %d was read: %w", g.index, err))
			break
		}
		s.scrapeGPU(g, &errs)
	}
	return s.mb.Emit(metadata.WithResource(s.resource)), errs.Combine()
}

// scrapeGPU makes every reading of one GPU that is enabled and supported,
// then reports the GPU's state. A reading that fails costs only its own
// metrics; a lost GPU ends its own scrape, never the others'.
func (s *gpuScraper) scrapeGPU(g *gpu, errs *scrapererror.ScrapeErrors) {
	ts := pcommon.NewTimestampFromTime(s.now())
	g.health = metadata.AttributeHwStateOk
	wasLost := g.lost
	g.lost = false
	for r := range readingCount {
		if g.unsupported.has(r) || !r.enabled(s.cfg) {
			continue
		}
		ret := r.read(s, g, ts)
		switch ret {
		case nvml.SUCCESS:
			continue
		case nvml.ERROR_NOT_SUPPORTED:
			g.unsupported.add(r)
			s.logger.Info("GPU does not support a reading; it will not be asked again",
				zap.Int("gpu", g.index), zap.String("hw.id", g.id), zap.String("reading", r.String()))
			continue
		case nvml.ERROR_GPU_IS_LOST:
			g.lost = true
			errs.AddPartial(1, fmt.Errorf("GPU %d (%s) is lost (fallen off the bus or failed): %w", g.index, g.id, ret))
			if !wasLost {
				s.logger.Error("GPU lost: reporting hw.status failed until it answers again; the other GPUs are unaffected",
					zap.Int("gpu", g.index), zap.String("hw.id", g.id))
			}
		default:
			g.worsen(metadata.AttributeHwStateDegraded)
			errs.AddPartial(1, fmt.Errorf("GPU %d (%s): reading %s: %w", g.index, g.id, r, ret))
			continue
		}
		break
	}
	if !s.cfg.Samples.Enabled && !g.lost {
		// Every scrape ends an interval, and with a point a scrape there is
		// no run to leave points out of.
		r := g.tick.read(s.lib, s.syms, ts.AsTime(), true)
		recordTick(s.mb, g, r, nil)
		if r.failed != nvml.SUCCESS {
			g.worsen(metadata.AttributeHwStateDegraded)
			errs.AddPartial(1, fmt.Errorf("GPU %d (%s): fast readings: %w", g.index, g.id, r.failed))
		}
	}
	if g.tickStalled.Load() {
		g.worsen(metadata.AttributeHwStateDegraded)
	}
	s.recordGPMStatus(g, ts)
	s.mb.RecordNvidiaGpuInfoDataPoint(ts, 1, g.id, g.name, g.vendor, g.model, g.driver, int64(g.index), g.busID)
	s.recordAllocations(g, s.allocation(), ts)
	if g.xids.take(func(code uint64, n int64) {
		s.mb.RecordNvidiaGpuXidErrorsDataPoint(ts, n, g.id, g.name, int64(code))
	}) {
		g.worsen(metadata.AttributeHwStateDegraded)
	}
	if g.lost {
		g.worsen(metadata.AttributeHwStateFailed)
	} else if wasLost {
		s.logger.Info("GPU answers again", zap.Int("gpu", g.index), zap.String("hw.id", g.id))
	}
	for _, st := range []metadata.AttributeHwState{metadata.AttributeHwStateOk, metadata.AttributeHwStateDegraded, metadata.AttributeHwStateFailed} {
		var v int64
		if st == g.health {
			v = 1
		}
		s.mb.RecordHwStatusDataPoint(ts, v, g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu, st)
	}
}

var gpmStates = [...]metadata.AttributeNvidiaGpuGpmState{
	gpmUnavailable: metadata.AttributeNvidiaGpuGpmStateUnavailable,
	gpmActive:      metadata.AttributeNvidiaGpuGpmStateActive,
	gpmInUse:       metadata.AttributeNvidiaGpuGpmStateInUse,
}

// recordGPMStatus reports whether the GPU's GPM counters are read, held by
// another client, or not there.
func (s *gpuScraper) recordGPMStatus(g *gpu, ts pcommon.Timestamp) {
	cur := g.tick.gpmStatus.Load()
	for st, attr := range gpmStates {
		s.mb.RecordNvidiaGpuGpmStatusDataPoint(ts, boolInt(int32(st) == cur), g.id, g.name, attr)
	}
}
