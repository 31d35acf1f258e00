package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// defaultSampleInterval is the sampling clock's default tick: see
// docs/benchmarks.md for what it costs.
const defaultSampleInterval = 250 * time.Millisecond

// stallAfter is how long a GPU's tick may stay in its NVML calls before
// the GPU reports degraded (it misses ticks from the first one it is still
// busy at): at least a second, since without persistence mode a healthy
// driver can take that long, and so can the simulation computing its next
// episode.
func stallAfter(interval time.Duration) time.Duration { return max(interval, time.Second) }

// shutdownWait bounds how long Shutdown waits for a GPU's tick that is
// still in an NVML call: a cgo call cannot be cancelled, so after this the
// call is abandoned (and its buffers are left alone).
const shutdownWait = 2 * time.Second

// Tick outcomes, the receiver_gpuviz_ticks attribute.
var (
	outcomeRead    = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "read")))
	outcomeFailed  = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "failed")))
	outcomeMissed  = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "missed")))
	outcomeSkipped = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "skipped")))
)

// sampler is the sampling clock. Every samples.interval it asks each GPU's
// worker for a tick; workers read their GPUs concurrently, so a slow or
// hung NVML call on one GPU delays no other GPU, nor the clock, nor the
// scrape. Every flush_interval it hands what was read to the pipeline, on
// a goroutine of its own, so a slow pipeline does not stall the clock
// either: ticks then pile up to max_pending_ticks, after which they are
// skipped.
type sampler struct {
	cfg     SamplesConfig
	scraper *gpuScraper
	logger  *zap.Logger
	next    consumer.Metrics
	obs     *receiverhelper.ObsReport
	tel     *metadata.TelemetryBuilder
	// ticks makes the clock; tests replace it, and shorten wait.
	ticks func(time.Duration) (<-chan time.Time, func())
	wait  time.Duration

	// Owned by run.
	workers []*tickWorker
	ticked  int // ticks since start
	// unsent is the tick rounds dispatched since the last hand-on; pending
	// those not yet through the pipeline (an atomic: the flusher lowers it,
	// and the telemetry callback reads it).
	unsent  int64
	pending atomic.Int64

	// added brings the GPUs to tick, from the scraper: those found at
	// start and those found later (scraper.lookForGPUs).
	added   chan *gpu
	results chan tickResult
	flushes chan batch
	stop    chan struct{}
	running sync.WaitGroup // run and the flusher
	working sync.WaitGroup // the workers
}

// tickWorker reads one GPU when asked. busy, since, warned and ticks are
// run's.
type tickWorker struct {
	g        *gpu
	requests chan tickRequest
	busy     bool
	since    time.Time
	warned   bool
	ticks    *tickRecorder
}

type tickRequest struct {
	at    time.Time
	flush bool // the tick ends a flush interval
}

type tickResult struct {
	w *tickWorker
	r *tickReading
}

// batch is what one hand-on carries, and how many tick rounds it was.
type batch struct {
	md    pmetric.Metrics
	ticks int64
}

func newSampler(s *gpuScraper, set receiver.Settings, next consumer.Metrics) (*sampler, error) {
	obs, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{ReceiverID: set.ID, ReceiverCreateSettings: set})
	if err != nil {
		return nil, err
	}
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	sp := &sampler{
		cfg:     s.cfg.Samples,
		scraper: s,
		logger:  s.logger,
		next:    next,
		obs:     obs,
		tel:     tel,
		ticks: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
		wait:    shutdownWait,
		added:   make(chan *gpu, maxAddedGPUs),
		results: make(chan tickResult, maxAddedGPUs), // one outstanding result per worker: sends never block
	}
	for _, g := range s.gpus { // a scraper started already (tests)
		sp.added <- g
	}
	s.found = sp.add
	err = tel.RegisterReceiverGpuvizPendingTicksCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(sp.pending.Load())
		return nil
	})
	if err != nil {
		tel.Shutdown()
		return nil, err
	}
	return sp, nil
}

