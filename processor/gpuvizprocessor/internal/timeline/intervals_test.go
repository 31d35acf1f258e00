package timeline

// Intervals is the sweep the processor used before Bins: kept here, in the
// tests only, as an independent reference that cuts a window at every
// sample timestamp.

import "time"

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
	pw := curs[Power].series
	// The counter segment ending at point seg, and how it splits.
	seg, segShaped := -1, false
	var sp split

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
			if seg != ci {
				seg = ci
				sp, segShaped = pw.shape(p, q)
			}
			d := q.v - p.v
			switch {
			case (t == p.ts && end == q.ts) || d == 0:
				iv.EnergyJ = d
			case segShaped && t >= sp.last: // after Power's last point in the segment: its mean
				iv.EnergyJ = d * (sp.mean * float64(end-t) / sp.total)
			case segShaped && iv.Has[Power]: // Power covers the segment up to there, so the interval
				iv.EnergyJ = d * (iv.Values[Power] * float64(min(end, sp.last)-t) / sp.total)
			default:
				iv.EnergyJ = d * (float64(end-t) / float64(q.ts-p.ts))
			}
			iv.EnergyKnown = true
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
