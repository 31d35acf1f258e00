package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxProcesses is how many processes the directory remembers per GPU: more
// than the compute processes one GPU runs in practice (the receiver reports
// at most 64), few enough that a lookup is a short scan.
const maxProcesses = 64

// Unix seconds whose nanoseconds fit an int64 (years 1678 to 2262).
const (
	minUnixSec = math.MinInt64/int64(time.Second) + 1
	maxUnixSec = math.MaxInt64/int64(time.Second) - 1
)

// nanos converts t to Unix nanoseconds; false when an int64 cannot hold it
// (including the zero time.Time, which no real sample carries).
func nanos(t time.Time) (int64, bool) {
	if s := t.Unix(); s < minUnixSec || s > maxUnixSec {
		return 0, false
	}
	return t.UnixNano(), true
}

// clampNanos converts t to Unix nanoseconds, saturating at the representable
// range, for window edges, which need not be sample times.
func clampNanos(t time.Time) int64 {
	switch s := t.Unix(); {
	case s < minUnixSec:
		return minUnixSec * int64(time.Second)
	case s > maxUnixSec:
		return maxUnixSec * int64(time.Second)
	}
	return t.UnixNano()
}

// fromNanos is the inverse of nanos, in UTC so results compare equal to
// times built with time.UTC.
func fromNanos(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// sub is a − b saturating at math.MinInt64, so huge configured durations do
// not wrap around.
func sub(a, b int64) int64 {
	if d := a - b; d <= a {
		return d
	}
	return math.MinInt64
}

type proc struct {
	pid int64
	ts  int64 // newest sighting, Unix ns
}

// maxHolders is how many holders the directory remembers per GPU:
// time-slicing or Slurm's shards share a GPU between a handful of pods or
// jobs, and a GPU's holder changes rarely.
const maxHolders = 64

// Pod names a Kubernetes pod: by UID, or by namespace and name.
type Pod struct {
	UID, Namespace, Name string
}

// IsZero reports whether p names no pod.
func (p Pod) IsZero() bool { return p.UID == "" && p.Name == "" }

// holderKind is what a holder's name names.
type holderKind uint8

const (
	podByUID  holderKind = iota // name is the pod's UID
	podByName                   // scope is the namespace, name the pod's name
	slurmJob                    // name is the Slurm job id, cluster-wide
)

// holder is one name of what holds GPUs: a pod by UID or by namespace and
// name, or a Slurm job. Holders are named cluster-wide, so their GPUs are
// looked for on every host.
type holder struct {
	kind        holderKind
	scope, name string
}

// sighting is when a holder was seen holding a GPU: the first and the
// newest sighting, and the spacing of the last two (the source's interval),
// all Unix ns.
type sighting struct {
	holder      holder
	first, last int64
	gap         int64
}

// minHolderSlack is the least a holder's sightings are stretched by on
// either side when matching: the time between two of them is unseen.
const minHolderSlack = int64(2 * time.Second)

// covers reports whether the holder held the GPU at some time in [from,
// to], give or take two of its sighting intervals.
func (hs *sighting) covers(from, to int64) bool {
	slack := max(minHolderSlack, 2*hs.gap)
	return hs.first-slack <= to && hs.last+slack >= from
}

// CompareKeys orders keys by host, then GPU id.
func CompareKeys(a, b Key) int {
	return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.GPU, b.GPU))
}

type hostIndex struct {
	host  string
	index int
}

// gpu is everything the store knows about one GPU.
type gpu struct {
	key    Key
	sig    [NumSignals]ring
	energy ring // hw.energy, cumulative J
	// newest is the newest timestamp of any point, valid when hasPoints;
	// retention is measured from it.
	newest    int64
	hasPoints bool
	index     int // NVML index, -1 when unknown
	// powerLimit is the newest power limit the driver enforces, W; 0 when
	// unknown. A setting, not a reading: it holds until it changes.
	powerLimit float64
	procs      []proc
	holders    []sighting
	// idleSince is when Expire first saw this GPU without any point (known
	// only from SetIndex or SetProcess), so such an entry gets Retention to
	// receive points rather than living forever or dying at once.
	idleSince int64
	idleSeen  bool
}

// cutoff is the oldest timestamp a point of g may have and still count.
func (g *gpu) cutoff(retention int64) int64 {
	if !g.hasPoints {
		return math.MinInt64
	}
	return sub(g.newest, retention)
}

