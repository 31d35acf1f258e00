package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"
)

// xidCounts counts a GPU's critical Xid errors by code. The watcher
// goroutine writes, the scraper reads.
type xidCounts struct {
	mu     sync.Mutex
	counts map[uint64]int64
	// fresh is set by a new Xid and cleared by the scrape that reports it.
	fresh bool
}

func (x *xidCounts) add(code uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.counts == nil {
		x.counts = map[uint64]int64{}
	}
	x.counts[code]++
	x.fresh = true
}

// take calls f for every code seen, and reports whether any arrived since
// the previous take.
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
	gpus   []*gpu
	logger *zap.Logger
	stop   chan struct{}
	done   chan struct{}
}

// startXidWatcher registers every GPU that supports critical Xid events
// and starts the watcher; it returns nil when no GPU could be registered.
func startXidWatcher(lib nvml.Interface, gpus []*gpu, logger *zap.Logger) *xidWatcher {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		logger.Warn("cannot create an NVML event set: Xid errors will not be counted", zap.Error(ret))
		return nil
	}
	w := &xidWatcher{lib: lib, set: set, logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
	for _, g := range gpus {
		types, ret := g.dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			logger.Info("GPU does not report Xid events", zap.Int("gpu", g.index), zap.String("hw.id", g.id))
			continue
		}
		if ret := g.dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			logger.Warn("cannot register for Xid events", zap.Int("gpu", g.index), zap.String("hw.id", g.id), zap.Error(ret))
			continue
		}
		w.gpus = append(w.gpus, g)
	}
	if len(w.gpus) == 0 {
		lib.EventSetFree(set)
		return nil
	}
	go w.run()
	return w
}

func (w *xidWatcher) run() {
	defer close(w.done)
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
		case nvml.ERROR_TIMEOUT:
		default:
			// A broken event set does not heal; the metrics say the rest.
			w.logger.Warn("waiting for Xid events failed: Xid errors are no longer counted", zap.Error(ret))
			return
		}
	}
}

func (w *xidWatcher) record(data nvml.EventData) {
	if data.EventType&nvml.EventTypeXidCriticalError == 0 {
		return
	}
	for _, g := range w.gpus {
		if g.dev == data.Device {
			g.xids.add(data.EventData)
			w.logger.Error("GPU reported a critical Xid error",
				zap.Int("gpu", g.index), zap.String("hw.id", g.id), zap.Uint64("xid", data.EventData),
				zap.String("meaning", xidMeaning(data.EventData)))
			return
		}
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
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error: the affected application was stopped",
	95:  "uncontained ECC error: the GPU needs a reset",
	119: "GSP RPC timeout",
	120: "GSP error",
}

func xidMeaning(code uint64) string {
	if m, ok := xidMeanings[code]; ok {
		return m
	}
	return "see NVIDIA's Xid catalog"
}