// maxAddedGPUs bounds the GPUs the clock ticks: NVML's device limit.
const maxAddedGPUs = 256

// add queues g for the clock. It never blocks the scrape.
func (sp *sampler) add(g *gpu) {
	select {
	case sp.added <- g:
	default:
		sp.logger.Error("the sampling clock ticks at most 256 GPUs: a GPU found beyond them is only scraped", zap.Int("gpu", g.index))
	}
}

// addWorkers starts a worker for each GPU queued.
func (sp *sampler) addWorkers() {
	for {
		select {
		case g := <-sp.added:
			sp.startWorker(g)
		default:
			return
		}
	}
}

func (sp *sampler) startWorker(g *gpu) {
	w := &tickWorker{g: g, requests: make(chan tickRequest, 1), ticks: newTickRecorder(g, sp.scraper.newBuilder())}
	sp.workers = append(sp.workers, w)
	sp.working.Add(1)
	go sp.work(w)
}

func (sp *sampler) start() {
	sp.flushes = make(chan batch, 1)
	sp.stop = make(chan struct{})
	sp.running.Add(2)
	go sp.run()
	go sp.flush()
}

// shutdown stops the clock, waits a bounded time for ticks in flight,
// and hands the last of the data on.
func (sp *sampler) shutdown(ctx context.Context) error {
	defer sp.tel.Shutdown()
	close(sp.stop)
	done := make(chan struct{})
	go func() {
		sp.running.Wait()
		waitAtMost(&sp.working, sp.wait)
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// The scrape side frees the GPUs' buffers and shuts NVML down next:
		// only once the clock has marked the calls still in flight
		// abandoned (finish, within sp.wait), or it would free them under
		// those calls.
		sp.running.Wait()
		return errors.Join(errors.New("gpuviz receiver: the last sampled data was not handed on before shutdown's deadline"), ctx.Err())
	}
}

func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (sp *sampler) work(w *tickWorker) {
	defer sp.working.Done()
	s := sp.scraper
	for {
		select {
		case <-sp.stop:
			// A tick asked before the stop is read: finish waits for it.
			select {
			case req := <-w.requests:
				sp.results <- tickResult{w, w.g.tick.read(s.lib, s.syms, req.at, req.flush)}
			default:
			}
			return
		case req := <-w.requests:
			sp.results <- tickResult{w, w.g.tick.read(s.lib, s.syms, req.at, req.flush)}
		}
	}
}

// ticksPerFlush is flush_interval in whole ticks.
func ticksPerFlush(c SamplesConfig) int {
	return max(1, int((c.FlushInterval+c.Interval/2)/c.Interval))
}

func (sp *sampler) run() {
	defer sp.running.Done()
	defer close(sp.flushes)
	tickC, stopTicks := sp.ticks(sp.cfg.Interval)
	defer stopTicks()
	perFlush := ticksPerFlush(sp.cfg)
	for {
		sp.addWorkers() // before any tick: a GPU found is ticked from the next one
		select {
		case <-sp.stop:
			sp.finish()
			return
		case res := <-sp.results:
			sp.record(res)
		case g := <-sp.added:
			sp.startWorker(g)
		case at := <-tickC:
			sp.ticked++
			flushTick := sp.ticked%perFlush == 0
			if flushTick {
				sp.handOn(false)
			}
			sp.dispatch(at, flushTick)
		}
	}
}

// dispatch asks every idle worker for a tick at the given time. A worker
// still in its previous tick misses this one; past stallAfter it is
// stalled, and its GPU reports degraded until the call returns.
func (sp *sampler) dispatch(at time.Time, flush bool) {
	ctx := context.Background()
	if sp.pending.Load() >= int64(sp.cfg.MaxPendingTicks) {
		sp.tel.ReceiverGpuvizTicks.Add(ctx, int64(len(sp.workers)), outcomeSkipped)
		return
	}
	sp.pending.Add(1)
	sp.unsent++
	for _, w := range sp.workers {
		if w.busy {
			sp.tel.ReceiverGpuvizTicks.Add(ctx, 1, outcomeMissed)
			if !w.warned && at.Sub(w.since) >= stallAfter(sp.cfg.Interval) {
				w.warned = true
				w.g.tickStalled.Store(true)
				sp.logger.Warn("a GPU's NVML calls have not returned: its ticks are skipped and it reports degraded until they do; the other GPUs are unaffected",
					zap.Int("gpu", w.g.index), zap.String("hw.id", w.g.id), zap.Duration("stalled", at.Sub(w.since)))
			}
			continue
		}
		w.busy, w.since = true, at
		w.requests <- tickRequest{at: at, flush: flush}
	}
}

