package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
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
	in := newIngest(store, an, tel, cfg.History.MaxSpan, cfg.History.AlignGPM)
	em := newEmitter(set, cfg, store, an, time.Now())
	c := &core{
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
// component started, so that Shutdown without Start is safe and the core's
// background work runs while any component is started.
type handle struct {
	core    *core
	started bool
}

func (h *handle) start(_ context.Context, host component.Host) error {
	c := h.core
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
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

func (h *handle) shutdown(context.Context) error {
	c := h.core
	c.lifeMu.Lock()
	var stop, done chan struct{}
	if h.started {
		h.started = false
		c.running--
		if c.running == 0 {
			stop, done = c.stop, c.done
			if v := c.spans.setView(nil); v != nil {
				defer v.detach()
			}
		}
	}
	c.users--
	last := c.users == 0
	c.lifeMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	if last {
		c.unregister()
		c.tel.b.Shutdown()
	}
	return nil
}

func (c *core) isRunning() bool {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	return c.running > 0
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
	c.spans.release(now, func(*heldBatch) bool { return false })
	expire := now.Sub(c.lastExpire) > time.Minute
	if expire {
		c.lastExpire = now
	}
	c.spans.finalize(now, expire)
}

// consumeTraces is the traces side: spans go to the span path, and where
// no release loop runs (not started, or stopped) the batch admitted is
// released at once.
func (c *core) consumeTraces(ctx context.Context, td ptrace.Traces, next consumer.Traces) error {
	now := c.now()
	b, err := c.spans.consume(ctx, td, next, now)
	if b != nil && !c.isRunning() {
		c.spans.release(now, func(x *heldBatch) bool { return x == b })
	}
	return err
}

// processMetrics is the metrics side: it learns the timeline from the GPU
// metrics passing through (which it never changes), hands the servers'
// running-request counts to the span path's books and, every
// metrics.interval, appends the derived metrics.
func (c *core) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	c.ingest.consume(ctx, md)
	if counts := engineCounts(md, nil); len(counts) > 0 {
		c.spans.matchEngines(ctx, counts)
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