// Store is the per-GPU timeline. All methods are safe for concurrent use.
type Store struct {
	maxGPUs   int
	maxPoints int
	retention int64 // ns
	maxSpan   int64 // ns

	mu      sync.RWMutex
	gpus    map[Key]*gpu
	hosts   map[string][]*gpu // per host, sorted by GPU id
	byID    map[string][]*gpu // per GPU id, on every host
	byIndex map[hostIndex]*gpu
	// byHolder lists, per holder, the GPUs it was seen on.
	byHolder map[holder][]*gpu
	// last is the GPU the previous write went to: metrics batches carry runs
	// of points of one GPU, and comparing a key is cheaper than hashing it.
	last *gpu
}

// New returns an empty store. cfg must pass Validate (the processor validates
// its configuration first); New panics otherwise.
func New(cfg Config) *Store {
	if err := cfg.Validate(); err != nil {
		panic("timeline: " + err.Error())
	}
	return &Store{
		maxGPUs:   cfg.MaxGPUs,
		maxPoints: cfg.MaxPointsPerSignal,
		retention: int64(cfg.Retention),
		maxSpan:   int64(cfg.MaxSpan),
		gpus:      make(map[Key]*gpu),
		hosts:     make(map[string][]*gpu),
		byID:      make(map[string][]*gpu),
		byIndex:   make(map[hostIndex]*gpu),
		byHolder:  make(map[holder][]*gpu),
	}
}

// MaxValue bounds a sample's magnitude: far above any reading the store
// keeps (an energy counter at 1 kW for 30 years is 1e12 J; byte counters
// arrive as rates), far below where the running integrals (value × ns over
// the retention) would overflow.
const MaxValue = 1e18

// Representable reports whether the store takes v: every signal, and the
// energy counter, is a non-negative reading (a fraction, watts, bytes,
// joules), so not NaN, not negative, at most MaxValue.
func Representable(v float64) bool { return v >= 0 && v <= MaxValue }

// Add records sample v of signal sig of GPU k at ts. It reports false when
// the point is refused: a new GPU beyond MaxGPUs, an unknown signal, a NaN,
// negative or infinite value or one beyond MaxValue, an unrepresentable timestamp, or a point too old to keep
// (see the package documentation).
func (s *Store) Add(k Key, sig Signal, ts time.Time, v float64) bool {
	if sig >= NumSignals {
		return false
	}
	return s.add(k, sig, ts, v)
}

// AddEnergy records the GPU's cumulative energy counter (hw.energy), in
// joules, at ts. It refuses what Add refuses.
func (s *Store) AddEnergy(k Key, ts time.Time, joules float64) bool {
	return s.add(k, energySeries, ts, joules)
}

// energySeries stands for the energy counter where add takes a signal.
const energySeries = NumSignals

// add records a point of signal sig, or of the energy counter.
func (s *Store) add(k Key, sig Signal, ts time.Time, v float64) bool {
	if !Representable(v) {
		return false
	}
	t, ok := nanos(ts)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupOrCreate(k)
	if g == nil {
		return false
	}
	r := &g.energy
	if sig != energySeries {
		r = &g.sig[sig]
	}
	return s.addPoint(g, r, t, v)
}

func (s *Store) addPoint(g *gpu, r *ring, t int64, v float64) bool {
	newest := t
	if g.hasPoints {
		if t < sub(g.newest, s.retention) {
			return false
		}
		newest = max(g.newest, t)
	}
	if !r.insert(t, v, sub(newest, s.retention), s.maxPoints, s.maxSpan) {
		return false
	}
	g.newest, g.hasPoints = newest, true
	return true
}

// lookupOrCreate returns k's GPU, creating it when there is room; nil when
// the store is full. The caller holds the write lock.
func (s *Store) lookupOrCreate(k Key) *gpu {
	if g := s.last; g != nil && g.key == k {
		return g
	}
	g := s.gpus[k]
	if g == nil {
		if len(s.gpus) >= s.maxGPUs {
			return nil
		}
		g = &gpu{key: k, index: -1}
		g.energy.counter = true
		s.gpus[k] = g
		list := s.hosts[k.Host]
		i, _ := slices.BinarySearchFunc(list, k.GPU, func(g *gpu, id string) int { return strings.Compare(g.key.GPU, id) })
		s.hosts[k.Host] = slices.Insert(list, i, g)
		s.byID[k.GPU] = append(s.byID[k.GPU], g)
	}
	s.last = g
	return g
}

