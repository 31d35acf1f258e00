package analysis // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"

import "math"

// ksum is a compensated sum: each addition's rounding error is captured
// exactly by Knuth's branch-free TwoSum and accumulated separately (the
// Kahan–Babuška–Neumaier scheme). Adding a term and later adding its
// negation leaves a residue of the order of one rounding of the running
// total, not of the term.
type ksum struct{ s, c float64 }

func (k *ksum) add(x float64) {
	t := k.s + x
	bp := t - k.s
	k.c += (k.s - (t - bp)) + (x - bp)
	k.s = t
}

func (k *ksum) value() float64 { return k.s + k.c }

// point is one observation; ts is Unix nanoseconds.
type point struct {
	ts int64
	v  float64
}

const (
	// initialCap is the first ring allocation (capped at MaxPoints).
	initialCap = 64
	// driftFactor2 is the squared number of standard deviations the
	// window mean may drift from the shift K before the sums are rebuilt
	// (4σ: Σd² then exceeds the variance part by at most a factor of 17,
	// losing ~1.2 of ~16 digits).
	driftFactor2 = 16
	// driftRateDiv limits drift-triggered rebuilds to one per n/8
	// operations, keeping the O(n) rebuild O(1) amortised.
	driftRateDiv = 8
	// periodMul sets the periodic rebuild: every periodMul*n operations
	// (additions plus removals; a full ring does two per observation).
	// It bounds what the compensated sums cannot: residue accumulating
	// over an unbounded stream.
	periodMul = 8
	// noiseFloor: a variance numerator Σd²-(Σd)²/n at or below this
	// fraction of Σd² is rounding noise and is reported as zero. The
	// compensated sums are accurate to a few ulps, so 1e-12 leaves three
	// orders of magnitude of margin while only ever zeroing a real
	// variance when the mean sits 1e6 standard deviations from K, which
	// the drift rebuild prevents but for up to n/8 operations.
	noiseFloor = 1e-12
)

// series is one signal's window: a ring of points plus compensated
// running sums of d = v-k and d², all terms computed with the current k.
type series struct {
	buf  []point
	head int // index of the oldest point
	n    int

	k      float64 // shift, a value from the window near its mean
	s1, s2 ksum    // Σd and Σd²
	ops    int     // additions and removals since the last rebuild

	seen bool  // a point has been accepted
	last int64 // newest accepted timestamp

	anomalous bool // verdict on the newest accepted point
}

// oldest returns the oldest point; s.n must be > 0.
func (s *series) oldest() point { return s.buf[s.head] }

// push appends p; the caller ensures s.n < maxPoints.
func (s *series) push(p point, maxPoints int) {
	if s.n == len(s.buf) {
		s.grow(maxPoints)
	}
	i := s.head + s.n
	if i >= len(s.buf) {
		i -= len(s.buf)
	}
	s.buf[i] = p
	s.n++
	if s.n == 1 {
		// Fresh window: shift by its only value so a constant series
		// sums exact zeros.
		s.k = p.v
		s.s1, s.s2 = ksum{}, ksum{}
		s.ops = 0
	}
	d := p.v - s.k
	s.s1.add(d)
	s.s2.add(d * d)
	s.ops++
}

// pop removes the oldest point; s.n must be > 0.
func (s *series) pop() {
	p := s.buf[s.head]
	s.head++
	if s.head == len(s.buf) {
		s.head = 0
	}
	s.n--
	if s.n == 0 {
		s.head = 0
		s.s1, s.s2 = ksum{}, ksum{}
		s.ops = 0
		return
	}
	d := p.v - s.k
	s.s1.add(-d)
	s.s2.add(-(d * d))
	s.ops++
}

// grow doubles the ring (at least initialCap, at most maxPoints) and
// lays the points out from index 0.
func (s *series) grow(maxPoints int) {
	c := max(2*len(s.buf), initialCap)
	c = min(c, maxPoints)
	nb := make([]point, c)
	a, b := s.segments()
	copy(nb[copy(nb, a):], b)
	s.buf, s.head = nb, 0
}

// segments returns the points oldest first as up to two slices.
func (s *series) segments() (a, b []point) {
	end := s.head + s.n
	if end <= len(s.buf) {
		return s.buf[s.head:end], nil
	}
	return s.buf[s.head:], s.buf[:end-len(s.buf)]
}

// maybeRebuild rebuilds the sums periodically (every 8n operations) and
// when the mean has drifted too far from k (at most every n/8 ops).
func (s *series) maybeRebuild() {
	if s.n < 2 {
		return
	}
	if s.ops >= periodMul*s.n {
		s.rebuild()
		return
	}
	if s.ops*driftRateDiv < s.n {
		return
	}
	// m = s1/n is the mean's offset from k and v = s2/n - m² the
	// population variance; m² > driftFactor2*v, multiplied out by n²:
	s1, s2 := s.s1.value(), s.s2.value()
	if (driftFactor2+1)*s1*s1 > driftFactor2*float64(s.n)*s2 {
		s.rebuild()
	}
}

// rebuild recomputes the sums from the ring with a fresh shift k: the
// value in the window nearest its mean. Since every point is at least
// that far from the mean, |mean-k| <= population stddev afterwards, and
// a constant window gets k equal to its value and exact zero sums.
func (s *series) rebuild() {
	a, b := s.segments()
	// The running mean is accurate enough to pick k; k need not be exact.
	mean := s.k + s.s1.value()/float64(s.n)
	k, best := s.oldest().v, math.Inf(1)
	for _, seg := range [2][]point{a, b} {
		for _, p := range seg {
			if d := math.Abs(p.v - mean); d < best {
				k, best = p.v, d
			}
		}
	}
	s.k = k
	s.s1, s.s2 = ksum{}, ksum{}
	for _, seg := range [2][]point{a, b} {
		for _, p := range seg {
			d := p.v - k
			s.s1.add(d)
			s.s2.add(d * d)
		}
	}
	s.ops = 0
}

// stats returns the window's mean and sample standard deviation.
func (s *series) stats() (mean, stddev float64) {
	if s.n == 0 {
		return 0, 0
	}
	n := float64(s.n)
	s1, s2 := s.s1.value(), s.s2.value()
	mean = s.k + s1/n
	if s.n < 2 {
		return mean, 0
	}
	num := s2 - s1*s1/n
	if num <= noiseFloor*s2 {
		return mean, 0
	}
	return mean, math.Sqrt(num / (n - 1))
}
