package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"math"
	"time"
)

// prefillLag learns how late one GPU's GPM readings describe it from the
// spans' clock rather than power's: a prompt's prefill is tensor work, so
// the GPU's tensor activity rises with the prompt tokens its spans say it
// prefilled. For each candidate lag it correlates each tensor reading's
// change from the one before with the change of the prompt tokens per
// second whose prefill windows overlap the readings' stretches moved back
// by that lag; the lag is where the correlation peaks, once enough
// readings have been read and the peak stands out. It reads the lag where
// power's edges never come (an engine waiting for its host in gaps
// shorter than an edge's levels) and sooner in busy serving
// (docs/accuracy.md, "The GPM lag from the spans' prefills").
type prefillLag struct {
	// tokens is a ring of the prompt tokens prefilled per prefillCell,
	// over the cells (front-prefillCells, front]; nil until a prefill
	// comes.
	tokens []float32
	front  int64
	// readings are tensor readings as stamped (each the mean over the
	// stretch since the one before), waiting until the spans overlapping
	// them have come (prefillSettle); last is the last one read, where the
	// next one's stretch starts.
	readings []gpmPoint
	last     gpmPoint
	// The correlation's sums over the readings of this epoch (cur) and the
	// one before (prev): the lag is read from both, so one prefill whose
	// tokens are far out of line with its time (a long prompt mostly
	// served from the prefix cache) outweighs the rest for two epochs,
	// not for good.
	cur, prev correlationSums
	// x is the last reading's tokens per second per candidate lag, hasX
	// whether it is the one before the next (no gap between them).
	x    [prefillLags]float64
	hasX bool
	lag  time.Duration
	ok   bool
}

const (
	// prefillCell is the resolution of the prompt tokens' ring;
	// prefillCells of them cover prefillSettle, prefillFuture for spans
	// whose prefill lies past the newest reading, a reading's longest
	// stretch and gpmLagMax: 12 KB a GPU, with the readings waiting (at
	// most gpmLagPoints, 16 KiB with spare capacity) and the sums under
	// 30 KiB.
	prefillCell   = 10 * time.Millisecond
	prefillCells  = 3000
	prefillFuture = 10 * time.Second
	// prefillSettle is how old a reading is when it is read: by then the
	// spans of all but the longest requests overlapping it have come.
	prefillSettle = 15 * time.Second
	// Candidate lags: 0 to gpmLagMax every prefillLagStep.
	prefillLagStep = 5 * time.Millisecond
	prefillLags    = int(gpmLagMax/prefillLagStep) + 1
	// prefillMaxGap: a reading whose stretch is longer (a gap in the
	// readings) is not read.
	prefillMaxGap = 2 * time.Second
)

// correlationSums are the sums over readings of dy (the change of tensor
// activity from the reading before) and, per candidate lag, of dx (the
// change of the prompt tokens per second under them).
type correlationSums struct {
	n, sy, syy   float64
	sx, sxx, sxy [prefillLags]float64
}

// add is s and o summed.
func (s correlationSums) add(o *correlationSums) correlationSums {
	s.n, s.sy, s.syy = s.n+o.n, s.sy+o.sy, s.syy+o.syy
	for i := range prefillLags {
		s.sx[i] += o.sx[i]
		s.sxx[i] += o.sxx[i]
		s.sxy[i] += o.sxy[i]
	}
	return s
}

// prefillSpread is a prefill's prompt tokens per prefillCell, from cell
// first, its window ending at end (Unix ns): spread once for all of a
// span's GPUs.
type prefillSpread struct {
	first, end int64
	tokens     []float32
}

// spreadPrefill spreads a prefill's prompt tokens evenly over its window
// [start, end) (Unix ns) into buf's cells; empty where there is nothing to
// spread, or the window is longer than the ring.
func spreadPrefill(start, end int64, tokens float64, buf []float32) prefillSpread {
	if end <= start || end-start >= prefillCells*int64(prefillCell) || !(tokens > 0) || math.IsInf(tokens, 0) {
		return prefillSpread{}
	}
	cell := int64(prefillCell)
	sp := prefillSpread{first: floorDiv(start, cell), end: end, tokens: buf[:0]}
	perNs := tokens / float64(end-start)
	for c := sp.first; c*cell < end; c++ {
		lo, hi := max(start, c*cell), min(end, (c+1)*cell)
		sp.tokens = append(sp.tokens, float32(perNs*float64(hi-lo)))
	}
	return sp
}

// prefilled adds a prefill's tokens. Prefills before the first reading,
// older than the ring or farther ahead of the readings than a clock's
// skew are not kept.
func (l *prefillLag) prefilled(sp prefillSpread) {
	// The newest reading is never read yet (prefillSettle), so it is the
	// last one waiting.
	if len(sp.tokens) == 0 || len(l.readings) == 0 {
		return
	}
	newest := l.readings[len(l.readings)-1].t
	if sp.end > newest+int64(prefillFuture) {
		return
	}
	if l.tokens == nil {
		l.tokens = make([]float32, prefillCells)
		l.front = floorDiv(newest, int64(prefillCell))
	}
	l.advance(sp.first + int64(len(sp.tokens)) - 1)
	if sp.first <= l.front-prefillCells {
		return
	}
	i := mod(sp.first, prefillCells)
	for _, v := range sp.tokens {
		l.tokens[i] += v
		if i++; i == prefillCells {
			i = 0
		}
	}
}

