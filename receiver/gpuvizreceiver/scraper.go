package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
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

	lib    nvml.Interface
	syms   symbols
	driver string
	gpus   []*gpu
	// absent are the GPUs selected but not read: not identified at start,
	// or appeared since; lookForGPUs tries them every lookEvery.
	absent   []int
	seen     int // the GPU count NVML gave, with the devices option unset
	lookedAt time.Time
	// found hands a GPU found to the sampling clock; nil without it.
	found func(*gpu)
	// xid is nil until a GPU registers for Xid events: at start, or when
	// one is found later. Atomic: a stalled GPU's scrape may still be
	// reacquiring its handle when lookForGPUs starts the watcher.
	xid      atomic.Pointer[xidWatcher]
	pods     *podresources.Watcher
	mb       *metadata.MetricsBuilder
	resource pcommon.Resource

	// environDenied is set once reading a process's environment was
	// refused (logged then); mapping is the job mapping directory's state.
	environDenied atomic.Bool
	mapping       mappingState

	// gpuIDs maps the NVML index of each GPU read, found at start or
	// since, to its UUID (int → string), gpuMinors its device minor number
	// to the GPU (int → *gpu; its MIG layout resolves GKE's partitions):
	// the pod watcher's goroutine resolves the kubelet's device IDs that
	// name a GPU by number through them.
	gpuIDs, gpuMinors sync.Map
}

func newGPUScraper(cfg *Config, settings receiver.Settings) *gpuScraper {
	return &gpuScraper{cfg: cfg.complemented(), settings: settings, logger: settings.Logger, open: openBackend, procRoot: "/proc", now: time.Now}
}

// newBuilder returns a MetricsBuilder of the receiver's configuration: the
// scrape's own, each GPU's, each tick recorder's.
func (s *gpuScraper) newBuilder() *metadata.MetricsBuilder {
	return metadata.NewMetricsBuilder(s.builderConfig(), s.settings)
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
	if s.xidsWanted() {
		s.xid.Store(startXidWatcher(lib, s.gpus, s.logger))
	}
	if err := s.startPods(); err != nil {
		s.shutdown(context.Background())
		return err
	}

	s.mb = s.newBuilder()
	rb := s.mb.NewResourceBuilder()
	if backend == BackendSimulated {
		rb.SetGpuvizBackendSimulated()
		if len(s.cfg.Simulated.Faults) > 0 {
			rb.SetGpuvizSimulatedFaults(faultSummary(s.cfg.Simulated.Faults))
		}
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
	if driver, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		s.driver = driver
	}
	s.gpus, s.absent = s.gpus[:0], s.absent[:0]
	if len(s.cfg.Devices) == 0 {
		s.seen = len(indexes)
	}
	for _, idx := range indexes {
		if err := s.adopt(lib, idx); err != nil {
			s.logger.Error("GPU left out at start: it could not be identified; it is looked for again every minute", zap.Error(err))
			s.absent = append(s.absent, idx)
		}
	}
	if len(indexes) == 0 {
		s.logger.Warn("NVML sees no GPU: the gpuviz receiver will report nothing")
	}
	return nil
}

// xidsWanted reports whether the configuration counts Xid errors.
func (s *gpuScraper) xidsWanted() bool {
	return s.cfg.XidEvents.Enabled && s.cfg.Metrics.NvidiaGpuXidErrors.Enabled
}

// adopt opens GPU idx and makes it one the receiver reads.
func (s *gpuScraper) adopt(lib nvml.Interface, idx int) error {
	g, err := openGPU(lib, idx, s.driver)
	if err != nil {
		return err
	}
	if !s.syms.clocksEventReasons && !s.syms.clocksThrottleReasons {
		g.unsupported.add(readThrottleReasons)
	}
	g.fields = newFieldRequest(&s.cfg.Metrics)
	g.mb = s.newBuilder()
	logger := s.logger.With(zap.Int("gpu", g.index), zap.String("hw.id", g.id))
	g.tick = newTickState(s.cfg, s.syms, lib, &g.handle, logger)
	if g.tick.gpm == nil && (gpmEnabled(&s.cfg.Metrics) || migGPMEnabled(&s.cfg.Metrics)) {
		logger.Info("no GPM on this GPU (Hopper or newer, and a driver with GPM, are needed): SM, tensor and DRAM activity will not be reported")
	}
	s.gpus = append(s.gpus, g)
	s.gpuIDs.Store(g.index, g.id)
	if s.syms.minorNumber {
		if minor, ret := g.dev.GetMinorNumber(); ret == nvml.SUCCESS {
			s.gpuMinors.Store(minor, g)
		}
	}
	if s.found != nil {
		s.found(g)
	}
	return nil
}

