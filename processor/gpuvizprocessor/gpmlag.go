package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// gpmLag learns how late one GPU's GPM readings describe it, and stamps
// them back. The receiver stamps a GPM reading at the tick that reads it,
// but on an H200 the reading describes the GPU 58-115 ms earlier
// (docs/hardware.md, "GPM readings lag"), so the first bins after a
// prompt's prefill still show its tensor work. The driver's power samples
// carry the driver's own timestamps. Where the GPU's power steps from one
// level to another and holds each (an edge), the activity readings must
// step at the same moment: the time the readings stamped after the edge
// still show the old level, less the time their first reading covers
// before the edge, is the lag. The lag is the median of the last
// gpmLagEdges edges' where they agree (never below 0, though an edge's may
// be, so that readings without a lag give one of 0 in the median; 0 until
// they first agree), and only the receiver's GPM readings of a GPU that
// sends power samples are moved.
type gpmLag struct {
	lag time.Duration
	// power is the recent power samples (Unix ns, W), each the mean over
	// the stretch since the one before; scanned up to scanned.
	power   []gpmPoint
	scanned int64
	// activity is the recent readings of tensor, DRAM and SM activity as
	// stamped, each describing the stretch since the one before.
	activity [3][]gpmPoint
	// edges is a ring of the latest edges' lags, ns; fromEdges once they
	// have agreed, after which the prefills' lag is not taken.
	edges     [gpmLagEdges]float64
	n         int
	fromEdges bool
	// prefills reads the lag from the spans' prefills, fed and taken
	// until the edges agree.
	prefills prefillLag
}

type gpmPoint struct {
	t int64
	v float64
}

// The activity series an edge is read in: the one that steps most.
const (
	gpmTensor = iota
	gpmDRAM
	gpmSM
)

const (
	// gpmLagMax is the largest lag believed, about three times the
	// H200's; gpmLagKeep how long samples and readings are kept for the
	// edges still to read, at most gpmLagPoints of each of the four
	// series: 16 B a point, 32 KiB a GPU (64 KiB with the slices' spare
	// capacity).
	gpmLagMax    = 300 * time.Millisecond
	gpmLagKeep   = 5 * time.Second
	gpmLagPoints = 512
	// An edge: power holds within gpmLagFlat of its step for gpmLagHold
	// either side, and steps by at least gpmLagMinStep W and a sixth of
	// the higher level; the activity that steps most must move by
	// gpmLagMinActivity, and its readings either side of the ones read
	// must hold their levels too (within gpmLagFlat of the step).
	gpmLagHold        = 300 * time.Millisecond
	gpmLagFlat        = 0.25
	gpmLagMinStep     = 80.0
	gpmLagMinActivity = 0.1
	gpmLagEdges       = 9
	// The lag is taken once gpmLagMinEdges edges are seen, and only while
	// the middle half of the latest agree within gpmLagAgree: edges where
	// the GPU did more than step once (busy serving) read lags all over.
	gpmLagMinEdges = 3
	gpmLagAgree    = 40 * time.Millisecond
)

// stamp is when a reading the receiver stamped at ts describes the GPU.
func (l *gpmLag) stamp(ts time.Time) time.Time { return ts.Add(-l.lag) }

// sampled keeps a power sample (W) at ts.
func (l *gpmLag) sampled(ts time.Time, w float64) { l.power = keep(l.power, ts.UnixNano(), w) }

// read keeps an activity reading of series s at ts, as stamped.
func (l *gpmLag) read(s int, ts time.Time, v float64) {
	l.activity[s] = keep(l.activity[s], ts.UnixNano(), v)
	if s == gpmTensor && !l.fromEdges { // the edges' lag is final
		l.prefills.read(ts.UnixNano(), v)
		if l.prefills.ok {
			l.lag = l.prefills.lag
		}
	}
}

// keep appends (t, v) to points in time order, dropping what is older
// than gpmLagKeep before the newest and beyond gpmLagPoints.
func keep(points []gpmPoint, t int64, v float64) []gpmPoint {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return points
	}
	i, found := search(points, t)
	if found {
		points[i].v = v
		return points
	}
	points = slices.Insert(points, i, gpmPoint{t, v})
	newest := points[len(points)-1].t
	drop := 0
	for drop < len(points) && (points[drop].t < newest-int64(gpmLagKeep) || len(points)-drop > gpmLagPoints) {
		drop++
	}
	if drop > 0 {
		points = append(points[:0], points[drop:]...)
	}
	return points
}

// learn reads the edges whose context has all arrived and updates the lag.
func (l *gpmLag) learn() {
	for j := 1; j < len(l.power); j++ {
		from := l.power[j-1].t
		if from <= l.scanned {
			continue
		}
		if from > l.power[len(l.power)-1].t-int64(gpmLagHold) {
			break // the level after it has not all come
		}
		if e, ok := l.powerEdge(j); ok {
			lag, ready, found := l.activityLag(e)
			if !ready {
				break // its readings have not all come: again next time
			}
			if found {
				l.edges[l.n%gpmLagEdges] = lag
				l.n++
			}
			// The level after an edge holds gpmLagHold: no other edge
			// lies there, and the next sample would read this one again.
			l.scanned = e + int64(gpmLagHold)
			continue
		}
		l.scanned = from
	}
	if l.n >= gpmLagMinEdges {
		recent := l.edges // a copy
		latest := recent[:min(l.n, gpmLagEdges)]
		slices.Sort(latest)
		k := len(latest)
		if latest[k*3/4]-latest[k/4] <= float64(gpmLagAgree) {
			l.lag = time.Duration(max(0, latest[k/2]))
			l.fromEdges = true
		}
	}
}

