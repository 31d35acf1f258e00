package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseRefusesNonPositive(t *testing.T) {
	for _, args := range [][]string{{"--rate", "0"}, {"--batch", "-1"}, {"--duration", "0s"}, {"--max-in-flight", "0"}, {"extra"}} {
		_, err := parse(args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
	// A rate that is no number, or so high that no request is due after
	// another, sent as fast as the loop turns: hundreds of millions of
	// spans "offered" a second.
	for _, rate := range []string{"NaN", "+Inf", "1e+12"} {
		_, err := parse([]string{"--rate", rate}, io.Discard)
		assert.ErrorContains(t, err, "--rate "+rate+": want a positive number of spans per second, at most 1e+08", rate)
	}
	_, err := parse([]string{"--retry", "--retry-backoff", "-1s"}, io.Discard)
	assert.ErrorContains(t, err, "--retry-backoff -1s: must not be negative")
	o, err := parse([]string{"--host", "node-1"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 20000.0, o.cfg.Rate)
	assert.False(t, o.cfg.Retry, "refusals are final by default")
}

func TestHelpSaysWhatItDoes(t *testing.T) {
	var out strings.Builder
	_, err := parse([]string{"-h"}, &out)
	assert.ErrorIs(t, err, flag.ErrHelp)
	assert.True(t, strings.HasPrefix(out.String(), "gpuviz-stress offers an OTLP/gRPC receiver"), out.String())
	assert.Contains(t, out.String(), "-max-in-flight int")
}

type okReceiver struct {
	ptraceotlp.UnimplementedGRPCServer
}

func (*okReceiver) Export(context.Context, ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	return ptraceotlp.NewExportResponse(), nil
}

// serve runs recv as an OTLP/gRPC receiver until the test ends and
// returns its address.
func serve(t *testing.T, recv ptraceotlp.GRPCServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(srv, recv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// jsonSummary is what a --json run printed.
type jsonSummary struct {
	Offered  int64            `json:"offered_spans"`
	Accepted int64            `json:"accepted_spans"`
	Unsent   int64            `json:"unsent_spans"`
	Refused  map[string]int64 `json:"refused_spans"`
}

// runJSON runs 200 ms at 1,000 spans/s against endpoint with --json and
// returns the summary it printed and the run's error.
func runJSON(t *testing.T, endpoint string, flags ...string) (jsonSummary, error) {
	t.Helper()
	o, err := parse(append([]string{"--endpoint", endpoint, "--rate", "1000", "--duration", "200ms", "--batch", "10", "--json"}, flags...), io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	runErr := run(context.Background(), o, &out)
	var s jsonSummary
	require.NoError(t, json.Unmarshal(out.Bytes(), &s), out.String())
	return s, runErr
}

func TestRunPrintsJSON(t *testing.T) {
	s, err := runJSON(t, serve(t, &okReceiver{}))
	require.NoError(t, err)
	assert.Positive(t, s.Offered)
	assert.Equal(t, s.Offered, s.Accepted+s.Unsent)
	assert.Empty(t, s.Refused)
}

// halfReceiver refuses every other request as memory_limiter does.
type halfReceiver struct {
	ptraceotlp.UnimplementedGRPCServer
	n atomic.Int64
}

func (r *halfReceiver) Export(context.Context, ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	if r.n.Add(1)%2 == 0 {
		return ptraceotlp.NewExportResponse(), status.Error(codes.ResourceExhausted, "data refused due to high memory usage")
	}
	return ptraceotlp.NewExportResponse(), nil
}

// A collector that refuses part of what it is offered (the backpressure a
// run measures) and accepts the rest: the run succeeds, with the refusals
// counted.
func TestRunSucceedsWhenSomeIsRefused(t *testing.T) {
	s, err := runJSON(t, serve(t, &halfReceiver{}))
	require.NoError(t, err)
	assert.Positive(t, s.Accepted)
	assert.Positive(t, s.Refused["ResourceExhausted"], "%+v", s)
}

// A run against an endpoint nothing listens on still prints its counts,
// and fails: nothing at all got through.
func TestRunFailsWhenNothingIsAccepted(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())

	s, err := runJSON(t, addr, "--timeout", "100ms")
	require.ErrorContains(t, err, "was accepted by "+addr)
	assert.Positive(t, s.Offered)
	assert.Zero(t, s.Accepted)
}