// lookEvery is how often the scrape looks for GPUs it does not read: left
// out at start, or appeared since (with the devices option unset).
const lookEvery = time.Minute

// lookForGPUs adopts the GPUs that can now be read.
func (s *gpuScraper) lookForGPUs(now time.Time) {
	if now.Sub(s.lookedAt) < lookEvery {
		return
	}
	s.lookedAt = now
	if len(s.cfg.Devices) == 0 {
		if count, ret := s.lib.DeviceGetCount(); ret == nvml.SUCCESS {
			for ; s.seen < count; s.seen++ {
				s.absent = append(s.absent, s.seen)
			}
		}
	}
	still := s.absent[:0]
	for _, idx := range s.absent {
		if err := s.adopt(s.lib, idx); err != nil {
			still = append(still, idx)
			continue
		}
		g := s.gpus[len(s.gpus)-1]
		if w := s.xid.Load(); w != nil {
			w.register(g, g.dev)
		} else if s.xidsWanted() {
			// No GPU registered at start (none identified, say): the
			// first found starts the watcher.
			s.xid.Store(startXidWatcher(s.lib, []*gpu{g}, s.logger))
		}
		s.logger.Info("GPU found: it is read from now on", zap.Int("gpu", g.index), zap.String("hw.id", g.id))
	}
	s.absent = still
}

func (s *gpuScraper) shutdown(context.Context) error {
	if s.lib == nil {
		return nil
	}
	if w := s.xid.Swap(nil); w != nil {
		w.shutdown()
	}
	if s.pods != nil {
		s.pods.Shutdown()
		s.pods = nil
	}
	// A GPU's scrape still in an NVML call gets as long as the sampling
	// clock's ticks do; after that it is abandoned, with its buffers.
	deadline := time.NewTimer(shutdownWait)
	defer deadline.Stop()
	for _, g := range s.gpus {
		if g.scraping != nil {
			select {
			case <-g.scraping:
			case <-deadline.C:
				s.logger.Warn("shutting down with a GPU's scrape still in an NVML call: it is abandoned", zap.Int("gpu", g.index), zap.String("hw.id", g.id))
				g.tickAbandoned = true
			}
		}
		if !g.tickAbandoned {
			g.tick.free(s.lib)
		}
	}
	if slices.ContainsFunc(s.gpus, func(g *gpu) bool { return g.tickAbandoned }) {
		// nvmlShutdown under a call still in flight frees what that call
		// uses: NVML is left loaded, as the process is ending.
		s.lib = nil
		return nil
	}
	ret := s.lib.Shutdown()
	s.lib = nil
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlShutdown: %w", ret)
	}
	return nil
}

