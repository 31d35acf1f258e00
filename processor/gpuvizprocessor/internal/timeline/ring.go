package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"

// point is one sample. Timestamps are Unix nanoseconds rather than
// time.Time: 16 bytes a point instead of 32, and plain integer arithmetic.
type point struct {
	ts int64
	v  float64
}

// initialRingCap is a ring's first allocation: small, because most signals
// arrive once per scrape and retention trims them long before they fill a
// full-size ring.
const initialRingCap = 16

// ring holds one signal's points of one GPU, oldest first, in a circular
// buffer that grows by doubling up to its maximum and then overwrites.
type ring struct {
	buf  []point
	head int // index in buf of the oldest point
	n    int
	// dropped is the timestamp of the newest point let go of (overwritten or
	// past retention): the predecessor of the oldest point kept. It keeps that
	// point's stretch (max(prev, ts−MaxSpan), ts] what it was, and refuses
	// late points that would land in history already given up.
	dropped    int64
	hasDropped bool
}

// at returns the i-th oldest point, 0 <= i < len(r.buf).
func (r *ring) at(i int) *point {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return &r.buf[j]
}

// firstAfter returns the smallest i in [lo, r.n] with at(i).ts > ts (r.n when
// none).
func (r *ring) firstAfter(lo int, ts int64) int {
	hi := r.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.at(m).ts > ts {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// firstAtOrAfter returns the smallest i in [lo, r.n] with at(i).ts >= ts.
func (r *ring) firstAtOrAfter(lo int, ts int64) int {
	hi := r.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.at(m).ts >= ts {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

func (r *ring) dropOldest() {
	r.dropped = r.buf[r.head].ts
	r.hasDropped = true
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
}

// grow doubles the buffer (at most to limit) and unwraps it.
func (r *ring) grow(limit int) {
	c := max(2*len(r.buf), initialRingCap)
	c = min(c, limit)
	buf := make([]point, c)
	for i := range r.n {
		buf[i] = *r.at(i)
	}
	r.buf, r.head = buf, 0
}

// insert adds (ts, v), first dropping points older than cutoff. It reports
// false when the point is refused: older than a point already dropped, or
// older than every point of a full ring (it would be overwritten at once).
func (r *ring) insert(ts int64, v float64, cutoff int64, limit int) bool {
	for r.n > 0 && r.buf[r.head].ts < cutoff {
		r.dropOldest()
	}
	if r.hasDropped && ts <= r.dropped {
		return false
	}
	if r.n > 0 {
		last := r.at(r.n - 1)
		if ts == last.ts {
			last.v = v
			return true
		}
		if ts < last.ts {
			return r.insertLate(ts, v, limit)
		}
	}
	if r.n == len(r.buf) {
		if len(r.buf) < limit {
			r.grow(limit)
		} else {
			r.dropOldest()
		}
	}
	*r.at(r.n) = point{ts, v}
	r.n++
	return true
}

// insertLate puts an out-of-order point in its place; O(n), and rare.
func (r *ring) insertLate(ts int64, v float64, limit int) bool {
	i := r.firstAtOrAfter(0, ts)
	if p := r.at(i); p.ts == ts { // i < r.n: ts is older than the newest
		p.v = v
		return true
	}
	if r.n == len(r.buf) {
		if len(r.buf) < limit {
			r.grow(limit)
		} else {
			if i == 0 {
				return false
			}
			r.dropOldest()
			i--
		}
	}
	for j := r.n; j > i; j-- {
		*r.at(j) = *r.at(j - 1)
	}
	*r.at(i) = point{ts, v}
	r.n++
	return true
}