// advance moves the ring's front to cell c, clearing the cells it passes.
func (l *prefillLag) advance(c int64) {
	if c <= l.front {
		return
	}
	for x := max(l.front+1, c-prefillCells+1); x <= c; x++ {
		l.tokens[mod(x, prefillCells)] = 0
	}
	l.front = c
}

// read keeps a tensor reading stamped at t (Unix ns), reads those now old
// enough, and updates the lag.
func (l *prefillLag) read(t int64, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if k := len(l.readings); k > 0 && t <= l.readings[k-1].t {
		return // out of order: the ring has moved on
	}
	l.readings = append(l.readings, gpmPoint{t, v})
	if l.tokens != nil {
		l.advance(floorDiv(t, int64(prefillCell)))
	}
	read := 0
	for ; read < len(l.readings) && l.readings[read].t <= t-int64(prefillSettle); read++ {
		l.correlate(l.readings[read])
	}
	if read > 0 {
		l.readings = append(l.readings[:0], l.readings[read:]...)
		l.solve()
	}
	if len(l.readings) > gpmLagPoints { // readings far denser than any tick's
		l.readings = append(l.readings[:0], l.readings[len(l.readings)-gpmLagPoints:]...)
	}
}

// correlate adds a reading to the sums: its change from the reading
// before against the change of the tokens per second under them, so that
// load that moves slower than the readings (bursts of seconds), which
// follows the tokens at every lag, leaves the peak standing out.
func (l *prefillLag) correlate(r gpmPoint) {
	from, prev := l.last.t, l.last.v
	l.last = r
	valid := l.hasX
	l.hasX = false
	if from == 0 || r.t-from > int64(prefillMaxGap) || l.tokens == nil {
		return
	}
	// The ring must hold the stretch at every lag.
	if floorDiv(from-int64(gpmLagMax), int64(prefillCell)) <= l.front-prefillCells {
		return
	}
	secs := float64(r.t-from) / 1e9
	dy := r.v - prev
	c := &l.cur
	if valid {
		if c.n == prefillEpoch {
			l.prev, l.cur = l.cur, correlationSums{}
		}
		c.n++
		c.sy += dy
		c.syy += dy * dy
	}
	for i := range prefillLags {
		d := int64(i) * int64(prefillLagStep)
		x := l.sum(from-d, r.t-d) / secs
		if valid {
			dx := x - l.x[i]
			c.sx[i] += dx
			c.sxx[i] += dx * dx
			c.sxy[i] += dx * dy
		}
		l.x[i] = x
	}
	l.hasX = true
}

// sum is the prompt tokens prefilled over [a, b), the cells at its ends
// taken in proportion.
func (l *prefillLag) sum(a, b int64) float64 {
	cell := int64(prefillCell)
	var s float64
	for c := floorDiv(a, cell); c*cell < b; c++ {
		lo, hi := max(a, c*cell), min(b, (c+1)*cell)
		s += float64(l.tokens[mod(c, prefillCells)]) * float64(hi-lo) / float64(cell)
	}
	return s
}

const (
	// prefillMinReadings is how many readings the lag needs: a minute
	// of a 250 ms tick's.
	prefillMinReadings = 240
	// prefillEpoch is how many readings an epoch of the sums has: 10
	// minutes of a 250 ms tick's, 40 of a 1 s tick's (which needs about
	// 1,100 readings for its peak to stand out).
	prefillEpoch = 2400
	// prefillMinCorrelation: the correlation at the peak must be at least
	// this, and stand at least prefillContrast above the weakest
	// candidate's (short prefills inside long readings leave it flat).
	prefillMinCorrelation = 0.5
	prefillContrast       = 0.1
)

// solve takes the lag where the correlation peaks, where it is clear.
func (l *prefillLag) solve() {
	sums := l.cur.add(&l.prev)
	if sums.n < prefillMinReadings {
		return
	}
	if lag, bestR, worstR, ok := sums.peak(); ok && bestR >= prefillMinCorrelation && bestR-worstR >= prefillContrast {
		l.lag, l.ok = lag, true
	}
}

// peak is the candidate lag where the correlation over the readings
// summed is highest, that correlation and the lowest; ok is false while
// either side has not varied.
func (l *correlationSums) peak() (lag time.Duration, bestR, worstR float64, ok bool) {
	vy := l.n*l.syy - l.sy*l.sy
	if vy <= 0 {
		return 0, 0, 0, false
	}
	best, bestR, worstR := -1, math.Inf(-1), math.Inf(1)
	for i := range prefillLags {
		vx := l.n*l.sxx[i] - l.sx[i]*l.sx[i]
		if vx <= 0 {
			return 0, 0, 0, false
		}
		r := (l.n*l.sxy[i] - l.sx[i]*l.sy) / math.Sqrt(vx*vy)
		if r > bestR {
			best, bestR = i, r
		}
		worstR = min(worstR, r)
	}
	return time.Duration(best) * prefillLagStep, bestR, worstR, true
}

// mod is x mod n in [0, n).
func mod(x, n int64) int64 {
	m := x % n
	if m < 0 {
		m += n
	}
	return m
}
