package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
)

// Config sets a book's resolution, memory and sampling ratio.
type Config struct {
	// Resolution is the width of a bin.
	Resolution time.Duration
	// Horizon is how far back from the newest bin the book keeps bins.
	Horizon time.Duration
	// SamplingRatio is the share of requests whose spans reach the
	// processor, in (0, 1].
	SamplingRatio float64
}

// Validate names the bad fields.
func (c Config) Validate() error {
	var errs []error
	if c.Resolution < time.Millisecond {
		errs = append(errs, fmt.Errorf("resolution: %v must be at least 1ms", c.Resolution))
	}
	if c.Horizon < 10*c.Resolution {
		errs = append(errs, fmt.Errorf("horizon: %v must be at least ten resolutions (%v)", c.Horizon, 10*c.Resolution))
	}
	if !(c.SamplingRatio > 0 && c.SamplingRatio <= 1) {
		errs = append(errs, fmt.Errorf("sampling_ratio: %v must be in (0, 1]", c.SamplingRatio))
	}
	return errors.Join(errs...)
}

// BinBytes is the memory one bin takes (unsafe.Sizeof, tested).
const BinBytes = 56

// ageBounds are the upper bounds, in seconds, of the age classes of the
// arrival curve (the age of a bin is how long after its end a request in
// it was admitted): spans reach the processor when their request ends, so
// a bin's weight keeps growing until the longest request running in it has
// ended. Within a class the curve is taken as linear.
var ageBounds = [...]float64{0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, math.Inf(1)}

const numAges = len(ageBounds)

// arrivalHalfLife is how fast the learned arrival curve forgets.
const arrivalHalfLife = float64(10 * time.Minute)

// minLearned is how many requests (decayed) the arrival curve needs before
// it is used: until then a bin's weight is taken as complete.
const minLearned = 20

// Piece is a stretch of one request at a constant cost rate.
type Piece struct {
	Start, End int64   // Unix ns
	Rate       float64 // cost per second; 0 for time that runs nothing (a queue)
}

// Totals are a GPU's books over its final bins.
type Totals struct {
	Measured   float64 // J the GPU drew in final bins with known energy
	Attributed float64 // J given to requests
	Idle       float64 // J of bins no request ran in
	Unsampled  float64 // J left for the requests sampling kept from view
	Correction float64 // Measured − the rest: ≤ 0 where early releases got more than their final share
	// Seconds is the time of final bins per label.
	Seconds bottleneck.Times
	// The time of the final bins with a label (Σ Seconds), split between
	// requests, idle bins and the unsampled share as their energy is, so
	// that AttributedSeconds + IdleSeconds + UnsampledSeconds +
	// CorrectionSeconds = Σ Seconds. A bin's time counts even where its
	// energy is unknown.
	AttributedSeconds, IdleSeconds, UnsampledSeconds, CorrectionSeconds float64
}

type bin struct {
	weight float64 // Σ rate × overlap (s) of admitted requests
	share  float64 // share of the bin given to released requests: × energy J, × width s
	energy float64 // J, once frozen
	// Admitted requests overlapping the bin, and those of them not yet
	// released, as differences from the bin before (summed as finalisation
	// walks forward): admitting and releasing cost O(1), not O(bins).
	dPresent, dPending int32
	label              bottleneck.Label
	frozen             bool
	known              bool // energy measured
	final              bool
}

// Book is one GPU's books. It is not safe for concurrent use.
type Book struct {
	width   int64
	ratio   float64
	bins    []bin // circular over absolute bin indexes [lo, hi)
	lo, hi  int64
	finalTo int64 // bins below are final
	// runPresent and runPending are the counts in effect at finalTo.
	runPresent, runPending int32
	started                bool
	totals                 Totals
	// arrived is, per age class, the weight admitted at that age of its
	// bins, decayed; arrivedAll all of it. Together: the share of a bin's
	// weight that arrives by a given age.
	arrived    [numAges]float64
	arrivedAll float64
	curve      [numAges]float64 // cumulative share of arrived by class, unless stale
	stale      bool             // arrived changed since curve was computed
	learned    float64          // requests admitted, decayed
	learnedAt  int64            // when arrived was last decayed, Unix ns
}