// forget removes g and its directory entries. The caller holds the write
// lock.
func (s *Store) forget(g *gpu) {
	k := g.key
	delete(s.gpus, k)
	list := s.hosts[k.Host]
	if i := slices.Index(list, g); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(s.hosts, k.Host)
	} else {
		s.hosts[k.Host] = list
	}
	if same := slices.DeleteFunc(s.byID[k.GPU], func(x *gpu) bool { return x == g }); len(same) == 0 {
		delete(s.byID, k.GPU)
	} else {
		s.byID[k.GPU] = same
	}
	if g.index >= 0 && s.byIndex[hostIndex{k.Host, g.index}] == g {
		delete(s.byIndex, hostIndex{k.Host, g.index})
	}
	if s.last == g {
		s.last = nil
	}
	for _, hs := range g.holders {
		s.unindex(hs.holder, g)
	}
}

// Has reports whether GPU k has points of signal sig.
func (s *Store) Has(k Key, sig Signal) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.gpus[k]
	return g != nil && g.sig[sig].n > 0
}

// Newest returns the newest timestamp of any point of GPU k; false when the
// GPU is unknown or has no point.
func (s *Store) Newest(k Key) (time.Time, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.gpus[k]
	if g == nil || !g.hasPoints {
		return time.Time{}, false
	}
	return fromNanos(g.newest), true
}

// Settled returns the time up to which GPU k's energy has arrived: its
// energy counter's newest point, or, for a GPU without one, its newest
// Power point (where Power has one within MaxSpan of the GPU's newest
// point), else its newest point of any signal; false when the GPU is
// unknown or has no point. They differ where a source stamps some series
// ahead of others: a receiver's scrape arrives at once, its sampling
// clock's ticks a flush later, and its flush stamps the tick's readings at
// the read and the driver's power samples up to just before it.
func (s *Store) Settled(k Key) (time.Time, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.settled(k)
	if !ok {
		return time.Time{}, false
	}
	return fromNanos(t), true
}

