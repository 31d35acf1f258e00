package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"

// point is one sample. Timestamps are Unix nanoseconds rather than
// time.Time: 32 bytes a point instead of 48, and plain integer arithmetic.
//
// cum and cov are running sums over the ring's points up to and including
// this one, from the ring's base (see ring.rebase), so that a window's
// integral is a difference of two prefixes instead of a walk over its
// points. In a signal's ring cum is Σ v·ns over the points' stretches and
// cov Σ ns they cover; in the energy counter's ring cum is unused (0) and cov
// counts the counter's decreases (a point lower than its predecessor).
type point struct {
	ts  int64
	v   float64
	cum float64
	cov int64
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
	// counter marks the energy counter's ring, whose prefixes count resets.
	counter bool
	// wrapped is set when head wraps around the buffer: the prefixes are
	// rebased at the end of that insert.
	wrapped bool
	// bmax[c] is the max value in block c of buf (slots c·blockSize up to
	// blockSize on), so that a window's max need not visit every point. The
	// buffer is written in slot order, wrapping, so a block's max restarts
	// when its first slot is written: every block holds the max of its slots
	// except the newest point's block, which holds the max from its first
	// slot up to the newest point and is never read. Out-of-order inserts
	// rebuild it.
	bmax []float64
}

// blockSize is the number of slots under one bmax; a window's max reads up
// to three blocks' worth of points at its edges and one bmax per block
// between.
const (
	blockShift = 5
	blockSize  = 1 << blockShift
)

// at returns the i-th oldest point, 0 <= i < len(r.buf).
func (r *ring) at(i int) *point { return &r.buf[r.slot(i)] }

// slot returns the index in buf of the i-th oldest point.
func (r *ring) slot(i int) int {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return j
}

// noteMax records v written at slot j, the newest point.
func (r *ring) noteMax(j int, v float64) {
	if c := j >> blockShift; j&(blockSize-1) == 0 || v > r.bmax[c] {
		r.bmax[c] = v
	}
}

// blockMax recomputes block c's max, up to slot last when the newest point
// lies in it.
func (r *ring) blockMax(c, last int) {
	lo := c << blockShift
	hi := min(lo+blockSize, len(r.buf)) - 1
	if last>>blockShift == c {
		hi = last
	}
	m := r.buf[lo].v
	for j := lo + 1; j <= hi; j++ {
		if v := r.buf[j].v; v > m {
			m = v
		}
	}
	r.bmax[c] = m
}

// rebuildMax recomputes every block's max: O(len(buf)).
func (r *ring) rebuildMax() {
	if r.n == 0 {
		return
	}
	last := r.slot(r.n - 1)
	for c := range r.bmax {
		r.blockMax(c, last)
	}
}

// rangeMax returns the max value of points i..j−1, i < j: the points of
// the partial blocks at the edges and of the newest point's block, and one
// bmax per block between.
func (r *ring) rangeMax(i, j int) float64 {
	newest := r.slot(r.n-1) >> blockShift
	s := r.slot(i)
	m := r.buf[s].v
	for left := j - i; left > 0; {
		if s&(blockSize-1) == 0 && s>>blockShift != newest {
			if size := min(blockSize, len(r.buf)-s); size <= left {
				if b := r.bmax[s>>blockShift]; b > m {
					m = b
				}
				left -= size
				if s += size; s == len(r.buf) {
					s = 0
				}
				continue
			}
		}
		if v := r.buf[s].v; v > m {
			m = v
		}
		left--
		if s++; s == len(r.buf) {
			s = 0
		}
	}
	return m
}

// start returns where the stretch described by point i begins (exclusive):
// its predecessor (kept or dropped), at most maxSpan back; a ring's first
// point ever describes min(maxSpan, 1 s).
func (r *ring) start(i int, maxSpan int64) int64 {
	ts := r.at(i).ts
	switch {
	case i > 0:
		return max(r.at(i-1).ts, sub(ts, maxSpan))
	case r.hasDropped:
		return max(r.dropped, sub(ts, maxSpan))
	}
	return sub(ts, min(maxSpan, firstSampleSpan))
}

