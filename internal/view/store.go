package view // import "github.com/gpuviz/gpuviz/internal/view"

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// ComponentType is the view extension's component type: the processor
// registers with every extension of this type.
const ComponentType = "gpuviz_view"

// Registrar is what the view extension offers a processor: a source to
// write to, and the function that removes it again.
type Registrar interface {
	RegisterSource(id string) (*Source, func())
}

// Signal is one per-GPU series the view serves.
type Signal uint8

// The signals, with their API names in signalNames.
const (
	Utilization      Signal = iota // share of time a kernel ran, 0..1
	SMActivity                     // GPM, 0..1
	TensorActivity                 // GPM, 0..1
	DRAMActivity                   // GPM, 0..1
	MemoryUsed                     // bytes
	Power                          // W
	Temperature                    // °C
	SMClock                        // MHz
	PowerThrottled                 // share of time clocks were held by power reasons, 0..1
	ThermalThrottled               // likewise, thermal reasons
	PCIeRx                         // bytes/s
	PCIeTx                         // bytes/s
	NVLinkRx                       // bytes/s
	NVLinkTx                       // bytes/s
	NumSignals                     // the number of signals, not a signal
)

var signalNames = [NumSignals]string{
	Utilization:      "utilization",
	SMActivity:       "sm_activity",
	TensorActivity:   "tensor_activity",
	DRAMActivity:     "dram_activity",
	MemoryUsed:       "memory_used_bytes",
	Power:            "power_w",
	Temperature:      "temperature_c",
	SMClock:          "sm_clock_mhz",
	PowerThrottled:   "power_throttled",
	ThermalThrottled: "thermal_throttled",
	PCIeRx:           "pcie_rx_bytes_per_s",
	PCIeTx:           "pcie_tx_bytes_per_s",
	NVLinkRx:         "nvlink_rx_bytes_per_s",
	NVLinkTx:         "nvlink_tx_bytes_per_s",
}

// String is the signal's name in the API ("power_w", ...).
func (s Signal) String() string {
	if s < NumSignals {
		return signalNames[s]
	}
	return "unknown"
}

// labelNames are the bottleneck labels in the classifier's tie-break order
// (internal/bottleneck): a column's label is the one holding it longest,
// ties to the earlier. Code i+1 is labelNames[i]; 0 is no label.
var labelNames = [...]string{
	"thermal_throttled", "power_throttled", "memory_capacity", "interconnect_bound",
	"memory_bound", "compute_bound", "host_bound", "idle", "unknown",
}

const numLabels = len(labelNames)

// LabelNames returns the labels the view knows, in its tie-break order: the
// processor's tests hold it to the classifier's.
func LabelNames() []string { return append([]string(nil), labelNames[:]...) }

func labelCode(l string) uint8 {
	for i, n := range labelNames {
		if n == l {
			return uint8(i + 1)
		}
	}
	return 0
}

func labelName(c uint8) string {
	if c == 0 || int(c) > numLabels {
		return ""
	}
	return labelNames[c-1]
}

// MaxPhases is the most phases a request keeps (the recognisers' bound).
const MaxPhases = 4

// Limits bound a source.
type Limits struct {
	Retention   time.Duration // how far back buckets reach; whole seconds
	MaxGPUs     int           // GPUs per source; more are refused and counted
	MaxRequests int           // requests per source; the oldest is overwritten
}

// maxInternedStrings bounds the model and family names a source interns;
// past it, each request keeps its own copy.
const maxInternedStrings = 256

// Registry holds the sources of one view extension.
type Registry struct {
	limits   Limits
	traceURL string
	now      func() time.Time

	mu      sync.RWMutex
	sources []*Source
	refs    map[*Source]int
	gone    Dropped // what released sources dropped

	// answering holds a slot per /api/v1/view answer being built: each
	// is as large as the query asks (docs/view.md, "Bound"), so at most
	// maxAnswers are built at once and later requests wait their turn.
	answering chan struct{}
}

