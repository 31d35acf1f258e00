package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"

import (
	"slices"
	"time"
)

// maxNanos is the latest time the store represents (clampNanos saturates
// there).
const maxNanos = maxUnixSec * int64(time.Second)

// Bin is what GPU k's samples say about one fixed-width stretch of time.
type Bin struct {
	Integral [NumSignals]float64 // ∫ value dt over the covered part, value·seconds
	Covered  [NumSignals]float64 // seconds of the bin the signal covers
	Max      [NumSignals]float64 // max value over the covered part (0 when none)
	// Stretch is the longest stretch (seconds) a point covering the bin
	// describes: how far the reading behind the bin reaches (0 when none).
	Stretch [NumSignals]float64
	// ReadingPower is, for the signals whose readings the classifier
	// places within them (TensorActivity, DRAMActivity, PowerThrottled; 0
	// for the others), the mean Power over the stretches the signal's
	// points covering the bin describe, weighted by their overlap with it
	// (W; 0 where Power does not cover them): the bin's power as coarse as
	// that signal. Where Power is read finer (the driver's 20 ms samples
	// against 250 ms GPM ticks), the bin's own Power mean differs from it
	// by what the readings average away. Each signal has its own: a series
	// that holds one value keeps only the ends of the run (an idle GPU's
	// zero tensor activity), so one point may describe far longer than a
	// tick.
	ReadingPower [NumSignals]float64
	EnergyJ      float64
	// EnergyKnown says the whole bin's energy is known: usable counter
	// segments (no reset) cover it, else Power covers all of it. When false,
	// EnergyJ is what is known: the counter's share of the parts its usable
	// segments cover plus the Power integral over the parts of the rest Power
	// covers (a lower bound, up to a reading's noise), and EnergySource is
	// EnergyNone.
	EnergyKnown  bool
	EnergySource EnergySource // EnergyCounter or EnergyPower when known
}

