package podresources // import "github.com/gpuviz/gpuviz/internal/podresources"

import (
	"sort"
	"sync"
	"time"
)

// History keeps the allocations the kubelet reported, each from the time it
// was first seen, so that something that happened at time t is matched
// against the allocation in effect then. Bounded: at most maxVersions
// versions, and none whose successor began before the horizon. Safe for
// concurrent use.
type History struct {
	mu          sync.RWMutex
	horizon     time.Duration
	maxVersions int
	versions    []version // oldest first
}

type version struct {
	from  time.Time
	alloc Allocation
}

// NewHistory returns an empty history.
func NewHistory(horizon time.Duration, maxVersions int) *History {
	return &History{horizon: horizon, maxVersions: max(1, maxVersions)}
}

// Observe records the allocation seen at t; it starts a new version only
// when it differs from the newest. It reports whether it did.
func (h *History) Observe(t time.Time, a Allocation) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.versions); n > 0 && (h.versions[n-1].alloc.Equal(a) || !t.After(h.versions[n-1].from)) {
		return false
	}
	h.versions = append(h.versions, version{from: t, alloc: a})
	// Drop versions superseded before the horizon, and the oldest past the
	// bound.
	drop := 0
	for drop < len(h.versions)-1 && h.versions[drop+1].from.Before(t.Add(-h.horizon)) {
		drop++
	}
	drop = max(drop, len(h.versions)-h.maxVersions)
	h.versions = append(h.versions[:0], h.versions[drop:]...)
	return true
}

// At returns the allocation in effect at t; ok is false when t is before
// anything the history knows.
func (h *History) At(t time.Time) (Allocation, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	i := sort.Search(len(h.versions), func(i int) bool { return h.versions[i].from.After(t) })
	if i == 0 {
		return nil, false
	}
	return h.versions[i-1].alloc, true
}

// Latest returns the newest allocation; ok is false before the first.
func (h *History) Latest() (Allocation, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if len(h.versions) == 0 {
		return nil, false
	}
	return h.versions[len(h.versions)-1].alloc, true
}

// Versions returns how many versions the history holds.
func (h *History) Versions() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.versions)
}