// maxAnswers is how many view answers are built at once.
const maxAnswers = 2

// Dropped counts what a bounded store did not keep.
type Dropped struct {
	GPUs                int64 // GPUs refused past max_gpus, again each time one is asked for after a refusal
	SamplesTooOld       int64 // samples and labels older than the retention behind their GPU's newest
	RequestsOverwritten int64 // requests dropped, oldest first, past max_requests
}

func (d *Dropped) add(s *Source) {
	d.GPUs += s.refusedGPUs.Load()
	d.SamplesTooOld += s.tooOld.Load()
	d.RequestsOverwritten += s.droppedRequests.Load()
}

// Dropped returns what every source, registered now or before, dropped.
func (r *Registry) Dropped() Dropped {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d := r.gone
	for _, s := range r.sources {
		d.add(s)
	}
	return d
}

// GPUs returns the number of GPUs over all sources.
func (r *Registry) GPUs() int {
	n := 0
	for _, s := range r.Sources() {
		s.mu.RLock()
		n += len(s.gpus)
		s.mu.RUnlock()
	}
	return n
}

// NewRegistry returns an empty registry; now is the view's clock.
func NewRegistry(l Limits, traceURLTemplate string, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{limits: l, traceURL: traceURLTemplate, now: now, refs: map[*Source]int{}, answering: make(chan struct{}, maxAnswers)}
}

// RegisterSource returns the source named id (created on first use) and
// the function that releases it; the source goes when its last user
// releases it.
func (r *Registry) RegisterSource(id string) (*Source, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s *Source
	for _, x := range r.sources {
		if x.id == id {
			s = x
		}
	}
	if s == nil {
		s = newSource(id, r.limits, r.now)
		r.sources = append(r.sources, s)
	}
	r.refs[s]++
	var once sync.Once
	return s, func() { once.Do(func() { r.release(s) }) }
}

func (r *Registry) release(s *Source) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs[s]--
	if r.refs[s] > 0 {
		return
	}
	delete(r.refs, s)
	r.gone.add(s)
	for i, x := range r.sources {
		if x == s {
			r.sources = append(r.sources[:i:i], r.sources[i+1:]...)
			break
		}
	}
}

// Sources returns the registered sources in registration order.
func (r *Registry) Sources() []*Source {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]*Source(nil), r.sources...)
}

// Source is what one gpuviz processor shows: its GPUs and recent requests.
type Source struct {
	id     string
	limits Limits
	slots  int // seconds of buckets per GPU: retention + the second being filled
	now    func() time.Time

	mu    sync.RWMutex
	byKey map[gpuKey]*GPU
	gpus  []*GPU

	refusedGPUs     atomic.Int64
	tooOld          atomic.Int64
	droppedRequests atomic.Int64

	reqMu   sync.RWMutex
	reqs    []record // a ring once full: reqs[head] is the oldest
	head    int
	seq     uint64
	strings map[string]string
}

type gpuKey struct{ host, uuid string }

func newSource(id string, l Limits, now func() time.Time) *Source {
	return &Source{
		id: id, limits: l, slots: int(l.Retention/time.Second) + 1, now: now,
		byKey: map[gpuKey]*GPU{}, strings: map[string]string{},
	}
}

// ID is the source's name: its processor's component ID.
func (s *Source) ID() string { return s.id }