// SettledAll returns the earliest of the keys' Settled times, under one
// read lock: the time up to which all of those GPUs' energy has arrived.
// False when keys is empty or any of them is unknown or has no point.
func (s *Store) SettledAll(keys []Key) (time.Time, bool) {
	if len(keys) == 0 {
		return time.Time{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	earliest := int64(math.MaxInt64)
	for _, k := range keys {
		t, ok := s.settled(k)
		if !ok {
			return time.Time{}, false
		}
		earliest = min(earliest, t)
	}
	return fromNanos(earliest), true
}

// Spacing returns the longest, over keys, of the time between the last two
// points of the series Settled follows: the energy counter or Power, else
// the signal whose last two points are closest (the one that advances the
// GPU's newest point). It is how long the next point of a GPU's source takes: a fraction
// of a second from the gpuviz receiver's sampling clock, 30 s from a
// dcgm-exporter at its default. False when keys is empty or any of them is
// unknown or has fewer than two such points.
func (s *Store) Spacing(keys []Key) (time.Duration, bool) {
	if len(keys) == 0 {
		return 0, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var longest int64
	for _, k := range keys {
		g := s.gpus[k]
		if g == nil {
			return 0, false
		}
		var (
			gap int64
			ok  bool
		)
		if r := s.settledRing(g); r != nil {
			gap, ok = lastGap(r)
		}
		if !ok {
			for i := range g.sig {
				if d, has := lastGap(&g.sig[i]); has && (!ok || d < gap) {
					gap, ok = d, true
				}
			}
		}
		if !ok {
			return 0, false
		}
		longest = max(longest, gap)
	}
	return time.Duration(longest), true
}

// lastGap is the time between a ring's last two points.
func lastGap(r *ring) (int64, bool) {
	if r.n < 2 {
		return 0, false
	}
	return r.at(r.n-1).ts - r.at(r.n-2).ts, true
}

// settled is Settled in Unix ns; the caller holds the lock.
func (s *Store) settled(k Key) (int64, bool) {
	g := s.gpus[k]
	if g == nil || !g.hasPoints {
		return 0, false
	}
	if r := s.settledRing(g); r != nil {
		return r.at(r.n - 1).ts, true
	}
	return g.newest, true
}

// settledRing is the series g's energy comes from, which Settled follows:
// the energy counter, else Power where it has a point within MaxSpan of
// g's newest (a source that stopped sending it is not waited for); nil
// when neither.
func (s *Store) settledRing(g *gpu) *ring {
	if r := &g.energy; r.n > 0 {
		return r
	}
	if r := &g.sig[Power]; r.n > 0 && r.at(r.n-1).ts >= sub(g.newest, s.maxSpan) {
		return r
	}
	return nil
}

// GPUs returns the GPUs known for host, sorted by GPU id; host "" returns
// every GPU, sorted by host then GPU id.
func (s *Store) GPUs(host string) []Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if host != "" {
		list := s.hosts[host]
		keys := make([]Key, len(list))
		for i, g := range list {
			keys[i] = g.key
		}
		return keys
	}
	keys := make([]Key, 0, len(s.gpus))
	for k := range s.gpus {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, CompareKeys)
	return keys
}

// Expire forgets the GPUs with no point newer than now − Retention, with
// their directory entries, and returns how many it forgot. A GPU known only
// from SetIndex or SetProcess is forgotten Retention after the first Expire
// that finds it without points.
func (s *Store) Expire(now time.Time) int {
	n := clampNanos(now)
	cutoff := sub(n, s.retention)
	s.mu.Lock()
	defer s.mu.Unlock()
	forgotten := 0
	for _, g := range s.gpus {
		switch {
		case g.hasPoints:
			if g.newest > cutoff {
				continue
			}
		case !g.idleSeen:
			g.idleSince, g.idleSeen = n, true
			continue
		case g.idleSince > cutoff:
			continue
		}
		s.forget(g)
		forgotten++
	}
	return forgotten
}

// Len returns how many GPUs are tracked.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.gpus)
}

// SetIndex records GPU k's NVML index (nvidia.gpu.index on nvidia.gpu.info).
// The GPU is created if new (within MaxGPUs). An index is unique per host:
// another GPU holding it loses it. A negative index clears k's.
func (s *Store) SetIndex(k Key, index int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupOrCreate(k)
	if g == nil || g.index == index || (index < 0 && g.index < 0) {
		return
	}
	if g.index >= 0 {
		delete(s.byIndex, hostIndex{k.Host, g.index})
		g.index = -1
	}
	if index < 0 {
		return
	}
	hi := hostIndex{k.Host, index}
	if other := s.byIndex[hi]; other != nil {
		other.index = -1
	}
	s.byIndex[hi] = g
	g.index = index
}

// SetPowerLimit records the power limit the driver enforces on GPU k, W
// (nvidia.gpu.power.limit), which holds until the next. The GPU is
// created if new (within MaxGPUs); a limit that is not positive, or not
// Representable, is ignored.
func (s *Store) SetPowerLimit(k Key, watts float64) {
	if !(watts > 0) || !Representable(watts) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.lookupOrCreate(k); g != nil {
		g.powerLimit = watts
	}
}

// PowerLimit returns GPU k's newest power limit (SetPowerLimit), W.
func (s *Store) PowerLimit(k Key) (float64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if g := s.gpus[k]; g != nil && g.powerLimit > 0 {
		return g.powerLimit, true
	}
	return 0, false
}

// ByID returns the one GPU whose id is id, on whichever host; false when
// there is none, or several (ids a simulation repeats across hosts).
func (s *Store) ByID(id string) (Key, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if gs := s.byID[id]; len(gs) == 1 {
		return gs[0].key, true
	}
	return Key{}, false
}

// ByIndex returns the GPU of host with NVML index index. Hosts are matched
// exactly ("" is a host name like any other here).
func (s *Store) ByIndex(host string, index int) (Key, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if g := s.byIndex[hostIndex{host, index}]; g != nil {
		return g.key, true
	}
	return Key{}, false
}

// SetProcess records that process pid ran on GPU k at ts. The GPU is created
// if new (within MaxGPUs); at most 64 processes are remembered per GPU, the
// one seen longest ago making room. An unrepresentable ts is ignored.
func (s *Store) SetProcess(k Key, pid int64, ts time.Time) {
	t, ok := nanos(ts)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupOrCreate(k)
	if g == nil {
		return
	}
	oldest := -1
	for i := range g.procs {
		p := &g.procs[i]
		if p.pid == pid {
			p.ts = max(p.ts, t)
			return
		}
		if oldest < 0 || p.ts < g.procs[oldest].ts {
			oldest = i
		}
	}
	if len(g.procs) < maxProcesses {
		g.procs = append(g.procs, proc{pid, t})
		return
	}
	g.procs[oldest] = proc{pid, t}
}

// ProcessGPUs returns the GPUs of host, sorted by GPU id, where pid was seen
// within Retention of the GPU's newest point and no earlier than MaxSpan
// before from (a request's start: the sighting before it may be a sample's
// stretch old; one older is of another process the PID was reused by, or
// of one that moved). Hosts are matched exactly: a PID means nothing on
// another host.
func (s *Store) ProcessGPUs(host string, pid int64, from time.Time) []Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var keys []Key
	since := sub(clampNanos(from), s.maxSpan)
	for _, g := range s.hosts[host] {
		cutoff := max(g.cutoff(s.retention), since)
		for _, p := range g.procs {
			if p.pid == pid && p.ts >= cutoff {
				keys = append(keys, g.key)
				break
			}
		}
	}
	return keys
}

