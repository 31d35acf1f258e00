package hostroutingexporter // import "github.com/gpuviz/gpuviz/exporter/hostroutingexporter"

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/exporter/hostroutingexporter/internal/metadata"
)

// replica is one gateway replica as the router sees it. Its health
// outlives resolver refreshes that list it again.
type replica struct {
	endpoint  string
	hash      uint64
	downUntil atomic.Int64 // Unix ns; up when in the past
	attrs     metric.MeasurementOption
}

func (r *replica) up(now int64) bool { return r.downUntil.Load() <= now }

// router chooses a replica for each routing key. One router serves every
// signal of one exporter configuration, so a replica that fails the traces
// export is skipped by the metrics export too and a host's spans and
// samples keep travelling together.
type router struct {
	attributes []string
	downFor    time.Duration
	logger     *zap.Logger
	tel        *metadata.TelemetryBuilder
	resolver   resolver
	now        func() time.Time

	replicas atomic.Pointer[[]*replica] // sorted by endpoint
	// generation counts replica list changes, so exporters know when to
	// let go of the exporters of replicas no longer listed.
	generation atomic.Int64

	mu    sync.Mutex // guards users and resolver start/stop
	users int
	// forget drops the router from the factory's map with its last user.
	forget func()
}

func newRouter(cfg *Config, set component.TelemetrySettings) (*router, error) {
	tel, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, err
	}
	rt := &router{
		attributes: cfg.RoutingAttributes,
		downFor:    cfg.DownFor,
		logger:     set.Logger,
		tel:        tel,
		resolver:   newResolver(cfg.Resolver, set.Logger),
		now:        time.Now,
	}
	rt.replicas.Store(&[]*replica{})
	if err := tel.RegisterExporterHostroutingEndpointsCallback(rt.observeEndpoints); err != nil {
		return nil, err
	}
	return rt, nil
}

// start starts the resolver for the first user; the replicas it lists
// first are known when start returns (DNS: an unresolvable name leaves
// the list empty and exports fail, retried, until it resolves).
func (rt *router) start(ctx context.Context) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.users++
	if rt.users > 1 {
		return nil
	}
	return rt.resolver.start(ctx, rt.setEndpoints)
}

// shutdown stops the resolver with its last user.
func (rt *router) shutdown() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.users--
	if rt.users == 0 {
		rt.resolver.shutdown()
		rt.tel.Shutdown()
		if rt.forget != nil {
			rt.forget()
		}
	}
}

// setEndpoints replaces the replica list, keeping the health of replicas
// listed before.
func (rt *router) setEndpoints(endpoints []string) {
	endpoints = slices.Clone(endpoints)
	slices.Sort(endpoints)
	endpoints = slices.Compact(endpoints)
	old := *rt.replicas.Load()
	if slices.EqualFunc(old, endpoints, func(r *replica, e string) bool { return r.endpoint == e }) {
		return
	}
	next := make([]*replica, 0, len(endpoints))
	for _, e := range endpoints {
		i, found := slices.BinarySearchFunc(old, e, func(r *replica, e string) int { return strings.Compare(r.endpoint, e) })
		if found {
			next = append(next, old[i])
			continue
		}
		next = append(next, &replica{
			endpoint: e, hash: hashString(e),
			attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("endpoint", e))),
		})
	}
	rt.replicas.Store(&next)
	rt.generation.Add(1)
	rt.logger.Info("gateway replicas", zap.Strings("endpoints", endpoints))
}

// listed reports whether endpoint is among the replicas now.
func (rt *router) listed(endpoint string) bool {
	_, found := slices.BinarySearchFunc(*rt.replicas.Load(), endpoint, func(r *replica, e string) int { return strings.Compare(r.endpoint, e) })
	return found
}

// key returns the routing key of a resource: the hash of its routing
// attributes' values, and whether it had any.
func (rt *router) key(attrs pcommon.Map) (uint64, bool) {
	h := fnv.New64a()
	found := false
	for _, name := range rt.attributes {
		if v, ok := attrs.Get(name); ok {
			found = true
			_, _ = h.Write([]byte(v.AsString()))
		}
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64(), found
}

// pick returns the replica for key by rendezvous hashing over the replicas
// that are up — every router, in every agent, picks the same one — and
// whether it was up; when none is, the best of all (it may be back). Nil
// when no replica is listed.
func (rt *router) pick(key uint64, now int64) (*replica, bool) {
	return rt.pickExcept(key, now, nil)
}

// pickExcept is pick among the replicas not in skip (those that failed
// the export already); nil when every one is.
func (rt *router) pickExcept(key uint64, now int64, skip map[*replica]bool) (*replica, bool) {
	var best, bestUp *replica
	var score, scoreUp uint64
	for _, r := range *rt.replicas.Load() {
		if skip[r] {
			continue
		}
		s := mix(key ^ r.hash)
		if best == nil || s > score {
			best, score = r, s
		}
		if r.up(now) && (bestUp == nil || s > scoreUp) {
			bestUp, scoreUp = r, s
		}
	}
	if bestUp != nil {
		return bestUp, true
	}
	return best, false
}

// markDown takes r out of routing for down_for.
func (rt *router) markDown(ctx context.Context, r *replica, now int64, err error) {
	if r.downUntil.Swap(now+int64(rt.downFor)) <= now {
		rt.logger.Warn("gateway replica failed an export; its hosts go to the other replicas",
			zap.String("endpoint", r.endpoint), zap.Duration("down_for", rt.downFor), zap.Error(err))
	}
	rt.tel.ExporterHostroutingFailovers.Add(ctx, 1, r.attrs)
}

func (rt *router) observeEndpoints(_ context.Context, o metric.Int64Observer) error {
	now := rt.now().UnixNano()
	var up, down int64
	for _, r := range *rt.replicas.Load() {
		if r.up(now) {
			up++
		} else {
			down++
		}
	}
	o.Observe(up, metric.WithAttributes(attribute.String("state", "up")))
	o.Observe(down, metric.WithAttributes(attribute.String("state", "down")))
	return nil
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// mix is splitmix64's finaliser: FNV of similar strings differs in few
// bits, and rendezvous hashing needs every bit to count.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
