package hostroutingexporter // import "github.com/gpuviz/gpuviz/exporter/hostroutingexporter"

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"
)

// signal is what routing needs to know of one kind of telemetry: its
// resources, how to build a subset of them, how a replica's exporter takes
// it and how a partial failure is reported for exporterhelper to retry
// only what failed.
type signal[T any] struct {
	resources func(T) int
	resource  func(T, int) pcommon.Resource
	subset    func(T, []int) T
	create    func(context.Context, exporter.Settings, *otlpexporter.Config) (consumerComponent[T], error)
	failed    func(error, T) error
}

type consumerComponent[T any] interface {
	component.Component
	consume(context.Context, T) error
}

var traces = signal[ptrace.Traces]{
	resources: func(td ptrace.Traces) int { return td.ResourceSpans().Len() },
	resource:  func(td ptrace.Traces, i int) pcommon.Resource { return td.ResourceSpans().At(i).Resource() },
	subset: func(td ptrace.Traces, idx []int) ptrace.Traces {
		out := ptrace.NewTraces()
		out.ResourceSpans().EnsureCapacity(len(idx))
		for _, i := range idx {
			td.ResourceSpans().At(i).CopyTo(out.ResourceSpans().AppendEmpty())
		}
		return out
	},
	create: func(ctx context.Context, set exporter.Settings, cfg *otlpexporter.Config) (consumerComponent[ptrace.Traces], error) {
		e, err := otlpexporter.NewFactory().CreateTraces(ctx, set, cfg)
		return tracesConsumer{e}, err
	},
	failed: func(err error, td ptrace.Traces) error { return consumererror.NewTraces(err, td) },
}

var metrics = signal[pmetric.Metrics]{
	resources: func(md pmetric.Metrics) int { return md.ResourceMetrics().Len() },
	resource:  func(md pmetric.Metrics, i int) pcommon.Resource { return md.ResourceMetrics().At(i).Resource() },
	subset: func(md pmetric.Metrics, idx []int) pmetric.Metrics {
		out := pmetric.NewMetrics()
		out.ResourceMetrics().EnsureCapacity(len(idx))
		for _, i := range idx {
			md.ResourceMetrics().At(i).CopyTo(out.ResourceMetrics().AppendEmpty())
		}
		return out
	},
	create: func(ctx context.Context, set exporter.Settings, cfg *otlpexporter.Config) (consumerComponent[pmetric.Metrics], error) {
		e, err := otlpexporter.NewFactory().CreateMetrics(ctx, set, cfg)
		return metricsConsumer{e}, err
	},
	failed: func(err error, md pmetric.Metrics) error { return consumererror.NewMetrics(err, md) },
}

type tracesConsumer struct{ exporter.Traces }

func (c tracesConsumer) consume(ctx context.Context, td ptrace.Traces) error {
	return c.ConsumeTraces(ctx, td)
}

type metricsConsumer struct{ exporter.Metrics }

func (c metricsConsumer) consume(ctx context.Context, md pmetric.Metrics) error {
	return c.ConsumeMetrics(ctx, md)
}

// replicaExporter is the OTLP exporter of one replica for one signal; busy
// counts the exports in flight, so that one of a replica no longer listed
// is shut down after them.
type replicaExporter[T any] struct {
	exp  consumerComponent[T]
	busy sync.WaitGroup
}

// routingExporter routes one signal's resources to the replicas.
type routingExporter[T any] struct {
	sig      signal[T]
	router   *router
	settings exporter.Settings
	protocol otlpexporter.Config

	mu         sync.Mutex
	host       component.Host
	replicas   map[string]*replicaExporter[T]
	generation int64
	retiring   sync.WaitGroup
}

func newRoutingExporter[T any](sig signal[T], rt *router, set exporter.Settings, cfg *Config) *routingExporter[T] {
	protocol := cfg.Protocol.OTLP
	// One attempt per replica: failing over is faster than retrying a
	// replica that is gone, and the queue and retries of the routing
	// exporter itself cover the rest.
	protocol.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	protocol.RetryConfig.Enabled = false
	return &routingExporter[T]{
		sig: sig, router: rt, settings: set, protocol: protocol,
		replicas: map[string]*replicaExporter[T]{},
	}
}