// SetPod records that pod held GPU k at ts: by UID and by namespace and
// name, whichever the pod names. The GPU is created if new (within
// MaxGPUs); at most 64 holders (pods by UID, pods by name, Slurm jobs) are
// remembered per GPU, the one seen longest ago making room. An
// unrepresentable ts is ignored.
func (s *Store) SetPod(k Key, pod Pod, ts time.Time) {
	if pod.IsZero() {
		return
	}
	s.setHolders(k, ts, holder{kind: podByUID, name: pod.UID}, holder{kind: podByName, scope: pod.Namespace, name: pod.Name})
}

// SetSlurmJob records that Slurm job job held GPU k at ts, as SetPod does
// pods (and within the same 64 holders per GPU). An empty job is ignored.
func (s *Store) SetSlurmJob(k Key, job string, ts time.Time) {
	if job == "" {
		return
	}
	s.setHolders(k, ts, holder{kind: slurmJob, name: job})
}

// setHolders records the holders with a name as holding GPU k at ts.
func (s *Store) setHolders(k Key, ts time.Time, hs ...holder) {
	t, ok := nanos(ts)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.lookupOrCreate(k)
	if g == nil {
		return
	}
	for _, h := range hs {
		if h.name != "" {
			s.sight(g, h, t)
		}
	}
}

func (s *Store) sight(g *gpu, h holder, t int64) {
	oldest := -1
	for i := range g.holders {
		hs := &g.holders[i]
		if hs.holder == h {
			if t > hs.last {
				hs.gap, hs.last = t-hs.last, t
			}
			hs.first = min(hs.first, t)
			return
		}
		if oldest < 0 || hs.last < g.holders[oldest].last {
			oldest = i
		}
	}
	if len(g.holders) >= maxHolders {
		s.unindex(g.holders[oldest].holder, g)
		g.holders = slices.Delete(g.holders, oldest, oldest+1)
	}
	g.holders = append(g.holders, sighting{holder: h, first: t, last: t})
	s.byHolder[h] = append(s.byHolder[h], g)
}

func (s *Store) unindex(h holder, g *gpu) {
	list := slices.DeleteFunc(s.byHolder[h], func(x *gpu) bool { return x == g })
	if len(list) == 0 {
		delete(s.byHolder, h)
	} else {
		s.byHolder[h] = list
	}
}

// PodGPUs returns the GPUs, sorted by host and GPU id, that pod held at some
// time in [from, to]: by its UID where sightings by UID cover the window,
// else by its namespace and name (the allocation names pods; only process
// series carry UIDs, and a process can drop out of them). Pods are named
// cluster-wide, so every host is searched.
func (s *Store) PodGPUs(pod Pod, from, to time.Time) []Key {
	return s.heldGPUs(from, to, holder{kind: podByUID, name: pod.UID}, holder{kind: podByName, scope: pod.Namespace, name: pod.Name})
}

// SlurmJobGPUs returns the GPUs, sorted by host and GPU id, that Slurm job
// job held at some time in [from, to]. Job ids are cluster-wide and a job
// can span nodes, so every host is searched.
func (s *Store) SlurmJobGPUs(job string, from, to time.Time) []Key {
	return s.heldGPUs(from, to, holder{kind: slurmJob, name: job})
}

// heldGPUs returns the GPUs the first of refs (with a name) that held any
// GPU in [from, to] held then, sorted by host and GPU id.
func (s *Store) heldGPUs(from, to time.Time, refs ...holder) []Key {
	f, t := clampNanos(from), clampNanos(to)
	s.mu.RLock()
	defer s.mu.RUnlock()
	var keys []Key
	for _, ref := range refs {
		if ref.name == "" {
			continue
		}
		for _, g := range s.byHolder[ref] {
			for i := range g.holders {
				if hs := &g.holders[i]; hs.holder == ref && hs.covers(f, t) && hs.last >= g.cutoff(s.retention) {
					keys = append(keys, g.key)
					break
				}
			}
		}
		if len(keys) > 0 {
			break
		}
	}
	slices.SortFunc(keys, CompareKeys)
	return keys
}

// Index returns GPU k's NVML index; false when unknown.
func (s *Store) Index(k Key) (int, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if g := s.gpus[k]; g != nil && g.index >= 0 {
		return g.index, true
	}
	return 0, false
}
