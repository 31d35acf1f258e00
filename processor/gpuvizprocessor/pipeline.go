package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"math"
	"time"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/inference"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// pipeline is the per-GPU work of a release round: read each GPU's bins
// once, label each bin once (frozen in the GPU's book, so spans, phase spans
// and the bottleneck-time counter see the same label), share energy through
// the books, and compute what all spans of one GPU set share once per set.
// Plain values in and out: no pdata. Not safe for concurrent use.
type pipeline struct {
	store         *timeline.Store
	thresholds    bottleneck.Thresholds
	bookCfg       attribution.Config
	finalizeAfter time.Duration
	// warmupWait is attribution.warmup_wait: spans are held while their
	// GPUs' fits warm up, so the fits learn before bins are final.
	warmupWait time.Duration
	ledger     *attribution.Ledger
	books      map[timeline.Key]*attribution.GPU
	sets       map[string]*gpuSet
	// engines sums the servers' running-request counts per GPU set
	// (running).
	engines engineTally
	// sampleReach is how far before its newest point a GPU's samples
	// describe: history.retention, the oldest sample's history.max_span
	// too. A span ending before that on every GPU of its set has no bins
	// to read: a round leaves it out, so that a span from long ago
	// released beside current ones does not make the round read every bin
	// between them.
	sampleReach time.Duration

	// onFreeze and onFinal are the live view's: told each bin's label as
	// it freezes, and again once it is final, at the horizon too
	// (attribution.GPU.OnFinal).
	onFreeze func(k timeline.Key, binStart int64, label bottleneck.Label)
	onFinal  func(k timeline.Key, binStart int64, label bottleneck.Label)

	// Scratch reused across rounds.
	gpus     map[timeline.Key]*gpuRound
	groups   map[*gpuSet]*groupRound
	earliest map[*gpuSet]int64 // per set, the earliest its GPUs' samples describe (earliestSample)
	cost     attribution.Request
	name     []byte
}

// gpuSet is a set of GPUs that spans matched, interned: the spans of one
// set share what is computed for it, found by pointer, and its books.
type gpuSet struct {
	name string // its key in pipeline.sets
	keys []timeline.Key
	gpus []*attribution.GPU // nil until the pipeline needs them
	// groups are the ledger's groups that make up gpus, as of version.
	groups  []*attribution.Group
	version uint64
	// warmingSince is when the set first had to wait for its GPUs' fits
	// (warming); zero before.
	warmingSince time.Time
}

// set returns the interned set of keys.
func (p *pipeline) set(keys []timeline.Key) *gpuSet {
	p.name = p.name[:0]
	for _, k := range keys {
		p.name = append(append(append(append(p.name, k.Host...), 0), k.GPU...), 0)
	}
	if s, ok := p.sets[string(p.name)]; ok {
		return s
	}
	s := &gpuSet{name: string(p.name), keys: keys}
	p.sets[s.name] = s
	return s
}

// groupsOf returns the groups of books that make up a set's GPUs: the
// requests of one set are admitted and released once per group, not once
// per GPU.
func (p *pipeline) groupsOf(s *gpuSet) []*attribution.Group {
	if s.gpus == nil {
		s.gpus = make([]*attribution.GPU, len(s.keys))
		for i, k := range s.keys {
			s.gpus[i] = p.book(k)
		}
		s.groups = nil
	}
	if s.groups == nil || s.version != p.ledger.Version() {
		s.groups = p.ledger.Groups(s.gpus, s.groups)
		s.version = p.ledger.Version()
	}
	return s.groups
}

// holdsLong reports whether the set's spans wait for their neighbours
// through their running time: a group of its GPUs has forecast its bins'
// final weight short (attribution.Group.Understated: its requests run long
// enough that many are still running when their neighbours are released),
// or waited for its host through most of its bins
// (attribution.Group.Waiting: there the split is by time present, and the
// time still to come is the arrival curve's guess).
func (p *pipeline) holdsLong(s *gpuSet) bool {
	for _, g := range p.groupsOf(s) {
		if g.Understated() || g.Waiting() {
			return true
		}
	}
	return false
}

