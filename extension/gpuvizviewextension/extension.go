package gpuvizviewextension // import "github.com/gpuviz/gpuviz/extension/gpuvizviewextension"

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/extension/gpuvizviewextension/internal/metadata"
	"github.com/gpuviz/gpuviz/internal/view"
)

// viewExtension serves the registry's sources over HTTP. It implements
// view.Registrar: gpuviz processors register with it at their Start.
type viewExtension struct {
	cfg    *Config
	set    component.TelemetrySettings
	reg    *view.Registry
	tel    *metadata.TelemetryBuilder
	server *http.Server
	addr   string // where it listens, once started
	done   chan struct{}
}

var _ view.Registrar = (*viewExtension)(nil)

func newExtension(cfg *Config, set extension.Settings) (*viewExtension, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	e := &viewExtension{cfg: cfg, set: set.TelemetrySettings, tel: tel,
		reg: view.NewRegistry(cfg.limits(), cfg.TraceURLTemplate, time.Now)}
	if err := tel.RegisterExtensionGpuvizViewGpusCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(int64(e.reg.GPUs()))
		return nil
	}); err != nil {
		return nil, err
	}
	if err := tel.RegisterExtensionGpuvizViewDroppedCallback(func(_ context.Context, o metric.Int64Observer) error {
		d := e.reg.Dropped()
		o.Observe(d.GPUs, metric.WithAttributes(attribute.String("reason", "gpus")))
		o.Observe(d.SamplesTooOld, metric.WithAttributes(attribute.String("reason", "samples_too_old")))
		o.Observe(d.RequestsOverwritten, metric.WithAttributes(attribute.String("reason", "requests_overwritten")))
		return nil
	}); err != nil {
		return nil, err
	}
	return e, nil
}

// RegisterSource gives a gpuviz processor its source (named by its
// component ID) and the function that removes it.
func (e *viewExtension) RegisterSource(id string) (*view.Source, func()) {
	return e.reg.RegisterSource(id)
}

// Start listens (failing early if the port is taken) and serves.
func (e *viewExtension) Start(ctx context.Context, host component.Host) error {
	ln, err := e.cfg.ToListener(ctx)
	if err != nil {
		return err
	}
	e.server, err = e.cfg.ToServer(ctx, host.GetExtensions(), e.set, e.reg.Handler(assets()))
	if err != nil {
		_ = ln.Close()
		return err
	}
	e.addr = ln.Addr().String()
	scheme := "http://"
	if e.cfg.TLS.HasValue() {
		scheme = "https://"
	}
	e.set.Logger.Info("serving the live view", zap.String("url", scheme+e.addr+"/"))
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			componentstatus.ReportStatus(host, componentstatus.NewFatalErrorEvent(err))
		}
	}()
	return nil
}

// Shutdown closes the server and waits for it.
func (e *viewExtension) Shutdown(context.Context) error {
	defer e.tel.Shutdown()
	if e.server == nil {
		return nil
	}
	err := e.server.Close()
	<-e.done
	e.server = nil
	return err
}
