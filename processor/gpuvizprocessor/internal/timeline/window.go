package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"

import (
	"strconv"
	"time"
)

// firstSampleSpan is what a signal's first sample describes at most: NVML
// averages utilisation and power over about a second.
const firstSampleSpan = int64(time.Second)

// Stat summarises one signal over a window.
type Stat struct {
	// Mean and Max are the time-weighted mean and the max of the signal over
	// the part of the window it covered; 0 when it covered none.
	Mean, Max float64
	// Seconds is how much of the window the signal covered; 0 means the
	// signal says nothing about this window.
	Seconds float64
}

// EnergySource says where a window's energy came from.
type EnergySource uint8

// Energy sources, best first.
const (
	EnergyNone    EnergySource = iota // no energy known
	EnergyCounter                     // the hw.energy counter, interpolated
	EnergyPower                       // the integral of Power over its covered part
)

// String returns "none", "counter" or "power".
func (e EnergySource) String() string {
	switch e {
	case EnergyNone:
		return "none"
	case EnergyCounter:
		return "counter"
	case EnergyPower:
		return "power"
	}
	return "EnergySource(" + strconv.Itoa(int(e)) + ")"
}

// Window is what a GPU did during [From, To].
type Window struct {
	From, To time.Time
	// Coverage is the fraction of [From, To] covered by Utilization or Power
	// samples, whichever covers more, 0..1.
	Coverage     float64
	Stats        [NumSignals]Stat
	EnergyJ      float64 // energy drawn in the window
	EnergySource EnergySource
}

// Interval is a stretch of a window during which every signal of the GPU
// held one value.
type Interval struct {
	Start, End time.Time
	Values     [NumSignals]float64 // the value in effect, where Has
	Has        [NumSignals]bool    // false: the signal does not cover this interval
	EnergyJ    float64
	// EnergyKnown is false when neither a usable counter segment nor Power
	// covers the interval.
	EnergyKnown bool
}

// series is a reader's view of one ring: the points at or after the GPU's
// retention cutoff, each describing the stretch before it.
type series struct {
	r       *ring
	lo      int // first visible point
	maxSpan int64
}

func (s *Store) series(g *gpu, r *ring) series {
	v := series{r: r, maxSpan: s.maxSpan}
	// Usually nothing is past retention yet (the ring trims as it is
	// written); search only when something is.
	if cutoff := g.cutoff(s.retention); r.n > 0 && r.buf[r.head].ts < cutoff {
		v.lo = r.firstAtOrAfter(0, cutoff)
	}
	return v
}

// start returns where the stretch described by point i begins (exclusive).
// Points before lo are hidden but still the predecessors of the visible ones.
func (v *series) start(i int) int64 {
	ts := v.r.at(i).ts
	switch {
	case i > 0:
		return max(v.r.at(i-1).ts, sub(ts, v.maxSpan))
	case v.r.hasDropped:
		return max(v.r.dropped, sub(ts, v.maxSpan))
	}
	return sub(ts, min(v.maxSpan, firstSampleSpan))
}

// stat integrates the step function over [a, b]: the Stat, the covered
// nanoseconds and the integral in value·ns.
func (v *series) stat(a, b int64) (Stat, int64, float64) {
	var (
		covered  int64
		integral float64
		st       Stat
		seen     bool
	)
	for i := v.r.firstAfter(v.lo, a); i < v.r.n; i++ {
		start := v.start(i)
		if start >= b {
			break
		}
		p := v.r.at(i)
		ov := min(p.ts, b) - max(start, a)
		if ov <= 0 {
			continue
		}
		covered += ov
		integral += p.v * float64(ov)
		if !seen || p.v > st.Max {
			st.Max, seen = p.v, true
		}
	}
	if covered > 0 {
		st.Mean = integral / float64(covered)
		st.Seconds = float64(covered) / float64(time.Second)
	}
	return st, covered, integral
}

// counterEnergy returns E(b) − E(a) for a cumulative counter, interpolating
// linearly between its points; false unless points exist at or around both
// edges and the counter does not decrease in between.
func (v *series) counterEnergy(a, b int64) (float64, bool) {
	i := v.r.firstAfter(v.lo, a) - 1 // the last point at or before a
	if i < v.lo {
		return 0, false
	}
	var e float64
	for ; ; i++ {
		p := v.r.at(i)
		if p.ts >= b {
			return e, true
		}
		if i+1 >= v.r.n {
			return 0, false
		}
		q := v.r.at(i + 1)
		if q.v < p.v {
			return 0, false // reset: the segment is unknown
		}
		if ov := min(q.ts, b) - max(p.ts, a); ov > 0 {
			e += segmentEnergy(p, q, ov)
		}
	}
}