// warming reports whether the set's GPUs are warming up at now: a group
// of them is learning (attribution.Group.Learning: it has not learned, but
// has the traffic to learn from), they measure the tensor and DRAM activity
// the fits learn from, and warmup_wait has not passed since the set first
// had to wait. Past that it is not waited for, learned or not.
func (p *pipeline) warming(s *gpuSet, now time.Time) bool {
	learning := false
	for _, g := range p.groupsOf(s) {
		learning = learning || g.Learning()
	}
	if !learning {
		return false
	}
	if s.warmingSince.IsZero() {
		for _, k := range s.keys {
			if !p.store.Has(k, timeline.TensorActivity) || !p.store.Has(k, timeline.DRAMActivity) {
				return false
			}
		}
		s.warmingSince = now
	}
	return now.Before(s.warmingSince.Add(p.warmupWait))
}

func newPipeline(store *timeline.Store, cfg *Config) *pipeline {
	return &pipeline{
		store: store, thresholds: cfg.thresholds(), bookCfg: cfg.attribution(), finalizeAfter: cfg.Attribution.FinalizeAfter,
		warmupWait: cfg.Attribution.WarmupWait, sampleReach: cfg.History.Retention + cfg.History.MaxSpan,
		ledger: attribution.NewLedger(cfg.attribution()), books: map[timeline.Key]*attribution.GPU{}, sets: map[string]*gpuSet{}, engines: engineTally{},
		gpus: map[timeline.Key]*gpuRound{}, groups: map[*gpuSet]*groupRound{}, earliest: map[*gpuSet]int64{},
	}
}

func (p *pipeline) book(k timeline.Key) *attribution.GPU {
	b := p.books[k]
	if b == nil {
		b = p.ledger.Add()
		b.OnFinal(func(bin int64, label bottleneck.Label) {
			if p.onFinal != nil {
				p.onFinal(k, p.ledger.Start(bin), label)
			}
		})
		p.books[k] = b
	}
	return b
}

// admit puts a matched request's cost in its GPUs' books at now.
func (p *pipeline) admit(hs *heldSpan, now time.Time) {
	if !hs.takesShare() || hs.set == nil {
		return
	}
	hs.pieces = costPieces(hs.req, hs.pieceBuf[:0])
	p.cost.Cost(hs.pieces, int64(p.bookCfg.Resolution), now.UnixNano())
	for _, g := range p.groupsOf(hs.set) {
		g.Admit(&p.cost)
	}
	hs.life = 1 // as admitted; its round reweighs it (reweigh)
}

// gpuRound is one GPU's bins for a round: the timeline's, and the label of
// each.
type gpuRound struct {
	lo, hi int64 // bin indexes
	bins   []timeline.Bin
	labels []bottleneck.Label
	// counter: every bin with known energy came from the energy counter.
	counter bool
}

// Columns of a group's prefix sums, per bin: the signals' integrals and
// covered seconds summed over the group's GPUs, coverage, energy drawn, and
// GPU-seconds per label.
const (
	colUtil = iota
	colUtilCov
	colSM
	colSMCov
	colTensor
	colTensorCov
	colDRAM
	colDRAMCov
	colMemCtl
	colMemCtlCov
	colPower
	colPowerCov
	colCoverage
	colEnergy
	colEnergyKnown
	colLabels
	numCols = colLabels + len(bottleneck.Times{})
)

// groupRound is what the spans of one GPU set share in a round.
type groupRound struct {
	keys    []timeline.Key
	lo, n   int64
	width   int64
	prefix  []float64 // (n+1) × numCols
	utilMax []float64 // per bin, max over the GPUs
	memMax  []float64
	counter bool
}