// NewBook returns an empty book; cfg must be valid.
func NewBook(cfg Config) *Book {
	n := int((cfg.Horizon + cfg.Resolution - 1) / cfg.Resolution)
	return &Book{width: int64(cfg.Resolution), ratio: cfg.SamplingRatio, bins: make([]bin, n)}
}

// Index returns the bin holding Unix time t (ns).
func (b *Book) Index(t int64) int64 { return floorDiv(t, b.width) }

// Start returns where bin i begins, Unix ns.
func (b *Book) Start(i int64) int64 { return i * b.width }

func (b *Book) at(i int64) *bin {
	return &b.bins[uint64(i)%uint64(len(b.bins))]
}

// clip returns the bins of [from, to) the book keeps.
func (b *Book) clip(from, to int64) (int64, int64) {
	from, to = max(from, b.lo), min(to, b.hi)
	return from, max(from, to)
}

// reach makes bins up to to addressable, dropping the oldest past the
// horizon (finalised with what they have), and returns [from, to) clipped
// to what the book keeps. A new book starts half a horizon before from, so
// requests that began before the first thing it saw still fit.
func (b *Book) reach(from, to int64) (int64, int64) {
	n := int64(len(b.bins))
	if !b.started {
		b.started = true
		b.lo = max(min(from, to-n/2), to-n)
		b.hi, b.finalTo = b.lo, b.lo
	}
	if to > b.hi {
		if to-b.lo > n {
			newLo := to - n
			b.finalize(min(newLo, b.hi), true)
			b.lo = newLo
			b.finalTo = max(b.finalTo, newLo)
		}
		for i := max(b.hi, b.lo); i < to; i++ {
			*b.at(i) = bin{}
		}
		b.hi = to
	}
	return b.clip(from, to)
}

// Request is one request's cost per bin, computed once for all its GPUs'
// books (their bins line up: same resolution, absolute indexes). Reuse one
// Request for many: Admit and Release only read it.
type Request struct {
	lo, hi int64 // bins its whole window overlaps
	now    int64 // when it was computed
	bins   []pieceBin
	// byClass is its weight per age class, all its weight: what every
	// book's arrival curve learns from it, summed once.
	byClass [numAges]float64
	all     float64
}

// pieceBin is a piece's weight in one bin.
type pieceBin struct {
	i      int64
	piece  int32
	class  int32   // age class at the time the Request was computed
	weight float64 // rate × overlap, s
	frac   float64 // where within its age class the bin's age lies, 0..1
}

// Cost fills r with the pieces' cost per bin of resolution width, with the
// bins' ages at now (Unix ns).
func (r *Request) Cost(pieces []Piece, width, now int64) {
	r.bins = r.bins[:0]
	r.lo, r.hi, r.now = 0, 0, now
	r.byClass, r.all = [numAges]float64{}, 0
	if len(pieces) == 0 {
		return
	}
	start, end := pieces[0].Start, pieces[0].End
	for _, p := range pieces[1:] {
		start, end = min(start, p.Start), max(end, p.End)
	}
	if end <= start {
		return
	}
	r.lo, r.hi = floorDiv(start, width), floorDiv(end-1, width)+1
	for k, p := range pieces {
		if p.Rate <= 0 || p.End <= p.Start {
			continue
		}
		for i := floorDiv(p.Start, width); i*width < p.End; i++ {
			lo, hi := max(p.Start, i*width), min(p.End, (i+1)*width)
			if hi <= lo {
				continue
			}
			class, frac := ageOf(max(0, float64(now-(i+1)*width)/1e9))
			w := p.Rate * float64(hi-lo) / 1e9
			r.bins = append(r.bins, pieceBin{i: i, piece: int32(k), class: int32(class), weight: w, frac: frac})
			r.byClass[class] += w
			r.all += w
		}
	}
}

func floorDiv(t, w int64) int64 {
	i := t / w
	if t%w < 0 {
		i--
	}
	return i
}

