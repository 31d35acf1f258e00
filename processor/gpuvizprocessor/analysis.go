package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// analysisPoint is one timeline point the streaming analysis reads.
type analysisPoint struct {
	key timeline.Key
	sig timeline.Signal
	ts  time.Time
	v   float64
}

// gpuAnalysis runs the streaming analysis (anomalies, load pattern) per
// GPU on the points the timeline learned.
type gpuAnalysis struct {
	cfg     analysis.Config
	enabled bool

	mu   sync.Mutex
	gpus map[timeline.Key]*gpuTracker
}

type gpuTracker struct {
	tracker  *analysis.Tracker
	memUsed  float64
	memLimit float64
}

func newGPUAnalysis(enabled bool, cfg analysis.Config) *gpuAnalysis {
	return &gpuAnalysis{cfg: cfg, enabled: enabled, gpus: map[timeline.Key]*gpuTracker{}}
}

// wants reports whether the analysis reads signal sig.
func (a *gpuAnalysis) wants(sig timeline.Signal) bool {
	if !a.enabled {
		return false
	}
	switch sig {
	case timeline.Utilization, timeline.PCIeRx, timeline.MemoryUsed, timeline.MemoryLimit:
		return true
	}
	return false
}

// observe feeds a batch's points in time order per GPU: a batch carries
// the scrape-time point before the driver's older sub-second samples, and
// the tracker ignores points older than its newest.
func (a *gpuAnalysis) observe(points []analysisPoint) {
	if len(points) == 0 {
		return
	}
	slices.SortStableFunc(points, func(x, y analysisPoint) int {
		return cmp.Or(strings.Compare(x.key.Host, y.key.Host), strings.Compare(x.key.GPU, y.key.GPU), x.ts.Compare(y.ts))
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range points {
		g := a.gpus[p.key]
		if g == nil {
			g = &gpuTracker{tracker: analysis.NewTracker(a.cfg)}
			a.gpus[p.key] = g
		}
		switch p.sig {
		case timeline.MemoryUsed:
			g.memUsed = p.v
			if g.memLimit > 0 {
				g.tracker.Observe(analysis.MemoryUsed, p.ts, g.memUsed/g.memLimit)
			}
		case timeline.MemoryLimit:
			g.memLimit = p.v
		case timeline.Utilization:
			g.tracker.Observe(analysis.Utilization, p.ts, p.v)
		case timeline.PCIeRx:
			g.tracker.Observe(analysis.PCIe, p.ts, p.v)
		}
	}
}

// read calls f with each GPU's tracker that store still knows, dropping the
// others.
func (a *gpuAnalysis) read(store *timeline.Store, f func(timeline.Key, *analysis.Tracker)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, g := range a.gpus {
		if _, ok := store.Newest(k); !ok {
			delete(a.gpus, k)
			continue
		}
		f(k, g.tracker)
	}
}