// spanResult is what the pipeline found for one span; phases are indexed
// like the request's. It holds no pointer (no string either), so a
// release's results, one buffer of tens of thousands at 20,000 spans/s,
// are never scanned by the garbage collector; and it keeps only what
// annotate and the emitter read (a label, not the time of every label),
// so that buffer is megabytes, not a hundred.
type spanResult struct {
	stats       gpuStats
	energy      float64
	phaseEnergy [inference.MaxPhases]float64
	// labelSeconds are the GPU-seconds the request's label held over it,
	// labelShare their share of all its labelled GPU-seconds (0: an
	// unknown label).
	labelSeconds, labelShare float64
	// gpuSeconds is the request's share of its GPUs' time, split like the
	// energy (GPU-seconds, summed over its GPUs; the accounting's).
	gpuSeconds  float64
	label       bottleneck.ID
	phaseLabels [inference.MaxPhases]bottleneck.ID
	phaseShares [inference.MaxPhases]float64
	ok          bool // the span's GPUs had samples in its window
	energyKnown bool
}

// phaseStats are the statistics of a span's phases, which only phase spans
// carry: computed, and given a buffer, only with phase spans on.
type phaseStats [inference.MaxPhases]gpuStats

// gpuStats are a window's statistics over all of a request's GPUs.
type gpuStats struct {
	coverage          float64
	utilMean, utilMax float64
	sm, tensor, dram  float64
	memCtl            float64
	memoryPeak        float64
	powerMean         float64
	busySeconds       float64
	hasUtil           bool
	hasSM, hasTensor  bool
	hasDRAM, hasMem   bool
	hasPower          bool
	// energySource is EnergyCounter when every GPU's energy came from its
	// energy counter, else EnergyPower (integrated power readings).
	energySource timeline.EnergySource
}

// round computes the results of the spans released together at now into
// results, one per span (len(spans) of them; they are overwritten), and
// with phase spans on their phases' statistics into phases (as many; nil
// with phase spans off).
func (p *pipeline) round(spans []*heldSpan, now time.Time, results []spanResult, phases []phaseStats) {
	clear(p.gpus)
	clear(p.groups)
	clear(p.earliest)
	width := int64(p.bookCfg.Resolution)
	idx := func(t int64) int64 { return floorDiv(t, width) }
	reads := func(hs *heldSpan) bool {
		if hs.set == nil {
			return false
		}
		e, ok := p.earliest[hs.set]
		if !ok {
			e = p.earliestSample(hs.set.keys)
			p.earliest[hs.set] = e
		}
		return hs.req.End.UnixNano() >= e
	}
	// The bins each GPU and each GPU set needs.
	for _, hs := range spans {
		if !reads(hs) {
			continue
		}
		lo, hi := idx(hs.req.Start.UnixNano()), idx(hs.req.End.UnixNano()-1)+1
		hi = max(hi, lo+1)
		gr := p.groups[hs.set]
		if gr != nil && lo >= gr.lo && hi <= gr.lo+gr.n {
			continue // inside what the set's GPUs already read
		}
		for _, k := range hs.set.keys {
			g := p.gpus[k]
			if g == nil {
				g = &gpuRound{lo: lo, hi: hi}
				p.gpus[k] = g
			}
			g.lo, g.hi = min(g.lo, lo), max(g.hi, hi)
		}
		if gr == nil {
			gr = &groupRound{keys: hs.set.keys, lo: lo, n: hi - lo, width: width}
			p.groups[hs.set] = gr
		}
		end := max(gr.lo+gr.n, hi)
		gr.lo = min(gr.lo, lo)
		gr.n = end - gr.lo
	}
	for k, g := range p.gpus {
		p.readGPU(k, g)
	}
	for _, gr := range p.groups {
		p.sum(gr)
	}
	p.reweigh(spans, now.UnixNano())
	for i, hs := range spans {
		results[i] = spanResult{}
		var ps *phaseStats
		if phases != nil {
			ps = &phases[i]
			*ps = phaseStats{}
		}
		if reads(hs) {
			p.result(hs, p.groups[hs.set], now.UnixNano(), &results[i], ps)
		}
	}
}