// scrape reads every GPU, each on a goroutine of its own into its own
// builder, and hands on what the GPUs read by the scrape's deadline
// (timeout): a GPU stuck in an NVML call, which cannot be cancelled, holds
// up neither the others nor the pipeline. It reports degraded, is not asked
// again while the call is in flight, and what it read once the call
// returns goes with the next scrape.
func (s *gpuScraper) scrape(ctx context.Context) (pmetric.Metrics, error) {
	if err := ctx.Err(); err != nil {
		return pmetric.NewMetrics(), scrapererror.NewPartialScrapeError(fmt.Errorf("scrape timed out before any GPU was read: %w", err), len(s.gpus))
	}
	now := s.now()
	if s.lookedAt.IsZero() {
		s.lookedAt = now // start looked already
	}
	s.lookForGPUs(now)
	alloc := s.allocation()
	mapping := s.readJobMapping()
	for _, g := range s.gpus {
		if g.scraping != nil {
			select {
			case <-g.scraping: // returned after the last deadline
				g.scraping = nil
			default:
				continue // still in its NVML call
			}
		}
		if g.scrapeStalled {
			g.scrapeStalled = false
			s.logger.Info("a stalled GPU's NVML calls returned: it is read again", zap.Int("gpu", g.index), zap.String("hw.id", g.id))
		}
		g.slurm.mapped = mapping[g.index]
		done := make(chan struct{})
		g.scraping, g.scrapeSince = done, now
		go func() {
			defer close(done)
			s.scrapeGPU(g, alloc)
		}()
	}
	var errs scrapererror.ScrapeErrors
	out := pmetric.NewMetrics()
	for _, g := range s.gpus {
		select {
		case <-g.scraping:
		case <-ctx.Done():
		}
		select { // a GPU done by the deadline is taken, whichever was seen first
		case <-g.scraping:
			g.scraping = nil
			for _, err := range g.scrapeErrs {
				errs.AddPartial(1, err)
			}
			g.scrapeErrs = g.scrapeErrs[:0]
			mergeMetrics(out, g.mb.Emit(metadata.WithResource(s.resource)))
		default:
			stalled := s.now().Sub(g.scrapeSince)
			errs.AddPartial(1, fmt.Errorf("GPU %d (%s): its NVML calls have not returned for %v: it reports degraded, and is read again once they do",
				g.index, g.id, stalled.Round(time.Millisecond)))
			if !g.scrapeStalled {
				g.scrapeStalled = true
				s.logger.Warn("a GPU's NVML calls have not returned within the scrape timeout: the other GPUs' data goes on without it, and it reports degraded until they do",
					zap.Int("gpu", g.index), zap.String("hw.id", g.id), zap.Duration("stalled", stalled))
			}
			s.recordStatus(s.mb, g, pcommon.NewTimestampFromTime(s.now()), metadata.AttributeHwStateDegraded)
		}
	}
	mergeMetrics(out, s.mb.Emit(metadata.WithResource(s.resource)))
	return out, errs.Combine()
}

// mergeMetrics moves the metrics of src into dst. Both come from builders
// of one configuration and resource: one resource, one scope, each metric
// once, so a metric of src joins dst's metric of the same name.
func mergeMetrics(dst, src pmetric.Metrics) {
	if src.ResourceMetrics().Len() == 0 {
		return
	}
	if dst.ResourceMetrics().Len() == 0 {
		src.ResourceMetrics().MoveAndAppendTo(dst.ResourceMetrics())
		return
	}
	into := dst.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	byName := make(map[string]pmetric.Metric, into.Len())
	for i := range into.Len() {
		byName[into.At(i).Name()] = into.At(i)
	}
	from := src.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range from.Len() {
		m := from.At(i)
		d, ok := byName[m.Name()]
		switch {
		case !ok:
			m.MoveTo(into.AppendEmpty())
		case m.Type() == pmetric.MetricTypeGauge:
			m.Gauge().DataPoints().MoveAndAppendTo(d.Gauge().DataPoints())
		case m.Type() == pmetric.MetricTypeSum:
			m.Sum().DataPoints().MoveAndAppendTo(d.Sum().DataPoints())
		}
	}
}