// GPU returns the GPU host/uuid, created on first use; nil when the
// source holds max_gpus GPUs that all reported within the retention
// (refused, counted). A GPU silent for longer than the retention makes
// room.
func (s *Source) GPU(host, uuid string) *GPU {
	host, uuid = clip(host), clip(uuid)
	k := gpuKey{host, uuid}
	s.mu.RLock()
	g := s.byKey[k]
	s.mu.RUnlock()
	if g != nil {
		return g
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.byKey[k]; g != nil {
		return g
	}
	if len(s.gpus) >= s.limits.MaxGPUs && !s.evictStale() {
		s.refusedGPUs.Add(1)
		return nil
	}
	g = newGPU(s, strings.Clone(host), strings.Clone(uuid), s.slots)
	g.createdSec = s.now().Unix()
	s.byKey[k] = g
	s.gpus = append(s.gpus, g)
	return g
}

// evictStale drops the GPU silent longest if it has been silent for the
// whole retention, behind the newest GPU's samples or the view's clock
// (where every GPU went silent at once: a fleet redeployed); the caller
// holds s.mu.
func (s *Source) evictStale() bool {
	oldest, at := -1, int64(math.MaxInt64)
	newest := s.now().Unix()
	for i, g := range s.gpus {
		g.mu.Lock()
		n := g.newestSec
		g.mu.Unlock()
		newest = max(newest, n)
		if seen := max(n, g.createdSec); seen < at {
			oldest, at = i, seen
		}
	}
	if oldest < 0 || newest-at < int64(s.slots) {
		return false
	}
	g := s.gpus[oldest]
	g.evicted.Store(true)
	delete(s.byKey, gpuKey{g.host, g.uuid})
	s.gpus = append(s.gpus[:oldest:oldest], s.gpus[oldest+1:]...)
	return true
}

// Evicted reports whether the source dropped g to make room for another
// GPU: g is then no longer shown.
func (g *GPU) Evicted() bool { return g.evicted.Load() }

// maxText bounds the bytes the view keeps of a name that came from outside
// (a host, a GPU's UUID or product name, a request's model or family): a
// span's attribute can be megabytes, and the store's bound in bytes holds
// only for names of a sensible length.
const maxText = 256

// clip cuts s to at most maxText bytes, at a rune's start.
func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	i := maxText
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// snapshot returns the GPUs.
func (s *Source) snapshot() []*GPU {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*GPU(nil), s.gpus...)
}

// GPU is one GPU's buckets. Its methods are safe for concurrent use.
type GPU struct {
	src            *Source
	id, host, uuid string

	// evicted: dropped by its source to make room; what is added to it
	// is no longer shown, so its holder asks the source again.
	evicted atomic.Bool
	// createdSec is when the source made it, by the view's clock: a GPU
	// not yet given a sample counts as seen then.
	createdSec int64

	mu         sync.Mutex
	index      int // -1 unknown
	name       string
	simulated  bool
	memTotal   float64 // bytes, 0 unknown
	powerLimit float64 // W, 0 unknown
	has        [NumSignals]bool
	newestSec  int64
	labelTo    int64 // ns: the end of the newest labelled bin
	// finalTo is, once the source has said so (Finalized), the end of the
	// newest bin whose label can no longer change (ns); 0: every label
	// given is final.
	finalTo int64
	secs    []int64     // per slot: the second it holds
	buckets []bucket    // slots × NumSignals
	labels  []labelSlot // per slot: ms of each label
}

// bucket aggregates one signal's samples in one second.
type bucket struct {
	min, max, sum float32
	n             uint32
}

// labelSlot is one second's milliseconds per label.
type labelSlot [numLabels]uint16

const noSecond = math.MinInt64 / 4

func newGPU(src *Source, host, uuid string, slots int) *GPU {
	g := &GPU{
		src: src, id: host + "/" + uuid, host: host, uuid: uuid, index: -1, newestSec: noSecond,
		secs: make([]int64, slots), buckets: make([]bucket, slots*int(NumSignals)), labels: make([]labelSlot, slots),
	}
	for i := range g.secs {
		g.secs[i] = noSecond
	}
	return g
}

// ID is "host/uuid".
func (g *GPU) ID() string { return g.id }

// SetInfo records the GPU's NVML index (negative: unknown) and product
// name ("" leaves it).
func (g *GPU) SetInfo(index int, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if index >= 0 {
		g.index = index
	}
	if name = clip(name); name != "" && name != g.name {
		g.name = strings.Clone(name)
	}
}

// SetSimulated marks the GPU's data as simulated (or not).
func (g *GPU) SetSimulated(sim bool) {
	g.mu.Lock()
	g.simulated = sim
	g.mu.Unlock()
}