// earliestSample is the earliest time (Unix ns) any of keys' samples can
// describe; MaxInt64 when none has a sample.
func (p *pipeline) earliestSample(keys []timeline.Key) int64 {
	e := int64(math.MaxInt64)
	for _, k := range keys {
		if newest, ok := p.store.Newest(k); ok {
			e = min(e, newest.Add(-p.sampleReach).UnixNano())
		}
	}
	return e
}

func floorDiv(t, w int64) int64 {
	i := t / w
	if t%w < 0 {
		i--
	}
	return i
}

// readGPU reads GPU k's bins for the round and freezes those whose energy
// has arrived in its book, labelled; the labels of bins still open are
// computed for this round only.
func (p *pipeline) readGPU(k timeline.Key, g *gpuRound) {
	width := time.Duration(p.bookCfg.Resolution)
	n := int(g.hi - g.lo)
	g.bins = p.store.Bins(k, time.Unix(0, g.lo*int64(width)), width, n, g.bins[:0])
	g.labels = g.labels[:0]
	g.counter = true
	book := p.book(k)
	settled, _ := p.store.Settled(k)
	p.freeze(k, book, g.lo, g.bins, settled)
	limit, _ := p.store.PowerLimit(k)
	g.labels = book.Labels(g.lo, g.hi, g.labels)
	for i := range g.bins {
		b := &g.bins[i]
		if b.EnergyKnown && b.EnergySource != timeline.EnergyCounter {
			g.counter = false
		}
		if g.labels[i] == "" {
			g.labels[i] = p.classify(b, limit, true)
		}
	}
}

// freeze fixes, in k's book, the energy and label of the bins of [lo,
// lo+len(bins)) whose energy has arrived (they end by settled).
func (p *pipeline) freeze(k timeline.Key, book *attribution.GPU, lo int64, bins []timeline.Bin, settled time.Time) {
	a, z, ok := book.Unfrozen(lo, lo+int64(len(bins)))
	if !ok {
		return
	}
	s := settled.UnixNano()
	limit, _ := p.store.PowerLimit(k)
	for i := a; i < z; i++ {
		if p.ledger.Start(i+1) > s {
			break
		}
		b := &bins[i-lo]
		l := p.classify(b, limit, false)
		book.Freeze(i, b.EnergyJ, b.EnergyKnown, l, activity(b, float64(p.bookCfg.Resolution)/1e9))
		if p.onFreeze != nil {
			p.onFreeze(k, p.ledger.Start(i), l)
		}
	}
}

// activity is a bin's tensor and DRAM activity-seconds, where GPM
// measured both: their means over what they covered, times the bin's
// width (seconds); spread as far as the longer of their readings reach.
func activity(b *timeline.Bin, width float64) attribution.Activity {
	t, d := b.Covered[timeline.TensorActivity], b.Covered[timeline.DRAMActivity]
	if t <= 0 || d <= 0 {
		return attribution.Activity{}
	}
	spread := max(b.Stretch[timeline.TensorActivity], b.Stretch[timeline.DRAMActivity])
	return attribution.Activity{
		TensorSeconds: b.Integral[timeline.TensorActivity] / t * width,
		DRAMSeconds:   b.Integral[timeline.DRAMActivity] / d * width,
		Spread:        time.Duration(spread * float64(time.Second)),
		Known:         true,
	}
}

// classify labels one bin of a GPU whose power limit is powerLimit (W, 0
// when unknown); "" when no signal covers it. present says whether a
// request is known to be in flight.
func (p *pipeline) classify(b *timeline.Bin, powerLimit float64, present bool) bottleneck.Label {
	covered := false
	for _, c := range b.Covered {
		covered = covered || c > 0
	}
	if !covered {
		return ""
	}
	in := classifierInputs(b, float64(p.bookCfg.Resolution)/1e9, powerLimit)
	if present {
		in.RequestsInFlight = 1
	}
	return bottleneck.Classify(in, p.thresholds)
}