// scrapeGPU makes every reading of one GPU that is enabled and supported
// into the GPU's builder, then reports the GPU's state. A reading that
// fails costs only its own metrics; a lost GPU ends its own scrape, never
// the others'. A lost GPU gets a new handle first, in case a reset
// invalidated the old one.
func (s *gpuScraper) scrapeGPU(g *gpu, alloc podresources.Allocation) {
	errs := &g.scrapeErrs
	ts := pcommon.NewTimestampFromTime(s.now())
	g.health = metadata.AttributeHwStateOk
	wasLost := g.lost
	if wasLost {
		s.reacquire(g)
	}
	g.lost = false
	// This scrape's processes name its jobs: none when they are not read
	// (the GPU lost before, or the reading failing).
	g.slurm.jobs = g.slurm.jobs[:0]
	for r := range readingCount {
		if g.unsupported.has(r) || !r.enabled(s.cfg) {
			continue
		}
		ret := r.read(s, g, ts)
		switch {
		case ret == nvml.SUCCESS:
			continue
		case ret == nvml.ERROR_NOT_SUPPORTED:
			g.unsupported.add(r)
			s.logger.Info("GPU does not support a reading; it will not be asked again",
				zap.Int("gpu", g.index), zap.String("hw.id", g.id), zap.String("reading", r.String()))
			continue
		case gpuLost(ret):
			g.lost = true
			*errs = append(*errs, fmt.Errorf("GPU %d (%s) is lost (fallen off the bus, failed, or reset): %w", g.index, g.id, ret))
			if !wasLost {
				s.logger.Error("GPU lost: reporting hw.status failed until it answers again; the other GPUs are unaffected",
					zap.Int("gpu", g.index), zap.String("hw.id", g.id))
			}
		default:
			g.worsen(metadata.AttributeHwStateDegraded)
			*errs = append(*errs, fmt.Errorf("GPU %d (%s): reading %s: %w", g.index, g.id, r, ret))
			continue
		}
		break
	}
	if !s.cfg.Samples.Enabled && !g.lost {
		// Every scrape ends an interval, and with a point a scrape there is
		// no run to leave points out of.
		r := g.tick.read(s.lib, s.syms, ts.AsTime(), true)
		recordTick(g.mb, g, r, nil)
		if r.failed != nvml.SUCCESS {
			g.worsen(metadata.AttributeHwStateDegraded)
			*errs = append(*errs, fmt.Errorf("GPU %d (%s): fast readings: %w", g.index, g.id, r.failed))
		}
	}
	if g.tickStalled.Load() {
		g.worsen(metadata.AttributeHwStateDegraded)
	}
	s.recordGPMStatus(g, ts)
	g.mb.RecordNvidiaGpuInfoDataPoint(ts, 1, g.id, g.name, g.vendor, g.model, g.driver, int64(g.index), g.busID)
	s.recordAllocations(g, alloc, ts)
	s.recordSlurmJobs(g, ts)
	if g.xids.take(func(code uint64, n int64) {
		g.mb.RecordNvidiaGpuXidErrorsDataPoint(ts, n, g.id, g.name, int64(code))
	}) {
		g.worsen(metadata.AttributeHwStateDegraded)
	}
	if g.lost {
		g.worsen(metadata.AttributeHwStateFailed)
	} else if wasLost {
		s.logger.Info("GPU answers again", zap.Int("gpu", g.index), zap.String("hw.id", g.id))
	}
	s.recordStatus(g.mb, g, ts, g.health)
}

// recordStatus reports GPU g's hw.status as state into mb.
func (s *gpuScraper) recordStatus(mb *metadata.MetricsBuilder, g *gpu, ts pcommon.Timestamp, state metadata.AttributeHwState) {
	for _, st := range []metadata.AttributeHwState{metadata.AttributeHwStateOk, metadata.AttributeHwStateDegraded, metadata.AttributeHwStateFailed} {
		mb.RecordHwStatusDataPoint(ts, boolInt(st == state), g.id, g.name, g.vendor, g.model, g.driver, metadata.AttributeHwTypeGpu, st)
	}
}

// gpuLost says whether ret, from one of a GPU's own calls, means the whole
// GPU is gone: GPU_IS_LOST, or INVALID_ARGUMENT, which from a GPU's own
// calls is an invalid handle (after a reset): the next scrape takes a new
// one. Its other calls would answer the same.
func gpuLost(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_INVALID_ARGUMENT
}

// reacquire takes a new handle for lost GPU g: a reset invalidates the
// handles taken before it, and the GPU at the same index with the same
// UUID is the same GPU again. The tick takes the new handle up at its next
// read (tickState.follow).
func (s *gpuScraper) reacquire(g *gpu) {
	dev, ret := s.lib.DeviceGetHandleByIndex(g.index)
	if ret != nvml.SUCCESS || dev == g.dev {
		return
	}
	if uuid, ret := dev.GetUUID(); ret != nvml.SUCCESS || uuid != g.id {
		return // still gone, or another GPU took the index: the old handle stays
	}
	g.dev = dev
	g.handle.Store(&dev)
	if w := s.xid.Load(); w != nil {
		w.register(g, dev)
	}
	s.logger.Info("GPU has a new handle (it was reset, or its handle went invalid): reading it again",
		zap.Int("gpu", g.index), zap.String("hw.id", g.id))
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
		g.mb.RecordNvidiaGpuGpmStatusDataPoint(ts, boolInt(int32(st) == cur), g.id, g.name, attr)
	}
}