// ageOf returns the age class of secs and where within it secs lies.
func ageOf(secs float64) (int, float64) {
	lo := 0.0
	for k, bound := range ageBounds {
		if secs <= bound {
			if math.IsInf(bound, 1) {
				return k, 1
			}
			return k, (secs - lo) / (bound - lo)
		}
		lo = bound
	}
	return numAges - 1, 1
}

// Admit adds a request, computed at the time of admission, to the bins it
// overlaps: they count it as present and waiting, and its cost as weight.
func (b *Book) Admit(r *Request) {
	if r.hi <= r.lo {
		return
	}
	lo, hi := b.reach(r.lo, r.hi+1)
	if hi > lo {
		b.count(lo, min(hi, r.hi), 1, 1)
	}
	b.age(r.now)
	for k, w := range r.byClass {
		b.arrived[k] += w
	}
	b.arrivedAll += r.all
	for _, pb := range r.bins {
		if pb.i < b.lo || pb.i >= b.hi {
			continue
		}
		b.at(pb.i).weight += pb.weight
	}
	b.learned++
	b.stale = true // recomputed when next read: admits far outnumber reads of it
}

// age decays the arrival curve's weights to now.
func (b *Book) age(now int64) {
	if b.learnedAt != 0 && now > b.learnedAt {
		f := math.Exp2(-float64(now-b.learnedAt) / arrivalHalfLife)
		for k := range b.arrived {
			b.arrived[k] *= f
		}
		b.arrivedAll *= f
		b.learned *= f
	}
	b.learnedAt = max(b.learnedAt, now)
}

// known returns the share of a bin's weight that has arrived by the age of
// pb (its class and the place within it), learned from the ages at which
// admitted requests' weight arrived; 1 until enough requests have.
func (b *Book) known(pb *pieceBin) float64 {
	if b.learned < minLearned || b.arrivedAll <= 0 {
		return 1
	}
	if b.stale {
		b.learnCurve()
	}
	prev := 0.0
	if pb.class > 0 {
		prev = b.curve[pb.class-1]
	}
	return max(minKnown, prev+pb.frac*(b.curve[pb.class]-prev))
}

// minKnown caps how far a bin's weight is scaled up.
const minKnown = 0.05

// Release gives an admitted request, computed at the time of release, its
// share of the frozen bins it ran in: per piece into shares (indexed like
// the pieces, added to), and the same share of each bin's time, summed, as
// seconds (GPU-seconds: in bins with a label, whether or not their energy
// is known); known reports whether any of its bins had measured energy.
// Bins not frozen give nothing. A bin's weight is what has been admitted,
// scaled up by the share of a bin's weight known at its age: the requests
// still running then, whose spans have not arrived, take their part too.
func (b *Book) Release(r *Request, shares []float64) (known bool, seconds float64) {
	width := float64(b.width) / 1e9
	for k := range r.bins {
		pb := &r.bins[k]
		if pb.i < b.lo || pb.i >= b.hi {
			continue
		}
		bn := b.at(pb.i)
		if !bn.frozen {
			continue
		}
		known = known || bn.known
		if bn.weight <= 0 || (!bn.known && bn.label == "") {
			continue
		}
		f := b.ratio * pb.weight * b.known(pb) / bn.weight
		bn.share += f
		if bn.known {
			part := f * bn.energy
			shares[pb.piece] += part
			if bn.final {
				b.totals.Attributed += part
				b.totals.Correction -= part
			}
		}
		if bn.label != "" {
			seconds += f * width
			if bn.final {
				b.totals.AttributedSeconds += f * width
				b.totals.CorrectionSeconds -= f * width
			}
		}
	}
	if lo, hi := b.clip(r.lo, r.hi); hi > lo {
		b.count(lo, hi, 0, -1)
	}
	return known, seconds
}

// count adds present and pending to bins [lo, hi) (hi < the book's end).
func (b *Book) count(lo, hi int64, present, pending int32) {
	for _, e := range [2]struct {
		i    int64
		sign int32
	}{{lo, 1}, {hi, -1}} {
		if e.i < b.finalTo {
			b.runPresent += e.sign * present
			b.runPending += e.sign * pending
			continue
		}
		if e.i < b.hi {
			bn := b.at(e.i)
			bn.dPresent += e.sign * present
			bn.dPending += e.sign * pending
		}
	}
}