// classifierInputs turns one bin, width seconds long, of a GPU whose power
// limit is powerLimit (W, 0 when unknown) into the classifier's inputs.
func classifierInputs(b *timeline.Bin, width, powerLimit float64) bottleneck.Inputs {
	mean := func(sig timeline.Signal) (float64, bool) {
		if b.Covered[sig] <= 0 {
			return 0, false
		}
		return b.Integral[sig] / b.Covered[sig], true
	}
	var in bottleneck.Inputs
	in.Utilization, in.HasUtilization = mean(timeline.Utilization)
	in.MemoryController, in.HasMemoryController = mean(timeline.MemoryController)
	in.SMActivity, in.HasSMActivity = mean(timeline.SMActivity)
	in.TensorActivity, in.HasTensorActivity = mean(timeline.TensorActivity)
	in.DRAMActivity, in.HasDRAMActivity = mean(timeline.DRAMActivity)
	in.PowerThrottled, in.HasPowerThrottled = mean(timeline.PowerThrottled)
	in.ThermalThrottled, in.HasThermalThrottled = mean(timeline.ThermalThrottled)
	if used, ok := mean(timeline.MemoryUsed); ok {
		if limit, ok := mean(timeline.MemoryLimit); ok && limit > 0 {
			in.MemoryUsedFraction, in.HasMemoryUsed = used/limit, true
		}
	}
	in.PCIeFraction, in.HasPCIe = linkFraction(mean, timeline.PCIeRx, timeline.PCIeTx, timeline.PCIeCapacity)
	in.NVLinkFraction, in.HasNVLink = linkFraction(mean, timeline.NVLinkRx, timeline.NVLinkTx, timeline.NVLinkCapacity)
	if power, ok := mean(timeline.Power); ok && powerLimit > 0 {
		in.Power, in.PowerLimit, in.HasPowerDetail = power, powerLimit, true
		// The finer of the two activity readings: the other held its value
		// over it.
		activity := timeline.TensorActivity
		if b.Stretch[timeline.DRAMActivity] < b.Stretch[activity] {
			activity = timeline.DRAMActivity
		}
		in.ActivityReadingPower = b.ReadingPower[activity]
		in.ThrottleReadingPower = b.ReadingPower[timeline.PowerThrottled]
		in.ThrottleSpan = b.Stretch[timeline.PowerThrottled] / width
	}
	return in
}

// linkFraction is the busier direction's throughput over the link's
// capacity.
func linkFraction(mean func(timeline.Signal) (float64, bool), rx, tx, capacity timeline.Signal) (float64, bool) {
	c, ok := mean(capacity)
	if !ok || c <= 0 {
		return 0, false
	}
	r, hasR := mean(rx)
	t, hasT := mean(tx)
	if !hasR && !hasT {
		return 0, false
	}
	return max(r, t) / c, true
}

