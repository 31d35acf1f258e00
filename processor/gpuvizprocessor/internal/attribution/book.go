package attribution // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
)

// Config sets the books' resolution, memory and sampling ratio.
type Config struct {
	// Resolution is the width of a bin.
	Resolution time.Duration
	// Horizon is how far back from the newest bin the book keeps bins.
	Horizon time.Duration
	// SamplingRatio is the share of requests whose spans reach the
	// processor, in (0, 1].
	SamplingRatio float64
	// TensorAtLimit and DRAMAtLimit are the shares of the tensor and DRAM
	// peaks a unit that sets the pace reaches, in (0, 1] (the classifier's
	// attainable peaks, validated with them): a busy GPU's time is the
	// larger of its tensor and DRAM activity over them.
	TensorAtLimit, DRAMAtLimit float64
	// FinalizeAfter is how old a bin is when it normally becomes final;
	// past it, the weight a bin's activity says is still to come fades as
	// the arrival curve says little more arrives (Group.lateShare).
	FinalizeAfter time.Duration
	// ScoreAge is how old a bin is when its first forecast of its final
	// weight is scored against the weight it has then (forecastScore): the
	// longest a span may wait, since waiting recovers only what arrives
	// within it. Taken as at most Horizon.
	ScoreAge time.Duration
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

// GroupBinBytes is the memory a group's shared part of one bin takes and
// GPUBinBytes a GPU's own part (unsafe.Sizeof, tested): a bin of a group of
// n GPUs takes GroupBinBytes + n × GPUBinBytes.
const (
	GroupBinBytes = 152
	GPUBinBytes   = 40
)

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

// MaxGroupGPUs is the most GPUs one group may hold: a bin counts its
// group's GPUs in 16 bits. The processor's config keeps history.max_gpus,
// and so every group, within it.
const MaxGroupGPUs = math.MaxUint16

// Piece is a stretch of one request at a constant cost rate.
type Piece struct {
	Start, End int64   // Unix ns
	Rate       float64 // cost per second; 0 for time that runs nothing (a queue)
	// Shared is cost per second of what the requests of each engine step
	// share (the step's weight read, one step per generated token): in a
	// bin it is divided among the requests present, those still to come
	// included. Counted only where Rate is not 0.
	Shared float64
	// Chunk marks a prefill: its engine's steps carry its prompt's chunks
	// while it runs, which makes them long and compute-bound.
	Chunk bool
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

// groupBin is the part of a bin its group's GPUs share.
type groupBin struct {
	weight float64 // Σ rate × overlap (s) of admitted requests
	// present is Σ overlap (s) of admitted requests' costed pieces: the
	// weight of a bin its GPUs spent waiting (Release).
	present float64
	// covFrom and covTo bound where in the bin (s from its start) admitted
	// costed pieces ran, once present > 0: the bin's occupied part.
	covFrom, covTo float32
	// Of admitted requests' pieces: Σ rate × overlap (s) and Σ overlap of
	// chunks (prefills); Σ rate × overlap and Σ shared cost × overlap of
	// the others, each times its request's life factor (Group.Life).
	chunkWeight, chunkSecs, stepWeight, stepShared float64
	// shareAll is the share given to requests released while every GPU of
	// the group had the bin frozen and none final: theirs alike. waitAll is
	// what those of them released where GPUs waited took beyond it, per
	// unit of a GPU's waiting share: GPU g's is gpuBin.wait × waitAll.
	shareAll, waitAll float64
	energy            float64 // J: Σ over the GPUs that froze the bin with energy measured
	// Σ gpuBin.wait × energy over the GPUs that froze the bin with energy
	// measured, and Σ gpuBin.wait over those with a label: a release reads
	// its GPUs' waiting shares in O(1).
	waitEnergy, waitLabelled float64
	// Admitted requests overlapping the bin, and those of them not yet
	// released, as differences from the bin before (summed as each GPU's
	// finalisation walks forward): admitting and releasing cost O(1), not
	// O(bins).
	dPresent, dPending int32
	// activity is the GPUs' tensor and DRAM activity, from those that
	// froze the bin with it measured.
	activity groupActivity
	// How many of the group's GPUs froze the bin waiting (idle or
	// host_bound), with energy measured, with a label, and booked it final.
	waiting, frozen, known, labelled, final uint16
	// forecast is the bin's final weight as the first release that read
	// it estimated it (finalWeight); 0 until then. It is scored against the
	// weight the bin has at ScoreAge (forecastScore).
	forecast float32
	// chunkSlots marks the slots (binSlots) admitted chunks ran in: where
	// several prompts' chunks share steps, the steps carried chunks for
	// their union, not their sum (Group.steps).
	chunkSlots uint32
	// toCome is the bin's weight still to come (Group.toCome) as of the
	// ledger's epoch toComeAt: the requests released in one round read it
	// once, not once each.
	toCome   float64
	toComeAt uint64
}

// gpuBin is one GPU's own part of a bin.
type gpuBin struct {
	// share is given to requests released while the group's GPUs differed
	// on the bin (some not frozen yet, or final); the GPU's whole share is
	// this plus the group's shareAll and wait × its waitAll.
	share  float64
	energy float64 // J, once frozen
	// wait is its waiting share (waitingShare), fixed as it froze, so that
	// every release and its finalisation read the same one.
	wait float64
	// tensor and dram are its activity-seconds, once frozen with
	// activity measured (active).
	tensor, dram float32
	label        uint8 // 1 + the label's index in bottleneck.Labels; 0 none
	// reach is how many bins on each side the readings behind its
	// activity reach: they share its prediction's error (Group.toCome).
	reach  uint8
	frozen bool
	known  bool // energy measured
	active bool
	final  bool
}

// labelIndex is l as a gpuBin keeps it; a label not in bottleneck.Labels
// is kept as unknown.
func labelIndex(l bottleneck.Label) uint8 {
	if l == "" {
		return 0
	}
	if i := bottleneck.Index(l); i >= 0 {
		return uint8(i + 1)
	}
	return uint8(bottleneck.Index(bottleneck.Unknown) + 1)
}

func labelOf(i uint8) bottleneck.Label {
	if i == 0 {
		return ""
	}
	return bottleneck.Labels[i-1]
}

var idleLabel, hostBoundLabel = labelIndex(bottleneck.Idle), labelIndex(bottleneck.HostBound)

// Ledger is the books of every GPU: one window of bins over time, and the
// GPUs in groups that serve the same requests. A group's GPUs share each
// bin's weight and request counts, so admitting and releasing a request on
// 8 GPUs of one group costs about what it costs on one; each GPU keeps its
// own energy, label and totals. A request's GPUs are always whole groups
// (Groups splits a group a request's GPUs cut across). Not safe for
// concurrent use.
type Ledger struct {
	width int64
	ratio float64
	// tensorAt and dramAt are Config's TensorAtLimit and DRAMAtLimit.
	tensorAt, dramAt float64
	// finalAge is Config.FinalizeAfter in seconds; scoreBins Config.ScoreAge
	// in bins.
	finalAge  float64
	scoreBins int64
	n         int64
	lo, hi    int64 // bins [lo, hi) are addressable, circular over absolute indexes
	started   bool
	groups    []*Group
	gpus      []*GPU
	mark      uint64 // stamps what Groups has seen in one call
	version   uint64 // changes whenever a GPU changes group
	// epoch changes with anything a bin's weight still to come reads: a
	// request admitted, a bin frozen or learned, the window moved, a group
	// changed. It starts at 1, so a bin never computed is stale.
	epoch uint64
}

// Group is GPUs whose bins share their weight: every request admitted to
// one of them was admitted to all.
type Group struct {
	l        *Ledger
	bins     []groupBin
	members  []*GPU
	admitted bool // a request was ever admitted: never merged again
	arrival  arrival
	load     loadModel  // the bins' final weight (finalWeight)
	cost     loadModel  // the bins' final cost in their steps (finalCost)
	chunks   chunkModel // the bins' final chunked share (steps)
	// forecasts scores the group's forecasts of its bins' final weight;
	// scoredTo is the first bin it has not scored.
	forecasts forecastScore
	scoredTo  int64
	// waits scores how much of its busy bins its GPUs waited through.
	waits waitScore
	// learnedTo is the first bin the fits have not been offered yet
	// (learn); busyBins counts the bins requests were admitted to (Learning).
	learnedTo int64
	busyBins  int
	mark      uint64
	// engines are the counts of running requests the engines serving the
	// group's GPUs report (Running).
	engines engineCounts
}

// arrival is a group's learned arrival curve. arrived is, per age class,
// the weight admitted at that age of its bins, decayed; arrivedAll all of
// it. Together: the share of a bin's weight that arrives by a given age.
type arrival struct {
	arrived    [numAges]float64
	arrivedAll float64
	curve      [numAges]float64 // cumulative share of arrived by class, unless stale
	stale      bool             // arrived changed since curve was computed
	learned    float64          // requests admitted, decayed
	learnedAt  int64            // when arrived was last decayed, Unix ns
}

// GPU is one GPU's books.
type GPU struct {
	l       *Ledger
	group   *Group
	bins    []gpuBin
	finalTo int64 // bins below are final
	// runPresent and runPending are the counts in effect at finalTo.
	runPresent, runPending int32
	totals                 Totals
	mark                   uint64
	onFinal                func(bin int64, label bottleneck.Label)
	// floorW is about the least power the GPU draws, W (0: none seen yet):
	// the lowest of its final bins', creeping up towards each bin above it
	// by floorCreep, so that it follows a floor that rises.
	floorW float64
}

// NewLedger returns empty books; cfg must be valid.
func NewLedger(cfg Config) *Ledger {
	n := int64((cfg.Horizon + cfg.Resolution - 1) / cfg.Resolution)
	return &Ledger{width: int64(cfg.Resolution), ratio: cfg.SamplingRatio, n: n,
		tensorAt: cfg.TensorAtLimit, dramAt: cfg.DRAMAtLimit, epoch: 1,
		finalAge: cfg.FinalizeAfter.Seconds(), scoreBins: max(0, min(n, int64(cfg.ScoreAge/cfg.Resolution)))}
}

// defaultSpread is how far activity of unknown spread is taken to reach:
// the receiver's default 250 ms tick.
const defaultSpread = 250 * time.Millisecond

// binsReached is how many bins on each side readings of spread reach: a
// tick's GPM interval is read by every bin it touches, so bins that far
// apart share a prediction's error. Whole bins only (a 250 ms tick reaches
// 2 of 100 ms, a 1 s scrape 10), at most 255.
func (l *Ledger) binsReached(spread time.Duration) uint8 {
	if spread <= 0 {
		spread = defaultSpread
	}
	return uint8(min(255, (int64(spread)+int64(time.Microsecond))/l.width))
}

// Index returns the bin holding Unix time t (ns).
func (l *Ledger) Index(t int64) int64 { return floorDiv(t, l.width) }

// Start returns where bin i begins, Unix ns.
func (l *Ledger) Start(i int64) int64 { return i * l.width }

// Version changes whenever a GPU changes group: Groups' answers from before
// are then stale.
func (l *Ledger) Version() uint64 { return l.version }

// Add returns a new GPU's books, in a group of its own.
func (l *Ledger) Add() *GPU {
	g := &GPU{l: l, bins: make([]gpuBin, l.n), finalTo: l.lo}
	grp := l.newGroup()
	grp.members = []*GPU{g}
	g.group = grp
	l.gpus = append(l.gpus, g)
	l.version++
	l.epoch++
	return g
}

// Remove drops a GPU's books.
func (l *Ledger) Remove(g *GPU) {
	l.gpus = deleteOne(l.gpus, g)
	grp := g.group
	grp.members = deleteOne(grp.members, g)
	if len(grp.members) == 0 {
		l.groups = deleteOne(l.groups, grp)
	} else {
		grp.recount()
	}
	g.group = nil
	l.version++
	l.epoch++
}

func deleteOne[T comparable](s []T, x T) []T {
	for i, y := range s {
		if y == x {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

func (l *Ledger) newGroup() *Group {
	grp := &Group{l: l, bins: make([]groupBin, l.n)}
	l.groups = append(l.groups, grp)
	return grp
}

// Groups returns the groups that together hold exactly gpus, each once,
// into dst: a group that also holds other GPUs is split first (both halves
// keep its books so far), and groups no request was ever admitted to are
// merged into one.
func (l *Ledger) Groups(gpus []*GPU, dst []*Group) []*Group {
	l.mark++
	for _, g := range gpus {
		g.mark = l.mark
	}
	dst = dst[:0]
	var fresh *Group // the first group never admitted to; the others join it
	for _, g := range gpus {
		grp := g.group
		if grp.mark == l.mark {
			continue
		}
		if !grp.within(l.mark) {
			grp = l.split(grp)
		}
		grp.mark = l.mark
		if !grp.admitted {
			if fresh != nil {
				l.merge(fresh, grp)
				continue
			}
			fresh = grp
		}
		dst = append(dst, grp)
	}
	return dst
}

// within reports whether every GPU of the group carries mark.
// GroupOf returns the group whose GPUs are exactly gpus, or nil where they
// are not one whole group. Unlike Groups it never splits one.
func (l *Ledger) GroupOf(gpus []*GPU) *Group {
	if len(gpus) == 0 {
		return nil
	}
	grp := gpus[0].group
	if grp == nil || len(grp.members) != len(gpus) {
		return nil
	}
	for _, g := range gpus[1:] {
		if g.group != grp {
			return nil
		}
	}
	return grp
}

func (grp *Group) within(mark uint64) bool {
	for _, g := range grp.members {
		if g.mark != mark {
			return false
		}
	}
	return true
}

// split moves the group's GPUs that carry the ledger's mark to a new group
// with a copy of its books, and returns it.
func (l *Ledger) split(grp *Group) *Group {
	// Every field is the group's books so far, but its bins (cloned) and
	// its members: a copy misses no score or fit added later.
	out := new(Group)
	*out = *grp
	out.bins, out.members = slices.Clone(grp.bins), nil
	var keep []*GPU
	for _, g := range grp.members {
		if g.mark == l.mark {
			out.members = append(out.members, g)
			g.group = out
		} else {
			keep = append(keep, g)
		}
	}
	grp.members = keep
	grp.recount()
	out.recount()
	l.groups = append(l.groups, out)
	l.version++
	l.epoch++
	return out
}

// merge moves from's GPUs into into; neither was ever admitted to, so
// their shared books hold only the counts recount rebuilds.
func (l *Ledger) merge(into, from *Group) {
	for _, g := range from.members {
		g.group = into
	}
	into.members = append(into.members, from.members...)
	into.recount()
	l.groups = deleteOne(l.groups, from)
	l.version++
	l.epoch++
}

// recount rebuilds the shared bins' tallies of the GPUs' own from them.
func (grp *Group) recount() {
	for i := grp.l.lo; i < grp.l.hi; i++ {
		sb := grp.at(i)
		sb.energy, sb.waiting, sb.frozen, sb.known, sb.labelled, sb.final = 0, 0, 0, 0, 0, 0
		sb.waitEnergy, sb.waitLabelled = 0, 0
		sb.activity = groupActivity{}
		for _, g := range grp.members {
			mb := g.at(i)
			if mb.frozen {
				sb.frozen++
				if mb.active {
					sb.activity.add(mb)
				}
				if mb.known {
					sb.known++
					sb.energy += mb.energy
					sb.waitEnergy += mb.wait * mb.energy
				}
				if mb.label != 0 {
					sb.labelled++
					sb.waitLabelled += mb.wait
				}
				if mb.waits() {
					sb.waiting++
				}
			}
			if mb.final {
				sb.final++
			}
		}
	}
}

func (grp *Group) at(i int64) *groupBin {
	return &grp.bins[uint64(i)%uint64(len(grp.bins))]
}

func (g *GPU) at(i int64) *gpuBin {
	return &g.bins[uint64(i)%uint64(len(g.bins))]
}

// clip returns the bins of [from, to) the ledger keeps.
func (l *Ledger) clip(from, to int64) (int64, int64) {
	from, to = max(from, l.lo), min(to, l.hi)
	return from, max(from, to)
}

// reach makes bins up to to addressable, scoring the forecasts of those
// that reach ScoreAge and dropping the oldest past the horizon (finalised
// with what they have), and returns [from, to) clipped to what the ledger
// keeps. The window starts half a horizon before from, so requests that
// began before the first thing it saw still fit.
func (l *Ledger) reach(from, to int64) (int64, int64) {
	if !l.started || to > l.hi {
		l.epoch++
	}
	if !l.started {
		l.started = true
		l.lo = max(min(from, to-l.n/2), to-l.n)
		l.hi = l.lo
		for _, g := range l.gpus {
			g.finalTo = l.lo
		}
	}
	if to > l.hi {
		for _, grp := range l.groups {
			grp.score(to - l.scoreBins) // scoreBins ≤ n: before any bin is dropped
		}
		if to-l.lo > l.n {
			newLo := to - l.n
			for _, g := range l.gpus {
				g.finalize(min(newLo, l.hi), true)
				g.finalTo = max(g.finalTo, newLo)
			}
			l.lo = newLo
		}
		for i := max(l.hi, l.lo); i < to; i++ {
			for _, grp := range l.groups {
				*grp.at(i) = groupBin{}
			}
			for _, g := range l.gpus {
				*g.at(i) = gpuBin{}
			}
		}
		l.hi = to
	}
	return l.clip(from, to)
}

// score adds the forecasts of the bins below to that it has not scored
// to the group's forecastScore, with the weight they have now, ScoreAge
// old: as much of a forecast as the arrival curve says arrives by then.
func (grp *Group) score(to int64) {
	l := grp.l
	reach := grp.arrival.knownAt(float64(l.scoreBins*l.width) / 1e9)
	for i := max(grp.scoredTo, l.lo); i < min(to, l.hi); i++ {
		sb := grp.at(i)
		grp.forecasts.add(sb.forecast, reach, sb.weight)
	}
	grp.scoredTo = max(grp.scoredTo, min(to, l.hi))
}

// Request is one request's cost per bin, computed once for all its GPUs'
// books (their bins line up: same resolution, absolute indexes). Reuse one
// Request for many: Admit and Release only read it.
type Request struct {
	lo, hi int64 // bins its whole window overlaps
	// life is its life factor (Group.Life), 1 until set.
	life float64
	now  int64 // when it was computed
	bins []pieceBin
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
	shared float64 // shared cost × overlap, s
	secs   float64 // overlap, s
	// from and to are where in the bin the overlap lies, s from its start.
	from, to float32
	chunk    bool    // of a chunk (Piece.Chunk)
	frac     float64 // where within its age class the bin's age lies, 0..1
}

// Cost fills r with the pieces' cost per bin of resolution width, with the
// bins' ages at now (Unix ns).
func (r *Request) Cost(pieces []Piece, width, now int64) {
	r.bins = r.bins[:0]
	r.lo, r.hi, r.now, r.life = 0, 0, now, 1
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
	// Bins come in time order (pieces do), so ages only fall: each class
	// search starts at the last one found.
	class := numAges - 1
	for k, p := range pieces {
		if p.Rate <= 0 || p.End <= p.Start {
			continue
		}
		for i := floorDiv(p.Start, width); i*width < p.End; i++ {
			lo, hi := max(p.Start, i*width), min(p.End, (i+1)*width)
			if hi <= lo {
				continue
			}
			var frac float64
			class, frac = ageBelow(max(0, float64(now-(i+1)*width)/1e9), class)
			secs := float64(hi-lo) / 1e9
			w := p.Rate * secs
			r.bins = append(r.bins, pieceBin{i: i, piece: int32(k), class: int32(class), weight: w, shared: p.Shared * secs, secs: secs,
				from: float32(lo-i*width) / 1e9, to: float32(hi-i*width) / 1e9, frac: frac, chunk: p.Chunk})
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

// ageBelow returns the age class of secs and where within it secs lies,
// searching down from class top (from the oldest if secs is older).
func ageBelow(secs float64, top int) (int, float64) {
	k := top
	if secs > ageBounds[k] {
		k = numAges - 1
	}
	for k > 0 && secs <= ageBounds[k-1] {
		k--
	}
	if math.IsInf(ageBounds[k], 1) {
		return k, 1
	}
	lo := 0.0
	if k > 0 {
		lo = ageBounds[k-1]
	}
	return k, (secs - lo) / (ageBounds[k] - lo)
}

// SetLife sets the life factor r is released with: what it was reweighed
// with (Group.Reweigh).
func (r *Request) SetLife(life float64) { r.life = life }

// Admit adds a request, computed at the time of admission, to the group's
// bins it overlaps: they count it as present and waiting, and its cost as
// weight.
func (grp *Group) Admit(r *Request) {
	if r.hi <= r.lo {
		return
	}
	grp.admitted = true
	grp.l.epoch++
	lo, hi := grp.l.reach(r.lo, r.hi+1)
	if hi > lo {
		grp.count(lo, min(hi, r.hi), 1, 1)
	}
	a := &grp.arrival
	a.age(r.now)
	for k, w := range r.byClass {
		a.arrived[k] += w
	}
	a.arrivedAll += r.all
	for _, pb := range r.bins {
		if pb.i < grp.l.lo || pb.i >= grp.l.hi {
			continue
		}
		sb := grp.at(pb.i)
		if sb.weight <= 0 && pb.weight > 0 {
			grp.busyBins++
		}
		sb.weight += pb.weight
		if sb.present <= 0 {
			sb.covFrom, sb.covTo = pb.from, pb.to
		} else {
			sb.covFrom, sb.covTo = min(sb.covFrom, pb.from), max(sb.covTo, pb.to)
		}
		sb.present += pb.secs
		if pb.chunk {
			sb.chunkWeight += pb.weight
			sb.chunkSecs += pb.secs
			sb.chunkSlots |= binSlots(pb.from, pb.to, float32(grp.l.width)/1e9)
		} else {
			sb.stepWeight += pb.weight
			sb.stepShared += pb.shared
		}
	}
	a.learned++
	a.stale = true // recomputed when next read: admits far outnumber reads of it
}

// age decays the arrival curve's weights to now.
func (a *arrival) age(now int64) {
	if a.learnedAt != 0 && now > a.learnedAt {
		f := math.Exp2(-float64(now-a.learnedAt) / arrivalHalfLife)
		for k := range a.arrived {
			a.arrived[k] *= f
		}
		a.arrivedAll *= f
		a.learned *= f
	}
	a.learnedAt = max(a.learnedAt, now)
}

// known returns the share of a bin's weight that has arrived by the age of
// pb (its class and the place within it), learned from the ages at which
// admitted requests' weight arrived; 1 until enough requests have.
func (a *arrival) known(pb *pieceBin) float64 {
	return a.share(int(pb.class), pb.frac)
}

// knownAt is the share of a bin's final weight the curve says arrives by
// an age of secs; 1 until it has learned.
func (a *arrival) knownAt(secs float64) float64 {
	return a.share(ageBelow(secs, numAges-1))
}

// share is the curve at frac within age class class, at least minKnown;
// 1 until it has learned.
func (a *arrival) share(class int, frac float64) float64 {
	if a.learned < minLearned || a.arrivedAll <= 0 {
		return 1
	}
	if a.stale {
		a.learnCurve()
	}
	prev := 0.0
	if class > 0 {
		prev = a.curve[class-1]
	}
	return max(minKnown, prev+frac*(a.curve[class]-prev))
}

// minKnown caps how far a bin's weight is scaled up.
const minKnown = 0.05

// learnCurve recomputes the cumulative arrival curve.
func (a *arrival) learnCurve() {
	a.stale = false
	if a.arrivedAll <= 0 {
		return
	}
	cum := 0.0
	for k, w := range a.arrived {
		cum += w
		a.curve[k] = cum / a.arrivedAll
	}
	a.curve[numAges-1] = 1
}

// Release gives an admitted request, computed at the time of release, its
// share of the group's frozen bins it ran in: per piece into shares
// (indexed like the pieces, added to), and the same share of each bin's
// time, summed over the group's GPUs, as seconds (GPU-seconds: in bins
// with a label, whether or not their energy is known); known reports
// whether any of its bins had measured energy. A GPU's bins not frozen
// give nothing. A bin's weight is its estimated final weight
// (finalWeight): the requests still running then, whose spans have not
// arrived, take their part too.
func (grp *Group) Release(r *Request, shares []float64) (known bool, seconds float64) {
	l := grp.l
	width := float64(l.width) / 1e9
	all := uint16(len(grp.members))
	for k := range r.bins {
		pb := &r.bins[k]
		if pb.i < l.lo || pb.i >= l.hi {
			continue
		}
		sb := grp.at(pb.i)
		if sb.frozen == 0 {
			continue
		}
		known = known || sb.known > 0
		if sb.weight <= 0 || (sb.known == 0 && sb.labelled == 0) {
			continue
		}
		f := grp.share(pb, sb, all, r.life)
		// Where some GPU waited through the bin, each takes its own share:
		// f + its waiting share × extra, the floor power of the part no
		// request covered left idle.
		extra := 0.0
		if sb.waiting > 0 && sb.present > 0 {
			extra = l.ratio*pb.secs*grp.arrival.known(pb)/sb.present*sb.occupied(width) - f
		}
		if sb.frozen == all && sb.final == 0 {
			// Every GPU frozen, none final: one share for all, and one for
			// their waiting shares.
			sb.shareAll += f
			sb.waitAll += extra
			shares[pb.piece] += f*sb.energy + extra*sb.waitEnergy
			seconds += (f*float64(sb.labelled) + extra*sb.waitLabelled) * width
			continue
		}
		for _, g := range grp.members {
			g.take(pb, f+g.at(pb.i).wait*extra, width, shares, &seconds)
		}
	}
	if lo, hi := l.clip(r.lo, r.hi); hi > lo {
		grp.count(lo, hi, 0, -1)
	}
	return known, seconds
}

// occupied is the share of the bin (width s) its admitted requests'
// costed pieces span, from the first one's start in it to the last one's
// end: a gap between requests inside one bin counts as occupied.
func (sb *groupBin) occupied(width float64) float64 {
	if sb.present <= 0 {
		return 0
	}
	return min(1, float64(sb.covTo-sb.covFrom)/width)
}

// share is a request's share of bin pb: its cost in the bin's engine
// steps (steps) over the bin's final cost (finalCost), of the sampling
// ratio (docs/attribution.md).
func (grp *Group) share(pb *pieceBin, sb *groupBin, gpus uint16, life float64) float64 {
	l := grp.l
	final := grp.finalWeight(pb, sb, gpus)
	st := grp.steps(sb, l.ratio*sb.weight/final)
	all := st.cost(sb)
	if all <= 0 {
		return l.ratio * pb.weight / final
	}
	own := pb.weight
	if !pb.chunk {
		own = life * (st.decode*pb.weight + st.read*pb.shared)
	}
	return l.ratio * own / grp.finalCost(pb, sb, gpus, all, final)
}

// finalCost estimates the cost bin pb's steps will count once every
// request that ran in it has arrived, all of it admitted, its final
// weight final (finalWeight). Where the group's GPUs measured the bin's
// activity, the cost model predicts it (a request's cost follows how its
// steps ran, which its tokens per second alone do not say), its excess
// over what was admitted netted as the weight's is (toCome); elsewhere
// the admitted cost is scaled as the weight is.
func (grp *Group) finalCost(pb *pieceBin, sb *groupBin, gpus uint16, all, final float64) float64 {
	if sb.activity.gpus == gpus {
		c, okC := grp.cost.predict(sb.activity)
		w, okW := grp.load.predict(sb.activity)
		if okC && okW {
			net := 0.0
			if w > sb.weight {
				net = (final - sb.weight) / (w - sb.weight)
			}
			return all + max(0, c-all)*net
		}
	}
	return all * final / sb.weight
}

// The engine steps of a bin (docs/attribution.md, "The cost estimate").
// While a prefill runs, its engine's steps carry its prompt's chunks:
// compute-bound and about 1/decodeStepRatio as long as a step that only
// decodes, so a decode makes that much fewer tokens in them, and the
// chunk, not the decodes, takes the step's weight read. Steps that only
// decode are memory-bound and draw memoryBoundPower of a compute-bound
// step's power.
const (
	decodeStepRatio  = 0.15
	memoryBoundPower = 0.64
)

// binSteps is what a decode's cost counts for in a bin: its own cost
// (decode), its shared cost (read); and the share of the bin's time its
// steps carried chunks.
type binSteps struct{ chunked, decode, read float64 }

// steps reads a bin's steps from the requests admitted to it, who took
// taken of it (of the sampling ratio): the share of its time its steps
// carried chunks, and how many decodes shared each of the others' weight
// read. The chunks admitted give the time they cover in it, counted once
// where they overlap (chunkSlots); the part of the bin still to come is
// taken as chunked as the bin's activity says the whole is (chunkModel),
// where every GPU of the group measured it, else as the part admitted.
func (grp *Group) steps(sb *groupBin, taken float64) binSteps {
	if taken <= 0 {
		return binSteps{decode: 1}
	}
	l := grp.l
	width := float64(l.width) / 1e9
	chunked := min(1, float64(bits.OnesCount32(sb.chunkSlots))/binSlotCount/taken)
	if taken < l.ratio && sb.activity.gpus == uint16(len(grp.members)) {
		if p, ok := grp.chunks.predict(sb.activity); ok {
			admitted := taken / l.ratio
			chunked = admitted*chunked + (1-admitted)*p
		}
	}
	st := binSteps{chunked: chunked, decode: (1-chunked)*memoryBoundPower + chunked*decodeStepRatio}
	if decodes := sb.present - sb.chunkSecs; decodes > 0 {
		st.read = (1 - chunked) * memoryBoundPower * taken * width / decodes
	}
	return st
}

// binSlotCount is how many equal slots a bin's chunkSlots has: 3.125 ms
// at 100 ms, a fraction of a chunked step (16–50 ms in the simulation).
const binSlotCount = 32

// binSlots is the mask of the bin's slots that [from, to), s from the
// bin's start, covers: its ends rounded to the nearest slot boundary, at
// least one slot.
func binSlots(from, to, width float32) uint32 {
	a := int(math.Round(float64(from / width * binSlotCount)))
	b := int(math.Round(float64(to / width * binSlotCount)))
	a = min(max(a, 0), binSlotCount-1)
	b = min(max(b, a+1), binSlotCount)
	return uint32(uint64(1)<<b - uint64(1)<<a)
}

// cost is what the requests admitted to sb cost in its steps st.
func (st binSteps) cost(sb *groupBin) float64 {
	return sb.chunkWeight + st.decode*sb.stepWeight + st.read*sb.stepShared
}

// Life returns request r's life factor in the group: a decode makes fewer
// tokens in chunked steps, so the tokens per second its span gives
// understate its rate in the steps that only decode by 1 − c(1 −
// decodeStepRatio), c the share of its time its bins' steps were chunked
// (Group.steps). A request's cost counts its life factor in the bins it
// ran in once it is reweighed.
func (grp *Group) Life(r *Request) float64 {
	l := grp.l
	all := uint16(len(grp.members))
	var chunked, secs float64
	for k := range r.bins {
		pb := &r.bins[k]
		if pb.chunk || pb.i < l.lo || pb.i >= l.hi {
			continue
		}
		sb := grp.at(pb.i)
		if sb.weight <= 0 {
			continue
		}
		chunked += pb.secs * grp.steps(sb, l.ratio*sb.weight/grp.finalWeight(pb, sb, all)).chunked
		secs += pb.secs
	}
	if secs <= 0 {
		return 1
	}
	return 1 / (1 - chunked/secs*(1-decodeStepRatio))
}

// Reweigh moves r's cost in the group's bins from life factor from (1 as
// admitted) to to.
func (grp *Group) Reweigh(r *Request, from, to float64) {
	d := to - from
	if d == 0 {
		return
	}
	l := grp.l
	for _, pb := range r.bins {
		if pb.chunk || pb.i < l.lo || pb.i >= l.hi {
			continue
		}
		sb := grp.at(pb.i)
		sb.stepWeight += d * pb.weight
		sb.stepShared += d * pb.shared
	}
}

// waitingShare is the share of GPU g's bin mb that it drew waiting, where
// it froze the bin idle or host_bound (the host set the pace): its floor
// power over the time its activity says it was not busy. That energy is the
// price of waiting, shared by the requests present in proportion to their
// time there (the time still to come from the arrival curve: a waiting
// GPU's activity says nothing of it); the rest is the work's, shared by
// cost (docs/attribution.md). 0 for a GPU that did not wait, or whose
// floor or energy for the bin was not known when it froze the bin.
func (g *GPU) waitingShare(mb *gpuBin) float64 {
	if !mb.waits() || !mb.known || mb.energy <= 0 || g.floorW <= 0 {
		return 0
	}
	l := g.l
	width := float64(l.width) / 1e9
	busy := 0.0
	if mb.active {
		busy = min(1, max(float64(mb.tensor)/l.tensorAt, float64(mb.dram)/l.dramAt)/width)
	}
	return min(1, g.floorW*(1-busy)*width/mb.energy)
}

// floorCreep is how far the floor power moves towards a final bin's power
// above it: 1e-4 a bin, a time constant of about 17 minutes at 100 ms,
// slow enough that busy bins do not lift it.
const floorCreep = 1e-4

// learnFloor takes a final bin's power into the GPU's floor.
func (g *GPU) learnFloor(watts float64) {
	if g.floorW == 0 || watts < g.floorW {
		g.floorW = watts
		return
	}
	g.floorW += (watts - g.floorW) * floorCreep
}

// finalWeight estimates the weight bin pb will have once every request
// that ran in it has arrived: from its GPUs' activity where all of them
// measured it and the group's load model has learned (what was admitted
// and the weight still to come, toCome), else from the arrival curve;
// never less than what has been admitted. The bin keeps the first of these
// forecasts to be scored (forecastScore), unless the fit was still warming
// up or the curve had not learned.
func (grp *Group) finalWeight(pb *pieceBin, sb *groupBin, gpus uint16) float64 {
	if sb.activity.gpus == gpus {
		if sb.toComeAt != grp.l.epoch {
			w, ok := grp.load.predict(sb.activity)
			if !ok {
				// Warming up: the curve stands in until the fit has
				// learned, and its forecast is not scored.
				return sb.weight / grp.arrival.known(pb)
			}
			sb.toCome, sb.toComeAt = grp.toCome(pb.i, w-sb.weight, gpus)*grp.keptShare(pb.i), grp.l.epoch
		}
		return sb.forecasts(sb.weight + sb.toCome)
	}
	w := sb.weight / grp.arrival.known(pb)
	if sb.activity.gpus == 0 && grp.arrival.learned >= minLearned {
		// GPUs without GPM: the curve is their forecast once it has learned.
		return sb.forecasts(w)
	}
	return w
}

// lateShare is how much of the weight bin i's activity says is still to
// come is kept at its present age: all of it up to finalize_after, then as
// the arrival curve says less can still arrive, (1 − c(age)) / (1 −
// c(finalize_after)). The fit's prediction errs whichever requests have
// arrived; once nearly all have, its excess over what was admitted is
// mostly that error, and kept for requests that never come it is taken
// from those that did (docs/attribution.md, "Long requests").
func (grp *Group) lateShare(i int64) float64 {
	l, a := grp.l, &grp.arrival
	age := float64((l.hi-i)*l.width) / 1e9
	if l.finalAge <= 0 || age <= l.finalAge || a.learned < minLearned {
		return 1
	}
	ref := a.knownAt(l.finalAge)
	if ref >= 1-1e-9 {
		return 0 // nothing arrives past finalize_after (the curve's sums round)
	}
	return max(0, min(1, (1-a.knownAt(age))/(1-ref)))
}

// keptShare is how much of the weight bin i's activity says is still to
// come is kept for requests not yet admitted. Where the engines' own counts
// bracket the bin it is all of it while they say a request ran then that
// has not been admitted, and none once every one has: what the fit predicts
// beyond the admitted is then its error, and requests the engines ran but
// never report (aborted ones) keep theirs. Elsewhere it is lateShare.
func (grp *Group) keptShare(i int64) float64 {
	l := grp.l
	unseen, known := grp.engines.unseen(l.Start(i)+l.width/2, grp.presentAt)
	switch {
	case !known:
		return grp.lateShare(i)
	case unseen:
		return 1
	}
	return 0
}

// presentAt is how many admitted requests ran in t's bin on average: their
// request-seconds in it over its width; ok is false outside the window.
func (grp *Group) presentAt(t int64) (float64, bool) {
	l := grp.l
	i := l.Index(t)
	if i < l.lo || i >= l.hi {
		return 0, false
	}
	return grp.at(i).present / (float64(l.width) / 1e9), true
}

// Running records that the inference engines serving the group's GPUs,
// and only those, counted n requests running at t; it reports false for a
// count older than the newest held, which is dropped.
func (grp *Group) Running(t int64, n float64) bool {
	l := grp.l
	if !grp.engines.add(t, n, l.width, l.lo, int(l.n)) {
		return false
	}
	l.epoch++
	return true
}

// forecasts keeps w as the bin's first forecast of its final weight, for
// forecastScore, and returns it.
func (sb *groupBin) forecasts(w float64) float64 {
	if sb.forecast == 0 {
		sb.forecast = float32(w)
	}
	return w
}

// toCome is the weight still to come in bin i, whose prediction exceeds
// what was admitted by excess. A tick's activity is spread over the bins it
// touches, while each bin's admitted weight is its own, so a bin predicted
// above its weight often has a neighbour predicted below it by the same
// work. The excess is scaled by the bins' net excess within the reach of
// bin i's readings over their gross (positive) excess: a neighbour's
// surplus offsets it, a neighbour's own excess does not add to it
// (docs/attribution.md).
func (grp *Group) toCome(i int64, excess float64, gpus uint16) float64 {
	if excess <= 0 {
		return 0
	}
	l := grp.l
	r := int64(grp.at(i).activity.reach)
	var net, gross float64
	for j := max(i-r, l.lo); j <= min(i+r, l.hi-1); j++ {
		b := grp.at(j)
		if b.activity.gpus != gpus {
			continue
		}
		p, _ := grp.load.predict(b.activity)
		net += p - b.weight
		gross += max(0, p-b.weight)
	}
	return excess * max(0, net) / gross
}

func (a *groupActivity) add(mb *gpuBin) {
	a.tensor += mb.tensor
	a.dram += mb.dram
	a.gpus++
	a.reach = max(a.reach, mb.reach)
}

// take gives a request share f of the GPU's bin pb, where the group's GPUs
// differ on it; a final bin's books take it too.
func (g *GPU) take(pb *pieceBin, f, width float64, shares []float64, seconds *float64) {
	mb := g.at(pb.i)
	if !mb.frozen || (!mb.known && mb.label == 0) {
		return
	}
	mb.share += f
	if mb.known {
		part := f * mb.energy
		shares[pb.piece] += part
		if mb.final {
			g.totals.Attributed += part
			g.totals.Correction -= part
		}
	}
	if mb.label != 0 {
		*seconds += f * width
		if mb.final {
			g.totals.AttributedSeconds += f * width
			g.totals.CorrectionSeconds -= f * width
		}
	}
}

// count adds present and pending to bins [lo, hi) (hi < the ledger's end):
// to the running counts of the GPUs whose finalisation has passed an edge,
// to the bin's differences for those it has not.
func (grp *Group) count(lo, hi int64, present, pending int32) {
	for _, e := range [2]struct {
		i    int64
		sign int32
	}{{lo, 1}, {hi, -1}} {
		ahead := false
		for _, g := range grp.members {
			if e.i < g.finalTo {
				g.runPresent += e.sign * present
				g.runPending += e.sign * pending
			} else {
				ahead = true
			}
		}
		if ahead && e.i < grp.l.hi {
			sb := grp.at(e.i)
			sb.dPresent += e.sign * present
			sb.dPending += e.sign * pending
		}
	}
}

// Unfrozen returns the smallest range holding every bin of [from, to) the
// GPU has not frozen yet; ok is false when there is none. It makes bins up
// to to addressable first.
func (g *GPU) Unfrozen(from, to int64) (lo, hi int64, ok bool) {
	if to <= from {
		return 0, 0, false
	}
	from, to = g.l.reach(from, to)
	lo, hi = to, from
	for i := from; i < to; i++ {
		if !g.at(i).frozen {
			lo, hi = min(lo, i), i+1
		}
	}
	return lo, hi, hi > lo
}

// Freeze fixes bin i's measured energy, label (label "" when nothing
// covered the bin) and activity on the GPU. A frozen bin is never changed
// again.
func (g *GPU) Freeze(i int64, energyJ float64, known bool, label bottleneck.Label, act Activity) {
	if i < g.l.lo || i >= g.l.hi {
		return
	}
	mb := g.at(i)
	if mb.frozen {
		return
	}
	mb.frozen, mb.known, mb.label = true, known, labelIndex(label)
	g.l.epoch++
	sb := g.group.at(i)
	sb.frozen++
	if known {
		mb.energy = energyJ
		sb.known++
		sb.energy += energyJ
	}
	if mb.label != 0 {
		sb.labelled++
	}
	if mb.waits() {
		sb.waiting++
	}
	if act.Known {
		mb.tensor, mb.dram, mb.active = float32(act.TensorSeconds), float32(act.DRAMSeconds), true
		mb.reach = g.l.binsReached(act.Spread)
		sb.activity.add(mb)
	}
	mb.wait = g.waitingShare(mb)
	if known {
		sb.waitEnergy += mb.wait * mb.energy
	}
	if mb.label != 0 {
		sb.waitLabelled += mb.wait
	}
}

// waits reports whether the GPU froze the bin waiting: idle, or host_bound.
func (mb *gpuBin) waits() bool { return mb.label == idleLabel || mb.label == hostBoundLabel }

// Label returns bin i's label as Labels reads it.
func (g *GPU) Label(i int64) bottleneck.Label {
	var l [1]bottleneck.Label
	return g.Labels(i, i+1, l[:0])[0]
}

// Labels appends the labels of bins [lo, hi) as the bottleneck-time
// counter will count them given the requests admitted so far: a final
// bin's as it was booked; a frozen idle bin's as host_bound only where an
// admitted request is present in it (its whole window, queue too), as
// Finalize will book it. A span that is not a request present (a client's
// view of one) then reads what the counter counts. "" where not frozen or
// unknown.
func (g *GPU) Labels(lo, hi int64, dst []bottleneck.Label) []bottleneck.Label {
	l := g.l
	present := g.runPresent
	j := g.finalTo
	for i := lo; i < hi; i++ {
		if i < l.lo || i >= l.hi {
			dst = append(dst, "")
			continue
		}
		mb := g.at(i)
		if mb.final || i < g.finalTo {
			dst = append(dst, labelOf(mb.label))
			continue
		}
		for ; j <= i; j++ {
			present += g.group.at(j).dPresent
		}
		if mb.label == idleLabel && present > 0 {
			dst = append(dst, bottleneck.HostBound)
			continue
		}
		dst = append(dst, labelOf(mb.label))
	}
	return dst
}

// OnFinal has fn told each bin as it becomes final, with its final label
// ("" for none): those Finalize books and those dropped past the horizon
// alike, which are gone once dropped.
func (g *GPU) OnFinal(fn func(bin int64, label bottleneck.Label)) { g.onFinal = fn }

// FinalTo returns the first bin that is not final.
func (g *GPU) FinalTo() int64 { return g.finalTo }

// Finalize books the frozen bins from FinalTo up to to, in order, stopping at
// the first that is not frozen or has a request waiting for release.
func (g *GPU) Finalize(to int64) {
	if !g.l.started {
		return
	}
	g.l.reach(g.finalTo, to)
	g.finalize(to, false)
}

// LearnAhead has the GPU's group learn, until it has learned, its bins
// below to that every GPU froze, released or not (Group.learnAhead): for
// books whose requests are held until the group has learned. Call it
// before Finalize with the same to.
func (g *GPU) LearnAhead(to int64) {
	if g.l.started {
		g.group.learnAhead(to)
	}
}

// learn offers the group's wait score and fits bin i, every GPU of the
// group having frozen it: its weight is what every request in it brought.
// The fits learn it where every GPU measured its activity. Each bin is
// learned once, in order (learnedTo).
func (grp *Group) learn(i int64) {
	if i < grp.learnedTo {
		return
	}
	grp.learnedTo = i + 1
	sb := grp.at(i)
	all := uint16(len(grp.members))
	if sb.weight <= 0 {
		return
	}
	grp.waits.add(float64(sb.waiting) / float64(all))
	if sb.activity.gpus != all {
		return
	}
	l := grp.l
	grp.load.learn(sb.activity, sb.weight)
	st := grp.steps(sb, l.ratio)
	grp.cost.learn(sb.activity, st.cost(sb))
	grp.chunks.learn(sb.activity, st.chunked)
}

// learnAhead learns, until the group has learned, its bins below to
// that every GPU froze, whether or not a request in them is still held:
// to lies finalize_after behind the newest energy, so every request that
// ran in them has been admitted and their weight is complete. Otherwise
// bins are learned as they become final, once their requests were released
// with their life factors; but a request held back until the fits have
// learned keeps its bins from becoming final first.
func (grp *Group) learnAhead(to int64) {
	l := grp.l
	all := uint16(len(grp.members))
	for i := max(grp.learnedTo, l.lo); i < min(to, l.hi) && !grp.Learned(); i++ {
		if grp.at(i).frozen < all {
			return // a GPU's energy is not in yet
		}
		grp.learn(i)
	}
}

// Learned reports whether every group requests were admitted to has
// learned (Group.Learned).
func (l *Ledger) Learned() bool {
	for _, grp := range l.groups {
		if grp.admitted && !grp.Learned() {
			return false
		}
	}
	return true
}

// Understated reports whether the group's forecasts of its bins' final
// weight, made when a release first read them, have fallen short of the
// weight the bins had at ScoreAge, each counting the part the arrival
// curve says arrives by then (forecastScore): requests still running when
// their neighbours were released took more than the forecasts left for
// them.
func (grp *Group) Understated() bool { return grp.forecasts.understated() }

// Waiting reports whether the group's GPUs waited for their host through
// most of the bins requests ran in (waitScore): there a request's share is
// mostly by its time in the bin against the time still to come, which only
// the arrival curve can forecast, since a waiting GPU's activity says
// nothing of it (docs/attribution.md, "Long requests").
func (grp *Group) Waiting() bool { return grp.waits.waiting() }

// Learned reports whether the group's fits have learned enough final bins
// to say how a bin's activity predicts its final weight; until then a
// request's share comes from the arrival curve alone, which errs most in a
// collector's first minute (docs/attribution.md, "Warming up").
func (grp *Group) Learned() bool { return grp.load.learned() }

// Learning reports whether the group has not learned yet but serves
// traffic it will learn from: as many requests as its arrival curve needs
// (minLearned, decayed), or requests in as many bins as its fits need
// (minLoadBins; a few long requests). With a few short requests only, a
// request held for it would wait for nothing.
func (grp *Group) Learning() bool {
	return !grp.Learned() && (grp.arrival.learned >= minLearned || grp.busyBins >= minLoadBins)
}

// finalize books bins [finalTo, to); force books them even when a request
// is waiting or they are not frozen (they are being dropped).
func (g *GPU) finalize(to int64, force bool) {
	l := g.l
	l.epoch++ // the load model learns
	to = min(to, l.hi)
	w := float64(l.width) / 1e9
	for ; g.finalTo < to; g.finalTo++ {
		sb, mb := g.group.at(g.finalTo), g.at(g.finalTo)
		present, pending := g.runPresent+sb.dPresent, g.runPending+sb.dPending
		if !force && (!mb.frozen || pending > 0) {
			return
		}
		g.runPresent, g.runPending = present, pending
		mb.final = true
		sb.final++
		if !force && sb.final == uint16(len(g.group.members)) {
			g.group.learn(g.finalTo) // its last GPU made it final
		}
		if mb.label == idleLabel && present > 0 {
			mb.label = hostBoundLabel
		}
		// In a bin the GPU waited through, the floor power of the part no
		// request covered is idle (Release leaves it), at the floor the
		// releases saw: the one it froze with.
		idle := 0.0
		if sb.weight > 0 && sb.waiting > 0 {
			idle = mb.wait * (1 - sb.occupied(w))
		}
		if mb.known && mb.energy > 0 {
			g.learnFloor(mb.energy / w)
		}
		if g.onFinal != nil {
			g.onFinal(g.finalTo, labelOf(mb.label))
		}
		share := sb.shareAll + mb.share + mb.wait*sb.waitAll
		if mb.label != 0 {
			g.totals.Seconds.Add(labelOf(mb.label), w)
			if sb.weight <= 0 {
				g.totals.IdleSeconds += w
			} else {
				rest := w * (1 - idle)
				g.totals.IdleSeconds += w - rest
				g.totals.UnsampledSeconds += rest - l.ratio*rest
				g.totals.AttributedSeconds += share * w
				g.totals.CorrectionSeconds += l.ratio*rest - share*w
			}
		}
		if !mb.known {
			continue
		}
		g.totals.Measured += mb.energy
		if sb.weight <= 0 {
			g.totals.Idle += mb.energy
			continue
		}
		rest := mb.energy * (1 - idle)
		taken := l.ratio * rest
		given := share * mb.energy
		g.totals.Idle += mb.energy - rest
		g.totals.Unsampled += rest - taken
		g.totals.Attributed += given
		g.totals.Correction += taken - given
	}
}

// Totals returns the GPU's books over its final bins.
func (g *GPU) Totals() Totals { return g.totals }
