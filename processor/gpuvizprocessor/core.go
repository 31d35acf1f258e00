package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// releaseTick is how often held spans are checked for release and the
// books finalised: a fraction of any sensible collection interval, and
// cheap when nothing is held.
const releaseTick = 200 * time.Millisecond

// core wires what the traces and the metrics side of one gpuviz processor
// ID share, and runs their lifecycle. Data flows one way: metrics → ingest
// → timeline; spans → recognise → hold → match → pipeline → annotate →
// emitter (spanPath).
type core struct {
	cfg     *Config
	logger  *zap.Logger
	tel     telemetry
	ingest  *ingest
	emitter *emitter
	spans   *spanPath
	now     func() time.Time
	// ticker paces the release loop; tests that drive release themselves
	// on a virtual clock replace it with one that never fires.
	ticker     func() (<-chan time.Time, func())
	unregister func()
	id         component.ID
	// lastExpire is when tick last forgot quiet GPUs; tick's alone (the
	// loop's, or a test's that drives tick without one).
	lastExpire time.Time

	lifeMu  sync.Mutex
	users   int // components created on this core
	running int // components started and not yet shut down
	stop    chan struct{}
	done    chan struct{}
}

func newCore(set processor.Settings, cfg *Config, unregister func()) (*core, error) {
	recognizer, err := inference.NewRecognizer(cfg.recognizer())
	if err != nil {
		return nil, err
	}
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	tel := telemetry{b: tb}
	store := timeline.New(cfg.timeline())
	an := newGPUAnalysis(cfg.Analysis.Enabled, cfg.analysis())
	var c *core
	in := newIngest(store, an, tel, cfg, func() time.Time { return c.now() })
	em := newEmitter(set, cfg, store, an, time.Now())
	c = &core{
		cfg: cfg, logger: set.Logger, tel: tel, ingest: in, emitter: em,
		spans: newSpanPath(cfg, set.Logger, tel, store, recognizer, in, em),
		now:   time.Now, ticker: realTicker, unregister: unregister, id: set.ID,
	}
	if err := tel.register(gauges{gpus: store.Len, gpmLags: in.gpmLags, pendingSpans: c.spans.pending}); err != nil {
		return nil, err
	}
	return c, nil
}

// handle is one component's view of the core: it knows whether that
// component started and whether it shut down, so that Shutdown without
// Start, and Shutdown twice, are safe, and the core's background work runs
// while any component is started.
type handle struct {
	core    *core
	started bool // Start called, Shutdown not yet
	closed  bool // Shutdown called: this component no longer uses the core
}

var errStartAfterShutdown = errors.New("gpuviz processor: Start after Shutdown")

func (h *handle) start(_ context.Context, host component.Host) error {
	c := h.core
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if h.closed {
		return errStartAfterShutdown // the core may be gone: a restart creates a new component
	}
	if h.started {
		return nil
	}
	h.started = true
	c.running++
	if c.running == 1 {
		c.spans.setView(attachView(host, c.id, c.cfg.Attribution.Resolution, c.logger))
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.loop(c.stop, c.done)
	}
	return nil
}

// accepting reports whether the component is started and not shut down:
// only then does the core's loop release what it holds.
func (h *handle) accepting() bool {
	h.core.lifeMu.Lock()
	defer h.core.lifeMu.Unlock()
	return h.started
}

// shutdown is the metrics side's Shutdown.
func (h *handle) shutdown(context.Context) error { return h.close(nil) }

// close ends this component's use of the core, once. It stops accepting
// first and then runs flush (nil: nothing to flush): a batch admitted by a
// call still running sees accepting false and is released by that call,
// so none is left in a hold no loop releases. The last started component
// stops the loop; the last component lets go of the core.
func (h *handle) close(flush func() error) error {
	c := h.core
	c.lifeMu.Lock()
	if h.closed {
		c.lifeMu.Unlock()
		return nil
	}
	h.closed = true
	var stop, done chan struct{}
	var v *viewSink
	if h.started {
		h.started = false
		c.running--
		if c.running == 0 {
			stop, done = c.stop, c.done
			v = c.spans.setView(nil)
		}
	}
	c.users--
	last := c.users == 0
	c.lifeMu.Unlock()
	var err error
	if flush != nil {
		err = flush()
	}
	if stop != nil {
		close(stop)
		<-done
	}
	if v != nil {
		v.detach()
	}
	if last {
		c.unregister()
		c.tel.b.Shutdown()
	}
	return err
}

// loop runs tick until stopped.
func (c *core) loop(stop, done chan struct{}) {
	defer close(done)
	tick, stopTicker := c.ticker()
	defer stopTicker()
	for {
		select {
		case <-stop:
			return
		case <-tick:
			c.tick(c.now())
		}
	}
}

func realTicker() (<-chan time.Time, func()) {
	t := time.NewTicker(releaseTick)
	return t.C, t.Stop
}

// tick releases the held spans that are ready, finalises the books, and
// once a minute forgets GPUs that went quiet.
func (c *core) tick(now time.Time) {
	_ = c.spans.release(now, func(*heldBatch) bool { return false }) // nothing forced: refusals are counted
	expire := now.Sub(c.lastExpire) > time.Minute
	if expire {
		c.lastExpire = now
	}
	c.spans.finalize(now, expire)
}

// consumeTraces is the traces side: spans go to the span path, and where
// no release loop releases them for next (accepting false: its component
// not started, or shut down while this call ran) the batch admitted is
// released at once, and a refusal returned to the caller.
func (c *core) consumeTraces(ctx context.Context, td ptrace.Traces, next consumer.Traces, accepting func() bool) error {
	now := c.now()
	b, err := c.spans.consume(ctx, td, next, now)
	if b != nil && !accepting() {
		return c.spans.release(now, func(x *heldBatch) bool { return x == b })
	}
	return err
}

// processMetrics is the metrics side: it learns the timeline from the GPU
// metrics passing through (which it never changes), hands the servers'
// running-request counts to the span path's books (those stamped no later
// than the processor's clock allows a GPU point) and, every
// metrics.interval, appends the derived metrics.
func (c *core) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	c.ingest.consume(ctx, md)
	if counts := engineCounts(md, nil); len(counts) > 0 {
		c.spans.matchEngines(ctx, counts, c.now().Add(c.ingest.maxFuture))
	}
	if c.cfg.Metrics.Enabled {
		c.flushMetrics(ctx, md, c.now())
	}
	return md, nil
}

// flushMetrics appends the derived metrics to md when due at now.
func (c *core) flushMetrics(ctx context.Context, md pmetric.Metrics, now time.Time) {
	c.tel.flushed(ctx, c.emitter.flush(md, now, c.spans.books))
}
