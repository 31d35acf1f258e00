package analysis // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"

import (
	"math"
	"strconv"
	"time"
)

// Signal identifies one of the per-GPU signals a [Tracker] analyses.
type Signal uint8

const (
	// Utilization is GPU utilisation as a fraction in 0..1.
	Utilization Signal = iota
	// MemoryUsed is framebuffer memory used as a fraction of total, 0..1.
	MemoryUsed
	// PCIe is PCIe throughput in bytes per second.
	PCIe
	// NumSignals is the number of signals; not a signal itself.
	NumSignals
)

// String returns "utilization", "memory" or "pcie".
func (s Signal) String() string {
	switch s {
	case Utilization:
		return "utilization"
	case MemoryUsed:
		return "memory"
	case PCIe:
		return "pcie"
	}
	return "signal(" + strconv.Itoa(int(s)) + ")"
}

// Pattern is a load-pattern label derived from utilisation.
type Pattern string

const (
	// PatternUnknown: fewer than MinPoints utilisation points in the window.
	PatternUnknown Pattern = "unknown"
	// PatternLow: mean utilisation below LowMean.
	PatternLow Pattern = "low"
	// PatternStableHigh: mean at/above HighMean and CV at/below StableCV.
	PatternStableHigh Pattern = "stable_high"
	// PatternFluctuating: CV at/above FluctuatingCV (mean not low).
	PatternFluctuating Pattern = "fluctuating"
	// PatternMedium: none of the above.
	PatternMedium Pattern = "medium"
)

// Patterns lists every Pattern, unknown first.
var Patterns = []Pattern{PatternUnknown, PatternLow, PatternStableHigh, PatternFluctuating, PatternMedium}

// flatRel is the relative standard-deviation floor below which a
// baseline counts as flat and is not scored: s <= flatRel*max(|mean|, 1).
const flatRel = 1e-9

// Tracker holds one GPU's analysis state. It is not safe for concurrent
// use; the caller locks.
type Tracker struct {
	cfg    Config
	window int64 // cfg.Window in nanoseconds
	series [NumSignals]series
}

// NewTracker returns a Tracker for one GPU. Zero-valued fields of cfg take
// their defaults; cfg should otherwise have passed [Config.Validate], and
// NewTracker panics if the result does not (a programming error).
// Rings are allocated lazily and grow up to cfg.MaxPoints.
func NewTracker(cfg Config) *Tracker {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		panic("analysis: invalid config: " + err.Error())
	}
	return &Tracker{cfg: cfg, window: int64(cfg.Window)}
}

// Observe adds a point and says whether it is anomalous against the window
// before it (so a spike does not dilute its own baseline), with its
// z-score. Points older than ts-Window are expired first. Points must
// come in time order per signal: a point strictly older than the newest
// one of its signal is ignored and returns (false, 0), as do a NaN or
// infinite value and an unknown signal. Until the window holds MinPoints
// points, and while its standard deviation is negligible (see the
// package documentation), the point is added but not scored: (false, 0).
func (t *Tracker) Observe(sig Signal, ts time.Time, v float64) (anomalous bool, z float64) {
	if sig >= NumSignals || math.IsNaN(v) || math.IsInf(v, 0) {
		return false, 0
	}
	s := &t.series[sig]
	now := ts.UnixNano()
	if s.seen && now < s.last {
		return false, 0
	}
	s.seen, s.last = true, now

	cutoff := int64(math.MinInt64)
	if now >= math.MinInt64+t.window {
		cutoff = now - t.window
	}
	for s.n > 0 && s.oldest().ts < cutoff {
		s.pop()
	}

	if s.n >= t.cfg.MinPoints {
		mean, sd := s.stats()
		if sd > flatRel*math.Max(math.Abs(mean), 1) {
			z = (v - mean) / sd
			anomalous = math.Abs(z) >= t.cfg.ZThreshold
		}
	}

	if s.n >= t.cfg.MaxPoints {
		s.pop()
	}
	s.push(point{ts: now, v: v}, t.cfg.MaxPoints)
	s.maybeRebuild()
	s.anomalous = anomalous
	return anomalous, z
}

// Anomalous reports whether the latest accepted point of sig was
// anomalous (for a gauge). It is false before any point and for an
// unknown signal.
func (t *Tracker) Anomalous(sig Signal) bool {
	if sig >= NumSignals {
		return false
	}
	return t.series[sig].anomalous
}

// Pattern labels the GPU's load from the utilisation window; see the
// package documentation for the rules and their order.
func (t *Tracker) Pattern() Pattern {
	s := &t.series[Utilization]
	if s.n < t.cfg.MinPoints {
		return PatternUnknown
	}
	mean, sd := s.stats()
	if mean < t.cfg.LowMean {
		return PatternLow
	}
	cv := sd / mean // mean >= LowMean > 0
	if mean >= t.cfg.HighMean && cv <= t.cfg.StableCV {
		return PatternStableHigh
	}
	if cv >= t.cfg.FluctuatingCV {
		return PatternFluctuating
	}
	return PatternMedium
}

// Stats returns the mean, sample standard deviation and number of points
// of sig's current window (including the latest point). The window is as
// of the latest accepted point of sig; it does not age by itself.
func (t *Tracker) Stats(sig Signal) (mean, stddev float64, n int) {
	if sig >= NumSignals {
		return 0, 0, 0
	}
	s := &t.series[sig]
	mean, stddev = s.stats()
	return mean, stddev, s.n
}
