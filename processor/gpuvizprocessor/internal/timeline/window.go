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
	EnergyCounter                     // the hw.energy counter, split inside a segment by Power, else by time
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
func (v *series) start(i int) int64 { return v.r.start(i, v.maxSpan) }

// between integrates the step function over [a, b] given ka and kb, the
// firstAtOrAfter(lo, ·) indexes of a and b: the integral in value·ns and the
// covered ns. The partial stretches at the edges are multiplied out, the
// whole ones between are a difference of prefixes: O(1). Hidden points
// (before lo) never count.
func (v *series) between(ka int, a int64, kb int, b int64) (float64, int64) {
	r := v.r
	if ka == r.n {
		return 0, 0
	}
	p := r.at(ka)
	if ka == kb { // [a, b] inside p's stretch, or before it
		ov := b - max(v.start(ka), a) // b <= p.ts
		if ov <= 0 {
			return 0, 0
		}
		return p.v * float64(ov), ov
	}
	// p.ts < b: p's stretch from a (or its start) on, the points up to kb
	// whole, and kb's stretch up to b.
	cov := p.ts - max(v.start(ka), a)
	integral := p.v * float64(cov)
	if kb-1 > ka {
		m := r.at(kb - 1)
		integral += m.cum - p.cum
		cov += m.cov - p.cov
	}
	if kb < r.n {
		if ov := b - v.start(kb); ov > 0 { // start(kb) >= at(kb−1).ts >= a
			integral += r.at(kb).v * float64(ov)
			cov += ov
		}
	}
	return integral, cov
}

// edges returns the firstAtOrAfter(lo, ·) indexes of a and b, a <= b:
// O(log n + log(points in [a, b])).
func (v *series) edges(a, b int64) (int, int) {
	ka := v.r.firstAtOrAfter(v.lo, a)
	return ka, v.r.gallop(ka, b)
}

// integrate is between with the indexes searched for.
func (v *series) integrate(a, b int64) (float64, int64) {
	ka, kb := v.edges(a, b)
	return v.between(ka, a, kb, b)
}

// max returns the max of the step function over [a, b] given the edges'
// indexes (see between): O(points in the window / blockSize + blockSize);
// false when no stretch overlaps it.
func (v *series) max(ka int, a int64, kb int, b int64) (float64, bool) {
	r := v.r
	var (
		m    float64
		seen bool
	)
	i, j := ka, kb // the first point after a, the first after b
	if i < r.n && r.at(i).ts == a {
		i++
	}
	if j < r.n && r.at(j).ts == b {
		j++
	}
	if i < j { // every point in (a, b] covers part of it
		m, seen = r.rangeMax(i, j), true
	}
	if j < r.n && v.start(j) < b { // the first point after b, if its stretch reaches back
		if p := r.at(j); !seen || p.v > m {
			m, seen = p.v, true
		}
	}
	return m, seen
}

// split is how a counter segment p→q splits inside itself by Power (see
// shape).
type split struct {
	last  int64   // Power's last point at or before q
	mean  float64 // Power's mean over (p, last], W
	total float64 // the segment's weight: ∫ Power over (p, last] + mean × (q − last), W·ns
}

// shape says how the counter's segment p→q splits inside itself, v being the
// Power series: by Power where Power's points up to q cover the segment up
// to the last of them with a positive integral, the rest of it (at most
// MaxSpan) at their mean; else (false) linearly in time. Points after q do
// not count: a source sends the counter stamped at its read with the power
// samples up to just before it, and the samples after it a flush later, so
// the split is final once q has come, whenever a bin of the segment is read.
func (v *series) shape(p, q *point) (split, bool) {
	r := v.r
	i := r.firstAfter(v.lo, q.ts) - 1
	if i < v.lo {
		return split{}, false
	}
	last := r.at(i).ts
	if last <= p.ts || q.ts-last > v.maxSpan {
		return split{}, false
	}
	in, c := v.integrate(p.ts, last)
	if c != last-p.ts || !(in > 0) {
		return split{}, false
	}
	mean := in / float64(c)
	return split{last: last, mean: mean, total: in + mean*float64(q.ts-last)}, true
}

// weight is the part of sp.total over [x, y] ⊂ [p.ts, q.ts].
func (v *series) weight(sp split, x, y int64) float64 {
	var w float64
	if x < sp.last {
		w, _ = v.integrate(x, min(y, sp.last))
	}
	if y > sp.last {
		w += sp.mean * float64(y-max(x, sp.last))
	}
	return w
}

// share is the counter's increase over [x, y] ⊂ [p.ts, q.ts] of the segment
// p→q, v being the Power series (see shape). The whole segment gets exactly
// q.v − p.v. Computed from the segment's increase rather than as a
// difference of interpolated counter values: counters since driver load run
// to 1e9 J and more, and subtracting those would lose the small windows'
// precision.
func (v *series) share(p, q *point, x, y int64) float64 {
	d := q.v - p.v
	if (x <= p.ts && y >= q.ts) || d == 0 {
		return d
	}
	if sp, ok := v.shape(p, q); ok {
		return d * (v.weight(sp, x, y) / sp.total)
	}
	return d * (float64(y-x) / float64(q.ts-p.ts))
}

// counterEnergy returns the counter's increase over [a, b], each segment
// split by Power where it can be (see share); false unless points exist at
// or around both edges and the counter does not decrease in between. The
// whole segments inside are one difference of counter values, the partial
// ones at the edges two shares: O(log n).
func (v *series) counterEnergy(a, b int64, pw *series) (float64, bool) {
	r := v.r
	pa := r.firstAfter(v.lo, a) - 1 // the last point at or before a
	if pa < v.lo {
		return 0, false
	}
	pb := r.gallop(pa+1, b) // the first point at or after b
	if pb == r.n || r.at(pb).cov != r.at(pa).cov {
		return 0, false // past the counter, or a reset in between
	}
	if pb == pa+1 {
		return pw.share(r.at(pa), r.at(pb), a, b), true
	}
	l, m := r.at(pa+1), r.at(pb-1) // the first point after a, the last before b
	return pw.share(r.at(pa), l, a, l.ts) + (m.v - l.v) + pw.share(m, r.at(pb), m.ts, b), true
}

// Window summarises what GPU k did during [from, to]: see the package
// documentation. An unknown GPU or an empty window (to not after from) gives
// a Window with only From and To set.
//
// Means, seconds, coverage and energy cost O(log n) per signal, from the
// rings' prefix sums; Stat.Max reads one block maximum per 32 points inside
// the window and scans the points of the blocks at its edges.
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
		if v.r.n == 0 {
			continue
		}
		ka, kb := v.edges(a, b)
		integral, cov := v.between(ka, a, kb, b)
		if cov <= 0 {
			continue
		}
		st := &w.Stats[sig]
		st.Mean = integral / float64(cov)
		st.Seconds = float64(cov) / float64(time.Second)
		st.Max, _ = v.max(ka, a, kb, b)
		covered[sig] = cov
		if sig == Power {
			powerIntegral = integral
		}
	}
	w.Coverage = min(1, float64(max(covered[Utilization], covered[Power]))/float64(b-a))
	ev := s.series(g, &g.energy)
	pw := s.series(g, &g.sig[Power])
	if e, ok := ev.counterEnergy(a, b, &pw); ok {
		w.EnergyJ, w.EnergySource = e, EnergyCounter
	} else if covered[Power] > 0 {
		w.EnergyJ, w.EnergySource = powerIntegral/float64(time.Second), EnergyPower
	}
	return w
}