func (sp *sampler) record(res tickResult) {
	w := res.w
	w.busy = false
	if w.warned {
		w.warned = false
		w.g.tickStalled.Store(false)
		sp.logger.Info("a stalled GPU's NVML calls returned: its ticks resume", zap.Int("gpu", w.g.index), zap.String("hw.id", w.g.id))
	}
	w.ticks.record(res.r)
	outcome := outcomeRead
	if res.r.failed != 0 {
		outcome = outcomeFailed
	}
	sp.tel.ReceiverGpuvizTicks.Add(context.Background(), 1, outcome)
}

// handOn gives what was recorded to the flusher. Unless wait is set, it
// does not block: while the flusher is behind, the builder keeps the
// points (and pending counts them against max_pending_ticks). With wait
// (the last hand-on) it hands on even with no round dispatched since the
// previous one: a tick of an earlier round may have returned since.
func (sp *sampler) handOn(wait bool) {
	if !wait && (sp.unsent == 0 || len(sp.flushes) == cap(sp.flushes)) {
		return // only run sends: a free slot stays free until it does
	}
	md := pmetric.NewMetrics()
	for _, w := range sp.workers {
		w.ticks.handOn(md, sp.scraper.resource)
	}
	sp.flushes <- batch{md: md, ticks: sp.unsent}
	sp.unsent = 0
}

// finish collects the ticks in flight, for a bounded time, and hands
// everything on. Ticks still in an NVML call then are abandoned.
func (sp *sampler) finish() {
	deadline := time.NewTimer(sp.wait)
	defer deadline.Stop()
	for sp.anyBusy() {
		select {
		case res := <-sp.results:
			sp.record(res)
		case <-deadline.C:
			for _, w := range sp.workers {
				if w.busy {
					w.g.tickAbandoned = true
					sp.logger.Warn("shutting down with a GPU's NVML call still in flight: it is abandoned",
						zap.Int("gpu", w.g.index), zap.String("hw.id", w.g.id))
				}
			}
			sp.handOn(true)
			return
		}
	}
	sp.handOn(true)
}

func (sp *sampler) anyBusy() bool {
	for _, w := range sp.workers {
		if w.busy {
			return true
		}
	}
	return false
}

// flush hands batches to the pipeline, one at a time.
func (sp *sampler) flush() {
	defer sp.running.Done()
	for b := range sp.flushes {
		if n := b.md.DataPointCount(); n > 0 { // every GPU missed: nothing to send
			ctx := sp.obs.StartMetricsOp(context.Background())
			err := sp.next.ConsumeMetrics(ctx, b.md)
			sp.obs.EndMetricsOp(ctx, metadata.Type.String(), n, err)
		}
		sp.pending.Add(-b.ticks)
	}
}

// sampledReceiver runs the sampling clock beside the scrape controller:
// started once the scrape has found the GPUs, stopped before it releases
// them.
type sampledReceiver struct {
	receiver.Metrics
	sampler *sampler
}

func (r *sampledReceiver) Start(ctx context.Context, host component.Host) error {
	if err := r.Metrics.Start(ctx, host); err != nil {
		return err
	}
	r.sampler.start()
	return nil
}

func (r *sampledReceiver) Shutdown(ctx context.Context) error {
	if r.sampler.stop == nil { // never started
		return r.Metrics.Shutdown(ctx)
	}
	return errors.Join(r.sampler.shutdown(ctx), r.Metrics.Shutdown(ctx))
}