// Bins appends to dst the n bins [from+i·width, from+(i+1)·width), i = 0..n−1,
// of GPU k, and returns it. An unknown GPU, or a width that is not positive,
// gives n zero bins; so do bins past the representable range (year 2262).
//
// Integral, Covered and Max follow the step functions as Window does, and
// the energy the rules of Window and Intervals: the counter, split inside a
// segment by Power where Power covers the segment, where the counter covers
// the bin; else the Power integral, where Power covers the whole bin; see
// Bin.EnergyKnown for the rest. Bins over whole counter segments add up to
// the counter's difference.
//
// It walks each series once, and the placed signals' (Bin.ReadingPower)
// once more beside Power: O(log n + points in range + n) per signal.
func (s *Store) Bins(k Key, from time.Time, width time.Duration, n int, dst []Bin) []Bin {
	if n <= 0 {
		return dst
	}
	base := len(dst)
	dst = slices.Grow(dst, n)[:base+n]
	bins := dst[base:]
	clear(bins)
	w := int64(width)
	if w <= 0 {
		return dst
	}
	a := clampNanos(from)
	if room := uint64(maxNanos) - uint64(a); uint64(n) > room/uint64(w) {
		bins = bins[:room/uint64(w)] // the rest end past maxNanos: zero
	}
	if len(bins) == 0 {
		return dst
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.gpus[k]
	if g == nil {
		return dst
	}
	for sig := range NumSignals {
		v := s.series(g, &g.sig[sig])
		v.bins(sig, a, w, bins)
	}
	ev := s.series(g, &g.energy)
	pw := s.series(g, &g.sig[Power])
	ev.energyBins(&pw, a, w, bins)
	if pw.r.n == 0 {
		return dst // no power: no reading power either
	}
	covered := make([]float64, len(bins))
	for _, sig := range placedSignals {
		v := s.series(g, &g.sig[sig])
		v.readingPower(sig, &pw, a, w, bins, covered)
	}
	return dst
}

// bins adds the signal's step function over the bins [a+i·w, a+(i+1)·w) to
// bins[i].Integral, Covered, Max and Stretch (in seconds): one pass over
// the points whose stretches overlap them, each visiting the bins it spans.
func (v *series) bins(sig Signal, a, w int64, bins []Bin) {
	r := v.r
	i := r.firstAfter(v.lo, a)
	if i == r.n {
		return
	}
	end := a + int64(len(bins))*w
	j, hi := 0, a+w // the current bin and its end
	for st := v.start(i); st < end; {
		p := r.at(i)
		x, y := max(st, a), min(p.ts, end) // x < y
		stretch := float64(p.ts-st) / float64(time.Second)
		for hi <= x {
			j++
			hi += w
		}
		for {
			if ov := min(y, hi) - max(x, hi-w); ov > 0 {
				b := &bins[j]
				if b.Covered[sig] == 0 || p.v > b.Max[sig] {
					b.Max[sig] = p.v
				}
				sec := float64(ov) / float64(time.Second)
				b.Covered[sig] += sec
				b.Integral[sig] += p.v * sec
				b.Stretch[sig] = max(b.Stretch[sig], stretch)
			}
			if hi >= y {
				break
			}
			j++
			hi += w
		}
		if i++; i == r.n {
			break
		}
		st = max(p.ts, sub(r.at(i).ts, v.maxSpan))
	}
}

// placedSignals are the signals Bin.ReadingPower is kept for.
var placedSignals = [...]Signal{TensorActivity, DRAMActivity, PowerThrottled}

// readingPower fills the bins' ReadingPower[sig]: for each of v's points
// that overlaps them, Power's mean over the stretch the point describes,
// where Power covers all of it, weighted by the point's overlap with each
// bin. covered (len(bins)) is scratch.
func (v *series) readingPower(sig Signal, pw *series, a, w int64, bins []Bin, covered []float64) {
	clear(covered) // ns of each bin weighed in
	r := v.r
	i := r.firstAfter(v.lo, a)
	if i == r.n || pw.r.n == 0 {
		return
	}
	end := a + int64(len(bins))*w
	power := prefixCursor{series: *pw}
	for st := v.start(i); st < end; {
		p := r.at(i)
		if in, cov := power.integrate(st, p.ts); cov == p.ts-st && cov > 0 {
			mean := in / float64(cov)
			x, y := max(st, a), min(p.ts, end)
			for j := (x - a) / w; j < int64(len(bins)) && a+j*w < y; j++ {
				lo, hi := max(x, a+j*w), min(y, a+(j+1)*w)
				if hi > lo {
					bins[j].ReadingPower[sig] += mean * float64(hi-lo)
					covered[j] += float64(hi - lo)
				}
			}
		}
		if i++; i == r.n {
			break
		}
		st = max(p.ts, sub(r.at(i).ts, v.maxSpan))
	}
	for j := range bins {
		if covered[j] > 0 {
			bins[j].ReadingPower[sig] /= covered[j]
		}
	}
}

// energyBins fills the bins' energy from the counter series v and the Power
// series pw.
// Each bin is cut at the counter's points; each piece takes the counter's
// share where its segment is usable, else the Power integral.
func (v *series) energyBins(pw *series, a, w int64, bins []Bin) {
	r := v.r
	ci := r.firstAfter(v.lo, a) // the first counter point after pos
	// Cursors over Power, each moving forward only: for the pieces, for the
	// bins the counter does not cover.
	pieces, whole := prefixCursor{series: *pw}, prefixCursor{series: *pw}
	seg, segShaped := -1, false
	var sp split
	for j := range bins {
		b := &bins[j]
		x := a + int64(j)*w
		y := x + w
		var counterJ, restPower float64 // restPower in W·ns
		all := true
		for pos := x; pos < y; {
			for ci < r.n && r.at(ci).ts <= pos {
				ci++
			}
			end := y
			usable := false
			if ci < r.n {
				end = min(y, r.at(ci).ts)
				usable = ci > v.lo && r.at(ci).v >= r.at(ci-1).v
			}
			if usable {
				p, q := r.at(ci-1), r.at(ci)
				d := q.v - p.v
				switch {
				case (pos == p.ts && end == q.ts) || d == 0:
					counterJ += d
				default:
					if seg != ci {
						seg = ci
						sp, segShaped = pw.shape(p, q)
					}
					if segShaped {
						var i float64
						if pos < sp.last {
							i, _ = pieces.integrate(pos, min(end, sp.last))
						}
						if end > sp.last {
							i += sp.mean * float64(end-max(pos, sp.last))
						}
						counterJ += d * (i / sp.total)
					} else {
						counterJ += d * (float64(end-pos) / float64(q.ts-p.ts))
					}
				}
			} else {
				all = false
				i, _ := pieces.integrate(pos, end)
				restPower += i
			}
			pos = end
		}
		if all {
			b.EnergyJ, b.EnergyKnown, b.EnergySource = counterJ, true, EnergyCounter
			continue
		}
		if i, cov := whole.integrate(x, y); cov == w {
			b.EnergyJ, b.EnergyKnown, b.EnergySource = i/float64(time.Second), true, EnergyPower
		} else {
			b.EnergyJ = counterJ + restPower/float64(time.Second)
		}
	}
}

// prefixCursor integrates a series over ranges that move forward in time,
// walking its points instead of searching for each edge.
type prefixCursor struct {
	series
	k      int
	placed bool
}

// seek returns firstAtOrAfter(lo, t); t must not be before the previous
// call's. The first call searches, the later ones walk.
func (c *prefixCursor) seek(t int64) int {
	if !c.placed {
		c.k, c.placed = c.r.firstAtOrAfter(c.lo, t), true
	}
	for c.k < c.r.n && c.r.at(c.k).ts < t {
		c.k++
	}
	return c.k
}

// integrate is series.integrate for a range not before the previous one's
// start.
func (c *prefixCursor) integrate(a, b int64) (float64, int64) {
	ka := c.seek(a)
	kb := ka
	for kb < c.r.n && c.r.at(kb).ts < b {
		kb++
	}
	return c.between(ka, a, kb, b)
}