func (e *routingExporter[T]) start(ctx context.Context, host component.Host) error {
	if err := e.checkProtocol(ctx, host); err != nil {
		return err
	}
	e.mu.Lock()
	e.host = host
	e.mu.Unlock()
	return e.router.start(ctx)
}

// checkProtocol makes, as each replica's OTLP exporter will at its first
// export, a gRPC client of protocol.otlp (it loads the TLS files and finds
// the auth extension; it does not dial), and closes it. A setting that
// cannot work fails the start, as it would a plain OTLP exporter's, rather
// than every export, blamed on each replica in turn.
func (e *routingExporter[T]) checkProtocol(ctx context.Context, host component.Host) error {
	conn, err := e.protocol.ClientConfig.ToClientConn(ctx, host.GetExtensions(), e.settings.TelemetrySettings)
	if err != nil {
		return fmt.Errorf("protocol.otlp: %w", err)
	}
	return conn.Close()
}

func (e *routingExporter[T]) shutdown(ctx context.Context) error {
	e.mu.Lock()
	var errs []error
	for endpoint, r := range e.replicas {
		r.busy.Wait()
		errs = append(errs, r.exp.Shutdown(ctx))
		delete(e.replicas, endpoint)
	}
	e.mu.Unlock()
	e.retiring.Wait()
	if e.host != nil {
		e.router.shutdown()
	}
	return errors.Join(errs...)
}

// push routes each resource of data to its replica; a replica that fails
// is marked down and its resources go to their next replica, until they
// are sent or every replica has failed. What could not be sent is returned
// as a partial failure, so that only it is retried.
func (e *routingExporter[T]) push(ctx context.Context, data T) error {
	n := e.sig.resources(data)
	keys := make([]uint64, n)
	pending := make([]int, n)
	for i := range n {
		k, ok := e.router.key(e.sig.resource(data, i).Attributes())
		if !ok {
			e.router.tel.ExporterHostroutingUnkeyedResources.Add(ctx, 1)
		}
		keys[i], pending[i] = k, i
	}
	var lost []int
	var refused, failed []error // permanent; retryable, for lost
	// A replica that failed is not tried again by the same export, even
	// if its down_for ran out meanwhile: else a down_for shorter than a
	// failed export would loop until the timeout, or forever without one.
	failedHere := map[*replica]bool{}
	for round := 0; len(pending) > 0; round++ {
		if err := ctx.Err(); err != nil {
			// The export's time is up: what is left is retried, and no
			// replica is blamed for it.
			failed = append(failed, err)
			lost = append(lost, pending...)
			break
		}
		now := e.router.now().UnixNano()
		if len(*e.router.replicas.Load()) == 0 {
			// DNS has not listed any yet (a list, once there, never
			// empties): retried, not lost.
			failed = append(failed, errors.New("no gateway replica is listed"))
			lost = append(lost, pending...)
			break
		}
		groups := map[*replica][]int{}
		var order []*replica
		wasUp := map[*replica]bool{}
		for _, i := range pending {
			r, up := e.router.pickExcept(keys[i], now, failedHere)
			if r == nil { // every replica has failed this export
				lost = append(lost, i)
				continue
			}
			if _, ok := groups[r]; !ok {
				order = append(order, r)
				wasUp[r] = up
			}
			groups[r] = append(groups[r], i)
		}
		pending = pending[:0:0]
		// The replicas are sent to at once: one that hangs must not spend
		// the others' share of the export's timeout.
		errs := make([]error, len(order))
		var wg sync.WaitGroup
		for j, r := range order {
			idx := groups[r]
			part := data
			if len(idx) < n {
				part = e.sig.subset(data, idx)
			}
			e.router.tel.ExporterHostroutingResourcesRouted.Add(ctx, int64(len(idx)), r.attrs)
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = e.send(ctx, r, part)
			}()
		}
		wg.Wait()
		for j, r := range order {
			idx, err := groups[r], errs[j]
			// A replica that failed once the export's time was up is to
			// blame only if it had all of that time (the first round) and
			// used it; a cancelled export blames none.
			blamed := ctx.Err() == nil || (round == 0 && errors.Is(ctx.Err(), context.DeadlineExceeded))
			switch {
			case err == nil:
			case consumererror.IsPermanent(err):
				refused = append(refused, fmt.Errorf("%s: %w", r.endpoint, err))
				e.router.tel.ExporterHostroutingResourcesRefused.Add(ctx, int64(len(idx)), r.attrs)
			case blamed:
				// Its resources go to their next replica: one up if
				// any is, else the next of those marked down (it may be
				// back), until every replica has failed this export.
				failedHere[r] = true
				if wasUp[r] {
					e.router.markDown(ctx, r, now, err)
				}
				failed = append(failed, fmt.Errorf("%s: %w", r.endpoint, err))
				pending = append(pending, idx...)
			default: // the time is up: retried later
				failed = append(failed, fmt.Errorf("%s: %w", r.endpoint, err))
				lost = append(lost, idx...)
			}
		}
	}
	switch {
	case len(lost) > 0:
		// What a replica refused for good is not retried with the rest: a
		// permanent error in the chain would make exporterhelper drop all.
		if len(refused) > 0 {
			e.settings.Logger.Warn("a gateway replica refused data for good; it is dropped, the rest retried",
				zap.Error(errors.Join(refused...)))
		}
		return e.sig.failed(errors.Join(failed...), e.sig.subset(data, lost))
	case len(refused) > 0:
		return consumererror.NewPermanent(errors.Join(refused...))
	}
	return nil
}