// powerEdge reports whether power steps during sample j's stretch and
// holds its level gpmLagHold either side, and when within the stretch
// (the share of it at the new level, from the sample's mean).
func (l *gpmLag) powerEdge(j int) (e int64, ok bool) {
	from, to := l.power[j-1].t, l.power[j].t
	if j+1 < len(l.power) && math.Abs(l.power[j+1].v-l.power[j-1].v) < gpmLagMinStep/2 {
		return 0, false // no step across the sample: the cheap test first
	}
	before, okB := l.level(from-int64(gpmLagHold), from)
	after, okA := l.level(to, to+int64(gpmLagHold))
	step := after - before
	if !okB || !okA || math.Abs(step) < max(gpmLagMinStep, max(before, after)/6) {
		return 0, false
	}
	if !l.flat(from-int64(gpmLagHold), from, before, step) || !l.flat(to, to+int64(gpmLagHold), after, step) {
		return 0, false
	}
	share := min(1, max(0, (l.power[j].v-before)/step)) // of the stretch at the new level
	return to - int64(share*float64(to-from)), true
}

// level is the mean power over (a, b]; false where samples do not cover
// it.
func (l *gpmLag) level(a, b int64) (float64, bool) {
	var sum, covered float64
	for j := 1; j < len(l.power); j++ {
		lo, hi := max(l.power[j-1].t, a), min(l.power[j].t, b)
		if hi > lo {
			sum += l.power[j].v * float64(hi-lo)
			covered += float64(hi - lo)
		}
	}
	if covered < 0.9*float64(b-a) {
		return 0, false
	}
	return sum / covered, true
}

// flat reports whether every sample over (a, b] lies within gpmLagFlat of
// the step from level.
func (l *gpmLag) flat(a, b int64, level, step float64) bool {
	for _, p := range l.power {
		if p.t > a && p.t <= b && math.Abs(p.v-level) > gpmLagFlat*math.Abs(step) {
			return false
		}
	}
	return true
}

// activityLag reads the lag at a power edge at e in the activity series
// that steps most across it: the time the readings stamped after e still
// show its level before, in ns, less the time the first of them covers
// before e at no lag. ready is false while a series lacks the readings
// past e's largest lag; found is false where no series steps, or the lag
// read is beyond belief.
func (l *gpmLag) activityLag(e int64) (lag float64, ready, found bool) {
	best, bestStep := -1, 0.0
	var bs, zs [3]int
	ready = true
	// A series without readings that far past e (one the GPU does not
	// send, or one holding a value) is not waited for.
	waited := l.power[len(l.power)-1].t-e > int64(gpmLagKeep)/2
	for s, a := range l.activity {
		// b: the last reading stamped by e (all of it before e, whatever
		// the lag); z: the first stamped one reading past e's largest lag.
		// The readings beside them must show the same levels: the GPU held
		// each for longer than the readings span.
		b, _ := search(a, e+1)
		b--
		if b < 1 {
			continue
		}
		if b+1 >= len(a) {
			ready = ready && waited
			continue
		}
		z, _ := search(a, e+int64(gpmLagMax)+(a[b+1].t-a[b].t))
		if z+1 >= len(a) {
			ready = ready && waited
			continue
		}
		step := a[z].v - a[b].v
		held := math.Abs(a[b-1].v-a[b].v) <= gpmLagFlat*math.Abs(step) && math.Abs(a[z+1].v-a[z].v) <= gpmLagFlat*math.Abs(step)
		if held && math.Abs(step) > bestStep {
			best, bestStep, bs[s], zs[s] = s, math.Abs(step), b, z
		}
	}
	if !ready || best < 0 || bestStep < gpmLagMinActivity {
		return 0, ready, false
	}
	a, b, z := l.activity[best], bs[best], zs[best]
	old, now := a[b].v, a[z].v
	var seen float64
	for j := b + 1; j <= z; j++ {
		share := (a[j].v - now) / (old - now) // of the reading at the old level
		if share < -gpmLagFlat || share > 1+gpmLagFlat {
			return 0, true, false // not one step: the GPU did something else too
		}
		seen += min(1, max(0, share)) * float64(a[j].t-a[j-1].t)
	}
	lag = seen - float64(e-a[b].t)
	if lag < -float64(gpmLagMax)/3 || lag > float64(gpmLagMax) {
		return 0, true, false
	}
	return lag, true, true
}

// search is the index of the first point at or after t, and whether it
// is at t.
func search(points []gpmPoint, t int64) (int, bool) {
	return slices.BinarySearchFunc(points, t, func(p gpmPoint, t int64) int { return cmp.Compare(p.t, t) })
}