// setPrefix computes point i's cum and cov from point i−1's (a base of 0 for
// the oldest point).
func (r *ring) setPrefix(i int, maxSpan int64) {
	p := r.at(i)
	var (
		cum float64
		cov int64
	)
	if i > 0 {
		q := r.at(i - 1)
		cum, cov = q.cum, q.cov
		if r.counter && p.v < q.v {
			cov++
		}
	}
	if r.counter {
		p.cum, p.cov = 0, cov
		return
	}
	span := p.ts - r.start(i, maxSpan)
	p.cum, p.cov = cum+p.v*float64(span), cov+span
}

// setPrefixesFrom recomputes the prefixes of points i..n−1; O(n − i).
func (r *ring) setPrefixesFrom(i int, maxSpan int64) {
	for ; i < r.n; i++ {
		r.setPrefix(i, maxSpan)
	}
}

// rebase subtracts the oldest point's prefixes from every point's, so that
// the sums stay within what the ring holds rather than growing with the
// GPU's lifetime: O(n), when the buffer grows and once per wrap of the
// buffer (len(buf) drops), so O(1) amortised per insert. The sums thus span
// at most two buffers' worth of points. Differences between points are unchanged up to
// one rounding of each.
func (r *ring) rebase() {
	if r.n == 0 {
		return
	}
	base := *r.at(0)
	for i := range r.n {
		p := r.at(i)
		p.cum -= base.cum
		p.cov -= base.cov
	}
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
func (r *ring) firstAtOrAfter(lo int, ts int64) int { return r.searchAtOrAfter(lo, r.n, ts) }

// gallop is firstAtOrAfter searching outward from lo, for an answer near
// it: O(log(answer − lo)).
func (r *ring) gallop(lo int, ts int64) int {
	if lo >= r.n || r.at(lo).ts >= ts {
		return lo
	}
	for prev, step := lo, 1; ; step *= 2 { // at(prev).ts < ts
		next := prev + step
		if next >= r.n {
			return r.searchAtOrAfter(prev+1, r.n, ts)
		}
		if r.at(next).ts >= ts {
			return r.searchAtOrAfter(prev+1, next, ts)
		}
		prev = next
	}
}

// searchAtOrAfter returns the smallest i in [lo, hi] with at(i).ts >= ts,
// hi when none before it.
func (r *ring) searchAtOrAfter(lo, hi int, ts int64) int {
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
		r.wrapped = true
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
	r.bmax = make([]float64, (c+blockSize-1)>>blockShift)
	r.rebuildMax()
	r.rebase()
}

// insert adds (ts, v), first dropping points older than cutoff, and keeps
// the prefixes right. It reports false when the point is refused: older than
// a point already dropped, or older than every point of a full ring (it
// would be overwritten at once).
func (r *ring) insert(ts int64, v float64, cutoff int64, limit int, maxSpan int64) bool {
	ok := r.insertPoint(ts, v, cutoff, limit, maxSpan)
	if r.wrapped {
		r.wrapped = false
		r.rebase()
	}
	return ok
}

func (r *ring) insertPoint(ts int64, v float64, cutoff int64, limit int, maxSpan int64) bool {
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
			r.setPrefix(r.n-1, maxSpan)
			j := r.slot(r.n - 1)
			r.blockMax(j>>blockShift, j)
			return true
		}
		if ts < last.ts {
			return r.insertLate(ts, v, limit, maxSpan)
		}
	}
	if r.n == len(r.buf) {
		if len(r.buf) < limit {
			r.grow(limit)
		} else {
			r.dropOldest()
		}
	}
	j := r.slot(r.n)
	r.buf[j] = point{ts: ts, v: v}
	r.noteMax(j, v)
	r.n++
	r.setPrefix(r.n-1, maxSpan)
	return true
}

// insertLate puts an out-of-order point in its place and recomputes the
// prefixes from there; O(n), and rare.
func (r *ring) insertLate(ts int64, v float64, limit int, maxSpan int64) bool {
	i := r.firstAtOrAfter(0, ts)
	if p := r.at(i); p.ts == ts { // i < r.n: ts is older than the newest
		p.v = v
		r.setPrefixesFrom(i, maxSpan)
		r.rebuildMax()
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
	*r.at(i) = point{ts: ts, v: v}
	r.n++
	r.setPrefixesFrom(i, maxSpan)
	r.rebuildMax()
	return true
}