// sum builds a GPU set's prefix sums over its bins.
func (p *pipeline) sum(gr *groupRound) {
	n := int(gr.n)
	gr.prefix = grow(gr.prefix, (n+1)*numCols)
	gr.utilMax = grow(gr.utilMax, n)
	gr.memMax = grow(gr.memMax, n)
	gr.counter = true
	row := make([]float64, numCols)
	sigCols := [...]struct {
		sig timeline.Signal
		col int
	}{
		{timeline.Utilization, colUtil}, {timeline.SMActivity, colSM}, {timeline.TensorActivity, colTensor},
		{timeline.DRAMActivity, colDRAM}, {timeline.MemoryController, colMemCtl}, {timeline.Power, colPower},
	}
	for i := range n {
		clear(row)
		var labels bottleneck.Times
		um, mm := 0.0, 0.0
		for _, k := range gr.keys {
			g := p.gpus[k]
			b := &g.bins[gr.lo+int64(i)-g.lo]
			for _, sc := range sigCols {
				row[sc.col] += b.Integral[sc.sig]
				row[sc.col+1] += b.Covered[sc.sig]
			}
			row[colCoverage] += max(b.Covered[timeline.Utilization], b.Covered[timeline.Power])
			if b.EnergyKnown {
				row[colEnergy] += b.EnergyJ
				row[colEnergyKnown]++
			}
			labels.Add(g.labels[gr.lo+int64(i)-g.lo], float64(gr.width)/1e9) // "" adds nothing
			if b.Covered[timeline.Utilization] > 0 {
				um = max(um, b.Max[timeline.Utilization])
			}
			if b.Covered[timeline.MemoryUsed] > 0 {
				mm = max(mm, b.Max[timeline.MemoryUsed])
			}
			gr.counter = gr.counter && g.counter
		}
		copy(row[colLabels:], labels[:])
		gr.utilMax[i], gr.memMax[i] = um, mm
		prev, cur := gr.prefix[i*numCols:(i+1)*numCols], gr.prefix[(i+1)*numCols:(i+2)*numCols]
		for c := range numCols {
			cur[c] = prev[c] + row[c]
		}
	}
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// edge returns the prefix-sum row at or before time t (ns) and how far
// into the next bin t lies (0..1): the prefix sums at t are linear within
// a bin.
func (gr *groupRound) edge(t int64) (row int, frac float64) {
	d := t - gr.lo*gr.width
	switch {
	case d <= 0:
		return 0, 0
	case d >= gr.n*gr.width:
		return int(gr.n), 0
	}
	return int(d / gr.width), float64(d%gr.width) / float64(gr.width)
}

// window returns the columns' sums over [from, to] (ns).
func (gr *groupRound) window(from, to int64, dst *[numCols]float64) {
	gr.columns(from, to, 0, numCols, dst)
}

// columns returns the sums of columns [lo, hi) over [from, to] (ns).
func (gr *groupRound) columns(from, to int64, lo, hi int, dst *[numCols]float64) {
	a, fa := gr.edge(from)
	z, fz := gr.edge(to)
	pa, pz := gr.prefix[a*numCols:(a+1)*numCols], gr.prefix[z*numCols:(z+1)*numCols]
	var na, nz []float64
	if fa > 0 {
		na = gr.prefix[(a+1)*numCols : (a+2)*numCols]
	}
	if fz > 0 {
		nz = gr.prefix[(z+1)*numCols : (z+2)*numCols]
	}
	for c := lo; c < hi; c++ {
		top, bottom := pz[c], pa[c]
		if nz != nil {
			top += fz * (nz[c] - pz[c])
		}
		if na != nil {
			bottom += fa * (na[c] - pa[c])
		}
		dst[c] = top - bottom
	}
}

// labelTimes returns the GPU-seconds per label and the energy drawn over
// [from, to] (ns): what a phase needs when it gets no span of its own.
func (gr *groupRound) labelTimes(from, to int64) (bottleneck.Times, float64) {
	var w [numCols]float64
	gr.columns(from, to, colEnergy, numCols, &w)
	var labels bottleneck.Times
	for j := range labels {
		labels[j] = w[colLabels+j]
	}
	return labels, w[colEnergy]
}

// stats summarises a window of the set from its column sums.
func (gr *groupRound) stats(from, to int64) (gpuStats, bottleneck.Times, float64, bool) {
	var w [numCols]float64
	gr.window(from, to, &w)
	var s gpuStats
	n := float64(len(gr.keys))
	secs := float64(to-from) / 1e9
	ratio := func(sum, cov int) (float64, bool) {
		if w[cov] <= 1e-12 {
			return 0, false
		}
		return w[sum] / w[cov], true
	}
	s.utilMean, s.hasUtil = ratio(colUtil, colUtilCov)
	s.sm, s.hasSM = ratio(colSM, colSMCov)
	s.tensor, s.hasTensor = ratio(colTensor, colTensorCov)
	s.dram, s.hasDRAM = ratio(colDRAM, colDRAMCov)
	s.memCtl, s.hasMem = ratio(colMemCtl, colMemCtlCov)
	if pw, ok := ratio(colPower, colPowerCov); ok {
		s.powerMean, s.hasPower = pw*n, true
		// Power's samples may cover less of the window than its energy
		// does: a ring of history.max_points_per_signal holds 41 s of the
		// driver's 20 ms samples at the default, the counter minutes. The
		// mean is then the energy the GPUs drew over the window's length.
		bins := n * float64(to-from) / float64(gr.width)
		if secs > 0 && w[colPowerCov] < n*secs*(1-1e-9) && w[colEnergyKnown] >= bins*(1-1e-9) {
			s.powerMean = w[colEnergy] / secs
		}
	}
	s.busySeconds = w[colUtil]
	if secs > 0 {
		s.coverage = min(1, w[colCoverage]/(n*secs))
	}
	s.energySource = timeline.EnergyPower
	if gr.counter {
		s.energySource = timeline.EnergyCounter
	}
	a, z := gr.binRange(from, to)
	for i := a; i < z; i++ {
		s.utilMax = max(s.utilMax, gr.utilMax[i])
		s.memoryPeak = max(s.memoryPeak, gr.memMax[i])
	}
	var labels bottleneck.Times
	for j := range labels {
		labels[j] = w[colLabels+j]
	}
	return s, labels, w[colEnergy], w[colEnergyKnown] > 0
}

// knownShare is a label's share of the labelled time; 0 for unknown, which
// says nothing of how dominant a resource was.
func knownShare(t *bottleneck.Times, id bottleneck.ID) float64 {
	if id.Label() == bottleneck.Unknown {
		return 0
	}
	return t.Share(id)
}

// binRange returns the bins of the round [from, to] overlaps.
func (gr *groupRound) binRange(from, to int64) (int, int) {
	a := max(0, floorDiv(from, gr.width)-gr.lo)
	z := min(gr.n, floorDiv(to-1, gr.width)-gr.lo+1)
	return int(a), int(max(a, z))
}

// reweigh gives every request of the round its life factor in its books
// before any is released, so that the round's shares do not depend on the
// order of its requests. A request in several groups takes their mean.
func (p *pipeline) reweigh(spans []*heldSpan, now int64) {
	for _, hs := range spans {
		if hs.set == nil || len(hs.pieces) == 0 {
			continue // admit left it out of the books
		}
		p.cost.Cost(hs.pieces, int64(p.bookCfg.Resolution), now)
		groups := p.groupsOf(hs.set)
		var life float64
		for _, g := range groups {
			life += g.Life(&p.cost)
		}
		life /= float64(len(groups))
		for _, g := range groups {
			g.Reweigh(&p.cost, hs.life, life)
		}
		hs.life = life
	}
}

// result fills one span's result from its GPU set's sums and its books,
// and its phases' statistics into ps where phase spans need them.
func (p *pipeline) result(hs *heldSpan, gr *groupRound, now int64, r *spanResult, ps *phaseStats) {
	req := hs.req
	from, to := req.Start.UnixNano(), req.End.UnixNano()
	stats, labels, drawn, drawnKnown := gr.stats(from, to)
	r.stats, r.label = stats, labels.DominantID()
	r.labelSeconds, r.labelShare = labels[r.label], knownShare(&labels, r.label)
	r.ok = r.stats.coverage > 0
	var phaseDrawn [inference.MaxPhases]float64
	for i, ph := range req.Phases {
		var labels bottleneck.Times
		if ps != nil {
			ps[i], labels, phaseDrawn[i], _ = gr.stats(ph.Start.UnixNano(), ph.End.UnixNano())
		} else {
			labels, phaseDrawn[i] = gr.labelTimes(ph.Start.UnixNano(), ph.End.UnixNano())
		}
		r.phaseLabels[i] = labels.DominantID()
		r.phaseShares[i] = knownShare(&labels, r.phaseLabels[i])
	}
	switch {
	case req.Aggregate:
		// A batch step or Triton's compute span: the energy its GPUs drew,
		// unshared (the work of everything it aggregates).
		r.energy, r.energyKnown = drawn, drawnKnown
		r.phaseEnergy = phaseDrawn
	case req.Client:
		// The server's span takes the energy.
	default:
		var shares [inference.MaxPhases]float64
		p.cost.Cost(hs.pieces, int64(p.bookCfg.Resolution), now)
		p.cost.SetLife(hs.life)
		for _, g := range p.groupsOf(hs.set) {
			known, secs := g.Release(&p.cost, shares[:])
			r.energyKnown = r.energyKnown || known
			r.gpuSeconds += secs
		}
		for i, s := range shares[:len(hs.pieces)] {
			r.energy += s
			if len(req.Phases) == len(hs.pieces) {
				r.phaseEnergy[i] = s
			}
		}
	}
	if math.IsNaN(r.energy) {
		r.energy, r.energyKnown = 0, false
	}
}

// finalize books, on every GPU the timeline knows, the bins that are
// finalize_after behind its newest energy; with upTo, no further than
// behind the Settled time upTo has for the GPU, and not at all on a GPU it
// lacks.
func (p *pipeline) finalize(keys []timeline.Key, upTo map[timeline.Key]time.Time) {
	width := time.Duration(p.bookCfg.Resolution)
	var bins []timeline.Bin
	for _, k := range keys {
		settled, ok := p.store.Settled(k)
		if upTo != nil {
			at, had := upTo[k]
			ok = ok && had
			if at.Before(settled) {
				settled = at
			}
		}
		if !ok {
			continue
		}
		book := p.book(k)
		to := p.ledger.Index(settled.Add(-p.finalizeAfter).UnixNano())
		if p.warmupWait > 0 {
			book.LearnAhead(to) // spans are held while it warms up
		}
		from := book.FinalTo()
		if from == 0 {
			// The ledger's first GPUs start where finality does; a GPU
			// added later starts at the ledger's window (Ledger.Add).
			from = to - int64(p.finalizeAfter/width)
		}
		if a, z, ok := book.Unfrozen(from, to); ok {
			bins = p.store.Bins(k, time.Unix(0, p.ledger.Start(a)), width, int(z-a), bins[:0])
			p.freeze(k, book, a, bins, settled)
		}
		book.Finalize(to)
	}
}

// forget drops the books of GPUs the timeline forgot, and the sets (spans
// still held keep theirs, whose books are found again when needed).
func (p *pipeline) forget() {
	for k, b := range p.books {
		if _, ok := p.store.Newest(k); !ok {
			p.ledger.Remove(b)
			delete(p.books, k)
		}
	}
	for name, s := range p.sets {
		s.gpus, s.groups = nil, nil
		delete(p.sets, name)
	}
	p.engines.forget()
}

// running records a server's count for the GPU set it matched and hands
// the set's sum to the set's group of books, where the set is one whole
// group: the books then know how many requests ran that they have not
// seen (attribution.Group.Running). It returns what became of the count.
func (p *pipeline) running(set *gpuSet, source string, ts int64, n float64) string {
	sum, ok := p.engines.count(set.name, source, ts, n)
	if !ok {
		return countDropped
	}
	gpus := make([]*attribution.GPU, len(set.keys))
	for i, k := range set.keys {
		if gpus[i] = p.books[k]; gpus[i] == nil {
			return countNoBooks
		}
	}
	switch grp := p.ledger.GroupOf(gpus); {
	case grp == nil:
		return countNoBooks
	case !grp.Running(ts, sum):
		return countDropped
	}
	return countBooked
}