// SetMemoryTotal records the GPU's memory in bytes.
func (g *GPU) SetMemoryTotal(bytes float64) {
	g.mu.Lock()
	g.memTotal = bytes
	g.mu.Unlock()
}

// SetPowerLimit records the GPU's enforced power limit in W.
func (g *GPU) SetPowerLimit(w float64) {
	g.mu.Lock()
	g.powerLimit = w
	g.mu.Unlock()
}

// Add puts one sample of sig at ts (Unix ns) in its second's bucket. A
// sample older than the retention behind the GPU's newest is dropped and
// counted; NaN and infinities are dropped.
func (g *GPU) Add(sig Signal, ts int64, v float64) {
	f := float32(v)
	if sig >= NumSignals || math.IsNaN(v) || math.IsInf(float64(f), 0) {
		return
	}
	g.mu.Lock()
	i, ok := g.slot(floorDiv(ts, int64(time.Second)))
	if !ok {
		g.mu.Unlock()
		g.src.tooOld.Add(1)
		return
	}
	b := &g.buckets[i*int(NumSignals)+int(sig)]
	if b.n == 0 {
		b.min, b.max, b.sum = f, f, f
	} else {
		b.min, b.max, b.sum = min(b.min, f), max(b.max, f), b.sum+f
	}
	b.n++
	g.has[sig] = true
	g.mu.Unlock()
}

// Label adds a bottleneck label over [start, start+width) (Unix ns) to the
// seconds it covers. Unknown label names are ignored.
func (g *GPU) Label(start, width int64, label string) {
	c := labelCode(label)
	if c == 0 || width <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.moveLabel(start, start+width, 0, c)
	g.labelTo = max(g.labelTo, start+width)
}

// Relabel moves [start, start+width), labelled from before, to the label
// to: a label the source gave early and corrected once final. Unknown
// label names are ignored.
func (g *GPU) Relabel(start, width int64, from, to string) {
	cf, ct := labelCode(from), labelCode(to)
	if cf == 0 || ct == 0 || cf == ct || width <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.moveLabel(start, start+width, cf, ct)
}

// Finalized says that no label of the GPU's before to (Unix ns) will
// change: final_ms follows it from then on, not the newest label.
func (g *GPU) Finalized(to int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finalTo = max(g.finalTo, to)
}

// moveLabel moves the milliseconds of [start, end) from label code from
// (0: none, a new label) to code to, in every second they cover; the
// caller holds g.mu.
func (g *GPU) moveLabel(start, end int64, from, to uint8) {
	for t := start; t < end; {
		sec := floorDiv(t, int64(time.Second))
		next := min(end, (sec+1)*int64(time.Second))
		if i, ok := g.slot(sec); ok {
			ms := (next - t) / int64(time.Millisecond)
			if from != 0 {
				f := &g.labels[i][from-1]
				ms = min(ms, int64(*f))
				*f -= uint16(ms)
			}
			l := &g.labels[i][to-1]
			*l = uint16(min(int64(*l)+ms, math.MaxUint16))
		} else {
			g.src.tooOld.Add(1)
		}
		t = next
	}
}

// slot returns the slot of second sec, resetting it if it held an older
// second; false when sec is older than the ring; the caller holds g.mu.
func (g *GPU) slot(sec int64) (int, bool) {
	n := int64(len(g.secs))
	if sec <= g.newestSec-n {
		return 0, false
	}
	i := int(floorMod(sec, n))
	switch held := g.secs[i]; {
	case held == sec:
	case held < sec:
		g.secs[i] = sec
		clear(g.buckets[i*int(NumSignals) : (i+1)*int(NumSignals)])
		g.labels[i] = labelSlot{}
	default:
		return 0, false
	}
	g.newestSec = max(g.newestSec, sec)
	return i, true
}

func floorDiv(t, w int64) int64 {
	q := t / w
	if t%w != 0 && (t < 0) != (w < 0) {
		q--
	}
	return q
}

