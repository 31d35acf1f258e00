package main

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
)

func TestParseRefusesNonsense(t *testing.T) {
	for _, args := range [][]string{{"--hosts", "0"}, {"--duration", "0s"}, {"--spans-per-host", "-1"}} {
		_, err := parse(args, &bytes.Buffer{})
		assert.Error(t, err, "%v", args)
	}
	o, err := parse([]string{"--hosts", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 3, o.hosts)
}

// gateway counts what fleetload sends it: data points per host.name, and
// spans per host.name.
type gateway struct {
	pmetricotlp.UnimplementedGRPCServer
	mu     sync.Mutex
	points map[string]int
	spans  map[string]int
}

func (g *gateway) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rms := req.Metrics().ResourceMetrics()
	for i := range rms.Len() {
		h, _ := rms.At(i).Resource().Attributes().Get("host.name")
		g.points[h.AsString()] += rms.At(i).ScopeMetrics().At(0).Metrics().Len()
	}
	return pmetricotlp.NewExportResponse(), nil
}

type spans struct {
	ptraceotlp.UnimplementedGRPCServer
	g *gateway
}

func (s *spans) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		h, _ := rss.At(i).Resource().Attributes().Get("host.name")
		s.g.spans[h.AsString()] += rss.At(i).ScopeSpans().At(0).Spans().Len()
	}
	return ptraceotlp.NewExportResponse(), nil
}

func TestEveryHostGetsTheReceiversBatchesAndItsSpans(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gateway{points: map[string]int{}, spans: map[string]int{}}
	srv := grpc.NewServer()
	pmetricotlp.RegisterGRPCServer(srv, g)
	ptraceotlp.RegisterGRPCServer(srv, &spans{g: g})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	var out bytes.Buffer
	require.NoError(t, run(context.Background(), options{
		endpoint: ln.Addr().String(), hosts: 3, gpus: 2, interval: time.Second, duration: 3 * time.Second,
		prefix: "n-", spans: 10,
	}, &out))
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Len(t, g.points, 3, "one name per host: %v", g.points)
	for _, h := range []string{"n-000", "n-001", "n-002"} {
		assert.Positive(t, g.points[h], h)
		assert.Equal(t, g.points["n-000"], g.points[h], "every host gets every batch")
		assert.Positive(t, g.spans[h], "%s gets its spans", h)
	}
	assert.Contains(t, out.String(), "0 exports failed")
}
