// Package hostsink is an OTLP/gRPC destination for tests: it counts the
// spans and metric data points it receives per resource host.name, as a
// gateway replica would receive a host's telemetry.
package hostsink // import "github.com/gpuviz/gpuviz/internal/hostsink"

import (
	"context"
	"maps"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
)

// Sink counts what it receives per host.name.
type Sink struct {
	Addr string // host:port it listens on
	srv  *grpc.Server

	mu     sync.Mutex
	spans  map[string]int // host → spans
	points map[string]int // host → metric data points
}

// Start listens on a free loopback port until Stop or the end of the test.
func Start(t testing.TB) *Sink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Sink{Addr: ln.Addr().String(), srv: grpc.NewServer(), spans: map[string]int{}, points: map[string]int{}}
	ptraceotlp.RegisterGRPCServer(s.srv, &traceService{sink: s})
	pmetricotlp.RegisterGRPCServer(s.srv, &metricService{sink: s})
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(s.Stop)
	return s
}

// Stop closes the listener and every connection at once, as a crash would.
func (s *Sink) Stop() { s.srv.Stop() }

// Counts returns the spans and data points received so far, per host.
func (s *Sink) Counts() (spans, points map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.spans), maps.Clone(s.points)
}

type traceService struct {
	ptraceotlp.UnimplementedGRPCServer
	sink *Sink
}

func (ts *traceService) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s := ts.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		host, _ := rss.At(i).Resource().Attributes().Get("host.name")
		for _, ss := range rss.At(i).ScopeSpans().All() {
			s.spans[host.AsString()] += ss.Spans().Len()
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

type metricService struct {
	pmetricotlp.UnimplementedGRPCServer
	sink *Sink
}

func (ms *metricService) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	s := ms.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	rms := req.Metrics().ResourceMetrics()
	for i := range rms.Len() {
		host, _ := rms.At(i).Resource().Attributes().Get("host.name")
		for _, sm := range rms.At(i).ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				s.points[host.AsString()] += dataPoints(m)
			}
		}
	}
	return pmetricotlp.NewExportResponse(), nil
}

func dataPoints(m pmetric.Metric) int {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		return m.Gauge().DataPoints().Len()
	case pmetric.MetricTypeSum:
		return m.Sum().DataPoints().Len()
	case pmetric.MetricTypeHistogram:
		return m.Histogram().DataPoints().Len()
	case pmetric.MetricTypeExponentialHistogram:
		return m.ExponentialHistogram().DataPoints().Len()
	case pmetric.MetricTypeSummary:
		return m.Summary().DataPoints().Len()
	}
	return 0
}