// send exports part to replica r through its OTLP exporter, creating it on
// first use.
func (e *routingExporter[T]) send(ctx context.Context, r *replica, part T) error {
	re, err := e.replicaExporter(ctx, r.endpoint)
	if err != nil {
		return err
	}
	defer re.busy.Done()
	return re.exp.consume(ctx, part)
}

// replicaExporter returns endpoint's exporter with its busy count taken,
// first retiring the exporters of replicas the resolver no longer lists.
func (e *routingExporter[T]) replicaExporter(ctx context.Context, endpoint string) (*replicaExporter[T], error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if g := e.router.generation.Load(); g != e.generation {
		e.generation = g
		for ep, r := range e.replicas {
			if !e.router.listed(ep) {
				delete(e.replicas, ep)
				e.retiring.Add(1)
				go func() {
					defer e.retiring.Done()
					r.busy.Wait()
					_ = r.exp.Shutdown(context.Background())
				}()
			}
		}
	}
	if r := e.replicas[endpoint]; r != nil {
		r.busy.Add(1)
		return r, nil
	}
	if !e.router.listed(endpoint) {
		// Dropped by the resolver since the export picked it: an exporter
		// made now would outlive the retiring above. Failed over instead.
		return nil, fmt.Errorf("%s is no longer listed", endpoint)
	}
	cfg := e.protocol
	cfg.ClientConfig.Endpoint = endpoint
	set := e.settings
	set.ID = component.NewIDWithName(otlpexporter.NewFactory().Type(), e.settings.ID.String()+"/"+endpoint)
	set.Logger = e.settings.Logger.With(zap.String("endpoint", endpoint))
	exp, err := e.sig.create(ctx, set, &cfg)
	if err != nil {
		return nil, fmt.Errorf("exporter for %s: %w", endpoint, err)
	}
	if err := exp.Start(ctx, e.host); err != nil {
		return nil, fmt.Errorf("exporter for %s: %w", endpoint, err)
	}
	r := &replicaExporter[T]{exp: exp}
	e.replicas[endpoint] = r
	r.busy.Add(1)
	return r, nil
}
