package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"
)

// xidCounts counts a GPU's critical Xid errors by code. The watcher
// goroutine writes, the scraper reads.
type xidCounts struct {
	mu     sync.Mutex
	counts map[uint64]int64
	// fresh is set by a new Xid of the hardware's (not an application's,
	// applicationXid) and cleared by the scrape that reports it: it
	// degrades the GPU's hw.status.
	fresh bool
	// logged is when an Xid was last logged, unlogged how many arrived
	// since: a storm of Xids is logged at most once per xidLogEvery.
	logged   time.Time
	unlogged int64
}

// xidLogEvery bounds the log lines of an Xid storm on one GPU; the counts
// miss none.
const xidLogEvery = 10 * time.Second

// add counts an Xid arriving at now. It reports whether to log it, and how
// many arrived since the last one logged.
func (x *xidCounts) add(code uint64, now time.Time) (unlogged int64, log bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.counts == nil {
		x.counts = map[uint64]int64{}
	}
	x.counts[code]++
	if !applicationXid(code) {
		x.fresh = true
	}
	if now.Sub(x.logged) < xidLogEvery {
		x.unlogged++
		return 0, false
	}
	unlogged, x.logged, x.unlogged = x.unlogged, now, 0
	return unlogged, true
}

// take calls f for every code seen, and reports whether any Xid of the
// hardware's arrived since the previous take.
func (x *xidCounts) take(f func(code uint64, n int64)) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for code, n := range x.counts {
		f(code, n)
	}
	fresh := x.fresh
	x.fresh = false
	return fresh
}

// xidWaitMs bounds one EventSetWait: it is how long shutdown may wait for
// the watcher.
const xidWaitMs = 500

// xidWatcher waits on an NVML event set for critical Xid errors of the
// GPUs it registered, counts them and logs each with what it means.
type xidWatcher struct {
	lib    nvml.Interface
	set    nvml.EventSet
	logger *zap.Logger
	stop   chan struct{}
	done   chan struct{}

	// byHandle finds the GPU an event is for: the scrape registers a GPU's
	// new handle after a reset while the watcher reads.
	mu       sync.Mutex
	byHandle map[nvml.Device]*gpu
}

// startXidWatcher registers every GPU that supports critical Xid events
// and starts the watcher; it returns nil when no GPU could be registered.
func startXidWatcher(lib nvml.Interface, gpus []*gpu, logger *zap.Logger) *xidWatcher {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		logger.Warn("cannot create an NVML event set: Xid errors will not be counted", zap.Error(ret))
		return nil
	}
	w := &xidWatcher{lib: lib, set: set, logger: logger, stop: make(chan struct{}), done: make(chan struct{}), byHandle: map[nvml.Device]*gpu{}}
	for _, g := range gpus {
		w.register(g, g.dev)
	}
	if len(w.byHandle) == 0 {
		lib.EventSetFree(set)
		return nil
	}
	go w.run()
	return w
}

// register asks for GPU g's critical Xid events on handle dev, in place of
// any handle registered for it before.
func (w *xidWatcher) register(g *gpu, dev nvml.Device) {
	logger := w.logger.With(zap.Int("gpu", g.index), zap.String("hw.id", g.id))
	types, ret := dev.GetSupportedEventTypes()
	if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
		logger.Info("GPU does not report Xid events")
		return
	}
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, w.set); ret != nvml.SUCCESS {
		logger.Warn("cannot register for Xid events", zap.Error(ret))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for h, other := range w.byHandle {
		if other == g {
			delete(w.byHandle, h)
		}
	}
	w.byHandle[dev] = g
}

func (w *xidWatcher) run() {
	defer close(w.done)
	lostSaid, failSaid := false, false
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		data, ret := w.lib.EventSetWait(w.set, xidWaitMs)
		switch ret {
		case nvml.SUCCESS:
			w.record(data)
			continue
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			// One GPU fell off the bus (Xid 79): the others' events still
			// come, and are what matters most now.
			if !lostSaid {
				lostSaid = true
				w.logger.Warn("waiting for Xid events: a GPU is lost; the others' are still counted", zap.Error(ret))
			}
		default:
			// NVIDIA's device plugin waits on through such errors too: a
			// driver that fails a wait may answer the next.
			if !failSaid {
				failSaid = true
				w.logger.Warn("waiting for Xid events failed; waiting on: Xids may be missed while it fails", zap.Error(ret))
			}
		}
		// Waited out, so that a set that keeps failing is not asked in a
		// busy loop.
		select {
		case <-w.stop:
			return
		case <-time.After(xidWaitMs * time.Millisecond):
		}
	}
}

func (w *xidWatcher) record(data nvml.EventData) {
	if data.EventType&nvml.EventTypeXidCriticalError == 0 {
		return
	}
	w.mu.Lock()
	g := w.byHandle[data.Device]
	w.mu.Unlock()
	if g != nil {
		if since, ok := g.xids.add(data.EventData, time.Now()); ok {
			w.logger.Error("GPU reported a critical Xid error",
				zap.Int("gpu", g.index), zap.String("hw.id", g.id), zap.Uint64("xid", data.EventData),
				zap.String("meaning", xidMeaning(data.EventData)), zap.Int64("unlogged_since_last", since))
		}
		return
	}
	w.logger.Error("a GPU the receiver does not read reported a critical Xid error",
		zap.Uint64("xid", data.EventData), zap.String("meaning", xidMeaning(data.EventData)))
}

// shutdown stops the watcher, waiting at most one event wait, and frees
// the event set.
func (w *xidWatcher) shutdown() {
	close(w.stop)
	<-w.done
	w.lib.EventSetFree(w.set)
}

// xidMeanings are the Xids an operator of inference servers meets most,
// from NVIDIA's Xid catalog.
var xidMeanings = map[uint64]string{
	13:  "graphics engine exception (often an application fault, e.g. out-of-range memory access)",
	31:  "GPU memory page fault (usually an application bug)",
	43:  "GPU stopped processing (a kernel was killed)",
	45:  "preemptive cleanup after a previous error or process termination",
	48:  "double-bit ECC error: the GPU needs a reset",
	61:  "internal micro-controller breakpoint/warning",
	62:  "internal micro-controller halt: the GPU needs a reset",
	63:  "ECC page retirement or row-remapping recorded",
	64:  "ECC page retirement or row-remapping failed",
	68:  "video processor exception (usually an application fault)",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error: the affected application was stopped",
	95:  "uncontained ECC error: the GPU needs a reset",
	109: "context switch timeout (usually an application fault)",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// applicationXid says whether Xid code is an application's error, not the
// GPU's: it is counted and logged, but leaves the GPU's hw.status ok. The
// list is the one NVIDIA's k8s-device-plugin skips in its health check
// (internal/rm/health.go, "Application errors: the GPU should still be
// healthy"): a kernel's bad memory access (13, 31), a killed context (43),
// the cleanup after one (45), a video decoder's exception (68), a context
// switch timeout (109).
func applicationXid(code uint64) bool {
	switch code {
	case 13, 31, 43, 45, 68, 109:
		return true
	}
	return false
}

func xidMeaning(code uint64) string {
	if m, ok := xidMeanings[code]; ok {
		return m
	}
	return "see NVIDIA's Xid catalog"
}
