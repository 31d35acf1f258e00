package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// How spans name the GPUs that served them (--match).
const (
	// matchProcess: the resource's process.pid is the simulated worker's
	// PID on the GPU, so the processor matches by process. One resource, so
	// one TracerProvider, per simulated GPU (and family).
	matchProcess = "process"
	// matchAttribute: a hw.id span attribute carries the GPU's UUID.
	matchAttribute = "attribute"
	// matchHost: no hint; the processor uses every GPU of the host.
	matchHost = "host"
)

// providerKey tells resources apart: a family's service name, and the GPU
// whose worker process the spans come from (-1: the load generator's own
// process).
type providerKey struct {
	family string
	gpu    int
}

// emitter turns requests into spans of the configured families. Not safe for
// concurrent use.
type emitter struct {
	families []string
	match    string
	service  string // service.name of the vLLM spans
	host     string // host.name, as the gpuviz receiver reports it
	ownPID   int
	// gpuID returns the hw.id hint of a request in attribute mode ("" for
	// none).
	gpuID       func(r nvmlsim.Request) string
	newProvider func(*resource.Resource) *sdktrace.TracerProvider

	providers map[providerKey]*sdktrace.TracerProvider
	order     []*sdktrace.TracerProvider
	counts    map[string]int64
	tritonSeq int64
}

func (e *emitter) family(r nvmlsim.Request) string {
	if len(e.families) == 1 {
		return e.families[0]
	}
	return e.families[splitmix(r.ID^0xfa)%uint64(len(e.families))]
}

func (e *emitter) serviceName(family string) string {
	switch family {
	case familyTGI:
		return tgiService
	case familyTriton:
		return tritonService
	}
	return e.service
}

// provider returns the TracerProvider whose resource says who served r.
func (e *emitter) provider(family string, r nvmlsim.Request) *sdktrace.TracerProvider {
	key := providerKey{family: family, gpu: -1}
	if e.match == matchProcess && r.GPU >= 0 {
		key.gpu = r.GPU
	}
	if tp, ok := e.providers[key]; ok {
		return tp
	}
	pid := int64(e.ownPID)
	if key.gpu >= 0 {
		pid = int64(nvmlsim.SimulatedPID(key.gpu))
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", e.serviceName(family)),
		attribute.String("host.name", e.host),
		attribute.Int64("process.pid", pid),
		attribute.String("telemetry.sdk.language", "go"),
		attribute.String("telemetry.sdk.name", "opentelemetry"),
		attribute.String("telemetry.sdk.version", sdk.Version()),
	)
	tp := e.newProvider(res)
	if e.providers == nil {
		e.providers = map[providerKey]*sdktrace.TracerProvider{}
	}
	e.providers[key] = tp
	e.order = append(e.order, tp)
	return tp
}

// emit exports the spans of one finished request, in the family the request
// falls to (a pure function of its ID).
func (e *emitter) emit(ctx context.Context, r nvmlsim.Request) {
	family := e.family(r)
	var hints []attribute.KeyValue
	if e.match == matchAttribute && e.gpuID != nil {
		if id := e.gpuID(r); id != "" {
			hints = []attribute.KeyValue{attribute.String(hwIDKey, id)}
		}
	}
	tp := e.provider(family, r)
	switch family {
	case familyVLLM:
		emitVLLM(ctx, tp.Tracer(vllmTracer), r, hints)
	case familyTGI:
		emitTGI(ctx, tp.Tracer(tgiTracer), r, hints)
	case familyTriton:
		e.tritonSeq++
		emitTriton(ctx, tp.Tracer(tritonTracer), r, e.tritonSeq, hints)
	}
	if e.counts == nil {
		e.counts = map[string]int64{}
	}
	e.counts[family]++
}

// shutdown flushes and shuts every provider down.
func (e *emitter) shutdown(ctx context.Context) error {
	var errs []error
	for _, tp := range e.order {
		if err := tp.ForceFlush(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := tp.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// summary is the one line printed on exit: requests emitted per family.
func (e *emitter) summary() string {
	var b strings.Builder
	b.WriteString("requests emitted:")
	var total int64
	for _, f := range e.families {
		fmt.Fprintf(&b, " %s=%d", f, e.counts[f])
		total += e.counts[f]
	}
	fmt.Fprintf(&b, " total=%d", total)
	return b.String()
}