// Unfrozen returns the smallest range holding every bin of [from, to) that
// is not frozen yet; ok is false when there is none. It makes bins up to to
// addressable first.
func (b *Book) Unfrozen(from, to int64) (lo, hi int64, ok bool) {
	if to <= from {
		return 0, 0, false
	}
	from, to = b.reach(from, to)
	lo, hi = to, from
	for i := from; i < to; i++ {
		if !b.at(i).frozen {
			lo, hi = min(lo, i), i+1
		}
	}
	return lo, hi, hi > lo
}

// Freeze fixes bin i's measured energy and label (label "" when nothing
// covered the bin). A frozen bin is never changed again.
func (b *Book) Freeze(i int64, energyJ float64, known bool, label bottleneck.Label) {
	if i < b.lo || i >= b.hi {
		return
	}
	bn := b.at(i)
	if bn.frozen {
		return
	}
	bn.frozen, bn.known, bn.label = true, known, label
	if known {
		bn.energy = energyJ
	}
}

// Label returns bin i's label: once final, the frozen one with an idle GPU
// that had a request present counted as starved (host_bound); before, as a
// request in the bin sees it (present, so idle reads host_bound). "" when
// not frozen or unknown.
func (b *Book) Label(i int64) bottleneck.Label {
	if i < b.lo || i >= b.hi {
		return ""
	}
	bn := b.at(i)
	if !bn.final && bn.label == bottleneck.Idle {
		return bottleneck.HostBound
	}
	return bn.label
}

// FinalTo returns the first bin that is not final.
func (b *Book) FinalTo() int64 { return b.finalTo }

// Finalize books the frozen bins from FinalTo up to to, in order, stopping at
// the first that is not frozen or has a request waiting for release.
func (b *Book) Finalize(to int64) {
	if !b.started {
		return
	}
	b.reach(b.finalTo, to)
	b.finalize(to, false)
}

// finalize books bins [finalTo, to); force books them even when a request
// is waiting or they are not frozen (they are being dropped).
func (b *Book) finalize(to int64, force bool) {
	to = min(to, b.hi)
	for ; b.finalTo < to; b.finalTo++ {
		bn := b.at(b.finalTo)
		present, pending := b.runPresent+bn.dPresent, b.runPending+bn.dPending
		if !force && (!bn.frozen || pending > 0) {
			return
		}
		b.runPresent, b.runPending = present, pending
		bn.dPresent, bn.dPending = 0, 0
		bn.final = true
		if bn.label == bottleneck.Idle && present > 0 {
			bn.label = bottleneck.HostBound
		}
		if bn.label != "" {
			w := float64(b.width) / 1e9
			b.totals.Seconds.Add(bn.label, w)
			if bn.weight <= 0 {
				b.totals.IdleSeconds += w
			} else {
				b.totals.UnsampledSeconds += w - b.ratio*w
				b.totals.AttributedSeconds += bn.share * w
				b.totals.CorrectionSeconds += b.ratio*w - bn.share*w
			}
		}
		if !bn.known {
			continue
		}
		b.totals.Measured += bn.energy
		if bn.weight <= 0 {
			b.totals.Idle += bn.energy
			continue
		}
		taken := b.ratio * bn.energy
		given := bn.share * bn.energy
		b.totals.Unsampled += bn.energy - taken
		b.totals.Attributed += given
		b.totals.Correction += taken - given
	}
}

// learnCurve recomputes the cumulative arrival curve.
func (b *Book) learnCurve() {
	b.stale = false
	if b.arrivedAll <= 0 {
		return
	}
	cum := 0.0
	for k, a := range b.arrived {
		cum += a
		b.curve[k] = cum / b.arrivedAll
	}
	b.curve[numAges-1] = 1
}

// Totals returns the books over final bins.
func (b *Book) Totals() Totals { return b.totals }
