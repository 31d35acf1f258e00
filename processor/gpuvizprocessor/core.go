package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/metadata"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// releaseTick is how often held spans are checked for release: a fraction
// of any sensible collection interval, and cheap when nothing is held.
const releaseTick = 200 * time.Millisecond

// core is what the traces and the metrics side of one gpuviz processor ID
// share: the GPU timeline, the span recogniser, the held spans and the
// derived metrics' state.
type core struct {
	cfg        *Config
	logger     *zap.Logger
	tel        *metadata.TelemetryBuilder
	store      *timeline.Store
	recognizer *inference.Recognizer
	thresholds bottleneck.Thresholds
	now        func() time.Time
	// ticker paces the release loop; tests that drive release themselves
	// on a virtual clock replace it with one that never fires.
	ticker     func() (<-chan time.Time, func())
	unregister func()

	derived *derived

	// ledgers remember, per GPU, the time whose energy requests released
	// earlier were given (see attribution.Ledger). Only the release path
	// touches them, under ledgerMu.
	ledgerMu sync.Mutex
	ledgers  map[timeline.Key]*attribution.Ledger

	mu      sync.Mutex
	users   int // components created on this core
	running int // components started and not yet shut down
	stop    chan struct{}
	done    chan struct{}
	held    []*heldBatch
	heldN   int // spans held
}

func newCore(set processor.Settings, cfg *Config, unregister func()) (*core, error) {
	recognizer, err := inference.NewRecognizer(cfg.recognizer())
	if err != nil {
		return nil, err
	}
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	c := &core{
		cfg:        cfg,
		logger:     set.Logger,
		tel:        tel,
		store:      timeline.New(cfg.timeline()),
		recognizer: recognizer,
		thresholds: cfg.thresholds(),
		now:        time.Now,
		ticker:     realTicker,
		unregister: unregister,
		ledgers:    map[timeline.Key]*attribution.Ledger{},
	}
	c.derived = newDerived(c)
	if err := tel.RegisterProcessorGpuvizGpusCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(int64(c.store.Len()))
		return nil
	}); err != nil {
		return nil, err
	}
	if err := tel.RegisterProcessorGpuvizPendingSpansCallback(func(_ context.Context, o metric.Int64Observer) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		o.Observe(int64(c.heldN))
		return nil
	}); err != nil {
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

func (h *handle) start(context.Context, component.Host) error {
	c := h.core
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.started {
		return nil
	}
	h.started = true
	c.running++
	if c.running == 1 {
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.loop(c.stop, c.done)
	}
	return nil
}

func (h *handle) shutdown(context.Context) error {
	c := h.core
	c.mu.Lock()
	var stop, done chan struct{}
	if h.started {
		h.started = false
		c.running--
		if c.running == 0 {
			stop, done = c.stop, c.done
		}
	}
	c.users--
	last := c.users == 0
	c.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	if last {
		c.unregister()
		c.tel.Shutdown()
	}
	return nil
}

// loop releases held spans whose GPU samples have arrived or whose wait is
// over, and forgets GPUs that went quiet.
func (c *core) loop(stop, done chan struct{}) {
	defer close(done)
	tick, stopTicker := c.ticker()
	defer stopTicker()
	lastExpire := c.now()
	for {
		select {
		case <-stop:
			return
		case <-tick:
			now := c.now()
			c.release(now, func(*heldBatch) bool { return false })
			if now.Sub(lastExpire) > time.Minute {
				c.store.Expire(now)
				c.forgetLedgers()
				lastExpire = now
			}
		}
	}
}

func realTicker() (<-chan time.Time, func()) {
	t := time.NewTicker(releaseTick)
	return t.C, t.Stop
}

// ledger returns GPU k's ledger; the caller holds ledgerMu.
func (c *core) ledger(k timeline.Key) *attribution.Ledger {
	l := c.ledgers[k]
	if l == nil {
		l = &attribution.Ledger{}
		c.ledgers[k] = l
	}
	return l
}

// forgetLedgers drops the ledgers of GPUs the timeline forgot, and the
// claims older than the history: bounded like the timeline itself.
func (c *core) forgetLedgers() {
	c.ledgerMu.Lock()
	defer c.ledgerMu.Unlock()
	for k, l := range c.ledgers {
		newest, ok := c.store.Newest(k)
		if !ok {
			delete(c.ledgers, k)
			continue
		}
		l.Forget(newest.Add(-c.cfg.History.Retention).UnixNano())
	}
}