func floorMod(t, w int64) int64 { return t - floorDiv(t, w)*w }

// Request is one finished inference request as the processor hands it
// over.
type Request struct {
	TraceID      [16]byte
	SpanID       [8]byte
	GPUs         []*GPU
	Model        string
	Family       string
	Start, End   int64 // Unix ns
	Bottleneck   string
	Share        float64 // the bottleneck's part of the request's labelled GPU time; 0 unknown
	Energy       float64 // J
	EnergyKnown  bool
	PerToken     float64 // J per output token; 0 unknown
	InputTokens  int64   // -1 unknown
	OutputTokens int64   // -1 unknown
	Phases       [MaxPhases]Phase
	NumPhases    int
}

// Phase is one phase of a Request.
type Phase struct {
	Name       string
	Start, End int64 // Unix ns
	Bottleneck string
	Share      float64 // as Request's
	Energy     float64 // J; meaningful when the request's energy is known
}

// record is a request as the ring keeps it.
type record struct {
	seq           uint64
	start, end    int64
	energy        float64 // NaN unknown
	perToken      float64 // NaN unknown
	inTok, outTok int64
	traceID       [16]byte
	spanID        [8]byte
	label         uint8
	nPhases       uint8
	simulated     bool
	share         float32 // 0 unknown
	gpus          []string
	model, family string
	phases        [MaxPhases]phase
}

type phase struct {
	start, end int64
	energy     float64 // NaN unknown
	name       string
	label      uint8
	share      float32 // 0 unknown
}

// AddRequest appends a request to the ring, overwriting (and counting)
// the oldest once max_requests are kept.
func (s *Source) AddRequest(r *Request) {
	rec := record{
		start: r.Start, end: r.End, energy: math.NaN(), perToken: math.NaN(),
		inTok: r.InputTokens, outTok: r.OutputTokens, traceID: r.TraceID, spanID: r.SpanID,
		label: labelCode(r.Bottleneck), share: shareOf(r.Share), nPhases: uint8(min(r.NumPhases, MaxPhases)),
		gpus: make([]string, len(r.GPUs)),
	}
	if r.EnergyKnown {
		rec.energy = r.Energy
		if r.PerToken > 0 {
			rec.perToken = r.PerToken
		}
	}
	for i, g := range r.GPUs {
		rec.gpus[i] = g.id
		g.mu.Lock()
		rec.simulated = rec.simulated || g.simulated
		g.mu.Unlock()
	}
	for i := range int(rec.nPhases) {
		p := &r.Phases[i]
		rec.phases[i] = phase{start: p.Start, end: p.End, energy: math.NaN(), label: labelCode(p.Bottleneck), share: shareOf(p.Share)}
		if r.EnergyKnown {
			rec.phases[i].energy = p.Energy
		}
	}
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	rec.model, rec.family = s.intern(r.Model), s.intern(r.Family)
	for i := range int(rec.nPhases) {
		rec.phases[i].name = s.intern(r.Phases[i].Name)
	}
	s.seq++
	rec.seq = s.seq
	if len(s.reqs) < s.limits.MaxRequests {
		s.reqs = append(s.reqs, rec)
		return
	}
	s.reqs[s.head] = rec
	s.head = (s.head + 1) % len(s.reqs)
	s.droppedRequests.Add(1)
}

// shareOf keeps a share in [0, 1]; anything else (NaN included) reads 0,
// unknown.
func shareOf(v float64) float32 {
	if v > 0 && v <= 1 {
		return float32(v)
	}
	return 0
}

// intern returns a copy of x the source owns (pdata strings can pin the
// whole request they were decoded from); the caller holds s.reqMu.
func (s *Source) intern(x string) string {
	x = clip(x)
	if x == "" {
		return ""
	}
	if v, ok := s.strings[x]; ok {
		return v
	}
	v := strings.Clone(x)
	if len(s.strings) < maxInternedStrings {
		s.strings[v] = v
	}
	return v
}