// segmentEnergy is the counter's increase over ov ns of the segment p→q.
// Computed from the segment's increase rather than as a difference of
// interpolated counter values: counters since driver load run to 1e9 J and
// more, and subtracting those would lose the small windows' precision.
func segmentEnergy(p, q *point, ov int64) float64 {
	d := q.ts - p.ts
	if ov == d {
		return q.v - p.v
	}
	return (q.v - p.v) * (float64(ov) / float64(d))
}

// Window summarises what GPU k did during [from, to]: see the package
// documentation. An unknown GPU or an empty window (to not after from) gives
// a Window with only From and To set.
func (s *Store) Window(k Key, from, to time.Time) Window {
	w := Window{From: from, To: to}
	a, b := clampNanos(from), clampNanos(to)
	if b <= a {
		return w
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.gpus[k]
	if g == nil {
		return w
	}
	var covered [NumSignals]int64
	var powerIntegral float64
	for sig := range NumSignals {
		v := s.series(g, &g.sig[sig])
		var integral float64
		w.Stats[sig], covered[sig], integral = v.stat(a, b)
		if sig == Power {
			powerIntegral = integral
		}
	}
	w.Coverage = min(1, float64(max(covered[Utilization], covered[Power]))/float64(b-a))
	ev := s.series(g, &g.energy)
	if e, ok := ev.counterEnergy(a, b); ok {
		w.EnergyJ, w.EnergySource = e, EnergyCounter
	} else if covered[Power] > 0 {
		w.EnergyJ, w.EnergySource = powerIntegral/float64(time.Second), EnergyPower
	}
	return w
}

// cursor walks a series during the Intervals sweep.
type cursor struct {
	series
	i         int   // the current point, r.n when past the last
	ts, begin int64 // its timestamp and where its stretch begins
	v         float64
}

func (c *cursor) seek(i int) {
	c.i = i
	if i < c.r.n {
		p := c.r.at(i)
		c.ts, c.v, c.begin = p.ts, p.v, c.start(i)
	}
}

// Intervals appends to dst the intervals of [from, to] that GPU k's samples
// describe, in time order, and returns it (pass dst[:0] to reuse it); Start
// and End are in UTC. The
// window is cut at every sample timestamp and stretch start of the GPU, so
// each signal is constant within an interval; stretches no signal and no
// usable counter segment covers are left out. See the package documentation
// for energy.
func (s *Store) Intervals(k Key, from, to time.Time, dst []Interval) []Interval {
	a, b := clampNanos(from), clampNanos(to)
	if b <= a {
		return dst
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.gpus[k]
	if g == nil {
		return dst
	}
	// One cursor per signal: the first point after the sweep's position t,
	// with the stretch it describes.
	var curs [NumSignals]cursor
	for sig := range NumSignals {
		c := &curs[sig]
		c.series = s.series(g, &g.sig[sig])
		c.seek(c.r.firstAfter(c.lo, a))
	}
	ev := s.series(g, &g.energy)
	ci := ev.r.firstAfter(ev.lo, a)

	for t := a; t < b; {
		end := b
		var iv Interval
		covered := false
		for sig := range NumSignals {
			c := &curs[sig]
			for c.i < c.r.n && c.ts <= t {
				c.seek(c.i + 1)
			}
			if c.i == c.r.n {
				continue
			}
			if c.begin <= t { // (t, …] lies in the point's stretch
				iv.Values[sig], iv.Has[sig], covered = c.v, true, true
				end = min(end, c.ts)
			} else {
				end = min(end, c.begin)
			}
		}
		for ci < ev.r.n && ev.r.at(ci).ts <= t {
			ci++
		}
		var p, q *point
		if ci < ev.r.n {
			q = ev.r.at(ci)
			end = min(end, q.ts)
			if ci > ev.lo {
				if p = ev.r.at(ci - 1); q.v < p.v {
					p = nil // reset: this segment is unknown
				}
			}
		}
		switch {
		case p != nil:
			iv.EnergyJ, iv.EnergyKnown = segmentEnergy(p, q, end-t), true
		case iv.Has[Power]:
			iv.EnergyJ, iv.EnergyKnown = iv.Values[Power]*float64(end-t)/float64(time.Second), true
		}
		if covered || iv.EnergyKnown {
			iv.Start, iv.End = fromNanos(t), fromNanos(end)
			dst = append(dst, iv)
		}
		t = end
	}
	return dst
}
