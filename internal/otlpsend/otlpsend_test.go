package otlpsend

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// traceWithParent is one trace of two spans, the second the first's
// child, with an event and a link.
func traceWithParent() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "test")
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	parent := ss.AppendEmpty()
	parent.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	parent.SetSpanID(pcommon.SpanID{1, 1, 1, 1, 1, 1, 1, 1})
	parent.SetName("parent")
	parent.SetStartTimestamp(1000)
	parent.SetEndTimestamp(5000)
	child := ss.AppendEmpty()
	child.SetTraceID(parent.TraceID())
	child.SetSpanID(pcommon.SpanID{2, 2, 2, 2, 2, 2, 2, 2})
	child.SetParentSpanID(parent.SpanID())
	child.SetName("child")
	child.SetStartTimestamp(2000)
	child.SetEndTimestamp(4000)
	child.Events().AppendEmpty().SetTimestamp(3000)
	l := child.Links().AppendEmpty()
	l.SetTraceID(parent.TraceID())
	l.SetSpanID(parent.SpanID())
	return td
}

func decode(t *testing.T, raw []byte) ptrace.Traces {
	t.Helper()
	req := ptraceotlp.NewExportRequest()
	require.NoError(t, req.UnmarshalProto(raw))
	return req.Traces()
}

func TestStampSaltsIDsAndShiftsTimes(t *testing.T) {
	p, err := Encode(traceWithParent())
	require.NoError(t, err)
	assert.Equal(t, 2, p.Spans())
	buf := make([]byte, p.Size())
	p.stamp(buf, 0xabcdef, 1_000_000)
	td := decode(t, buf)
	ss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	parent, child := ss.At(0), ss.At(1)
	orig := traceWithParent().ResourceSpans().At(0).ScopeSpans().At(0).Spans()

	assert.NotEqual(t, orig.At(0).TraceID(), parent.TraceID())
	assert.NotEqual(t, orig.At(0).SpanID(), parent.SpanID())
	assert.NotEqual(t, orig.At(1).SpanID(), child.SpanID())
	assert.Equal(t, parent.TraceID(), child.TraceID())
	assert.Equal(t, parent.SpanID(), child.ParentSpanID(), "the child still points at its parent")
	assert.Equal(t, parent.TraceID(), child.Links().At(0).TraceID())
	assert.Equal(t, parent.SpanID(), child.Links().At(0).SpanID())
	assert.True(t, parent.ParentSpanID().IsEmpty(), "an absent parent stays absent")

	// The latest timestamp (the parent's end, 5000) lands on 1,000,000.
	shift := pcommon.Timestamp(1_000_000 - 5000)
	assert.Equal(t, 1000+shift, parent.StartTimestamp())
	assert.Equal(t, 5000+shift, parent.EndTimestamp())
	assert.Equal(t, 2000+shift, child.StartTimestamp())
	assert.Equal(t, 4000+shift, child.EndTimestamp())
	assert.Equal(t, 3000+shift, child.Events().At(0).Timestamp())
	assert.Equal(t, "child", child.Name(), "the rest is untouched")

	// The payload itself is untouched: a second stamp starts from it.
	p.stamp(buf, 0, 5000)
	assert.True(t, decode(t, buf).ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).SpanID() == orig.At(0).SpanID())
}

func TestEncodeRefusesNoSpans(t *testing.T) {
	_, err := Encode(ptrace.NewTraces())
	assert.Error(t, err)
}

// fakeReceiver is an OTLP trace service whose answer to each request
// refuse decides.
type fakeReceiver struct {
	ptraceotlp.UnimplementedGRPCServer
	refuse func(n int) error // n: the request's number, from 0
	reject int64             // spans of each accepted request its answer's partial success rejects
	mu     sync.Mutex
	n      int
	spans  int64
	ids    map[pcommon.SpanID]bool
}

func (f *fakeReceiver) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	f.mu.Lock()
	n := f.n
	f.n++
	f.mu.Unlock()
	if err := f.refuse(n); err != nil {
		return ptraceotlp.NewExportResponse(), err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			sl := sss.At(j).Spans()
			for k := range sl.Len() {
				f.ids[sl.At(k).SpanID()] = true
				f.spans++
			}
		}
	}
	resp := ptraceotlp.NewExportResponse()
	if f.reject > 0 {
		resp.PartialSuccess().SetRejectedSpans(f.reject)
		resp.PartialSuccess().SetErrorMessage("rejected")
	}
	return resp, nil
}

func serve(t *testing.T, refuse func(n int) error) (*fakeReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	f := &fakeReceiver{refuse: refuse, ids: map[pcommon.SpanID]bool{}}
	ptraceotlp.RegisterGRPCServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

func vllmPayloads(t *testing.T, batch int) []*Payload {
	t.Helper()
	p, err := VLLM("node-1", 3, batch, 2000, 1)
	require.NoError(t, err)
	return p
}

func TestRunCountsEveryOutcome(t *testing.T) {
	// Every third request is refused as memory_limiter refuses
	// (ResourceExhausted), every fifth as unavailable, the rest accepted.
	f, addr := serve(t, func(n int) error {
		switch {
		case n%3 == 0:
			return status.Error(codes.ResourceExhausted, "memory limit")
		case n%5 == 0:
			return status.Error(codes.Unavailable, "busy")
		}
		return nil
	})
	payloads := vllmPayloads(t, 20)
	res, err := Run(context.Background(), Config{Endpoint: addr, Rate: 2000, Duration: 500 * time.Millisecond, MaxInFlight: 64, Timeout: 10 * time.Second}, payloads)
	require.NoError(t, err)

	assert.Equal(t, f.spans, res.Accepted, "accepted is what the receiver took")
	assert.Len(t, f.ids, int(f.spans), "no span ID sent twice")
	assert.Positive(t, res.Refused[codes.ResourceExhausted.String()])
	assert.Positive(t, res.Refused[codes.Unavailable.String()])
	assert.Equal(t, res.Offered, res.Accepted+res.Rejected+res.RefusedTotal()+res.Unsent)
	assert.Equal(t, int64(f.n), res.Requests)
	assert.Zero(t, res.Retries)
}

func TestRunRetries(t *testing.T) {
	// Each request is refused once (the odd attempts), then accepted.
	f, addr := serve(t, func(n int) error {
		if n%2 == 0 {
			return status.Error(codes.Unavailable, "busy")
		}
		return nil
	})
	res, err := Run(context.Background(), Config{
		Endpoint: addr, Rate: 2000, Duration: 300 * time.Millisecond, MaxInFlight: 1, Timeout: 10 * time.Second,
		Retry: true, RetryBackoff: time.Millisecond,
	}, vllmPayloads(t, 20))
	require.NoError(t, err)
	// No retry starts after the run: the last request, refused once its
	// 300 ms have passed (a loaded machine answers late), stays refused.
	// Every other request was retried once and accepted.
	last := int64(0)
	if len(res.Refused) > 0 {
		assert.Equal(t, map[string]int64{codes.Unavailable.String(): 20}, res.Refused, "at most the last request, refused at the run's end")
		last = 1
	}
	assert.Equal(t, f.spans, res.Accepted)
	assert.Equal(t, res.Requests-last, res.Retries, "one retry per request")
	assert.Positive(t, res.Retries)
	assert.Equal(t, res.Offered, res.Accepted+res.Unsent+res.RefusedTotal())
}

func TestRunDoesNotRetryPermanentRefusals(t *testing.T) {
	_, addr := serve(t, func(int) error { return status.Error(codes.InvalidArgument, "bad") })
	res, err := Run(context.Background(), Config{
		Endpoint: addr, Rate: 2000, Duration: 100 * time.Millisecond, MaxInFlight: 64, Timeout: 10 * time.Second,
		Retry: true, RetryBackoff: time.Millisecond,
	}, vllmPayloads(t, 20))
	require.NoError(t, err)
	assert.Zero(t, res.Retries)
	assert.Equal(t, res.Offered-res.Unsent, res.Refused[codes.InvalidArgument.String()])
}

func TestRunKeepsItsRateWhenAllAreInFlight(t *testing.T) {
	// The receiver answers nothing until the attempt times out: with one
	// request in flight, every later one finds no slot and is not sent.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	_, addr := serve(t, func(int) error { <-release; return nil })
	res, err := Run(context.Background(), Config{
		Endpoint: addr, Rate: 2000, Duration: 200 * time.Millisecond, MaxInFlight: 1, Timeout: 500 * time.Millisecond,
	}, vllmPayloads(t, 20))
	require.NoError(t, err)
	assert.Equal(t, int64(20), res.Refused[codes.DeadlineExceeded.String()], "the one request sent")
	assert.Equal(t, res.Offered-20, res.Unsent)
	assert.Positive(t, res.Unsent)
}

func TestVLLMSpansAreVLLMs(t *testing.T) {
	payloads := vllmPayloads(t, 5)
	td := decode(t, payloads[0].raw)
	require.Equal(t, 5, td.SpanCount())
	rs := td.ResourceSpans().At(0)
	host, _ := rs.Resource().Attributes().Get("host.name")
	assert.Equal(t, "node-1", host.Str())
	sp := rs.ScopeSpans().At(0).Spans().At(0)
	assert.Equal(t, "llm_request", sp.Name())
	assert.Equal(t, "vllm.llm_engine", rs.ScopeSpans().At(0).Scope().Name())
	_, ok := sp.Attributes().Get("gen_ai.latency.time_in_model_decode")
	assert.True(t, ok)
	assert.NotEqual(t, payloads[0].raw, payloads[1].raw, "the payloads differ")

	// Every span, stamped, ends at or before the send's time and none has
	// a zero (absent, so unmovable) timestamp.
	at := time.Now().UnixNano()
	buf := make([]byte, payloads[0].Size())
	payloads[0].stamp(buf, 1, at)
	spans := decode(t, buf).ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	for i := range spans.Len() {
		sp := spans.At(i)
		assert.Positive(t, int64(sp.StartTimestamp()), "span %d", i)
		assert.LessOrEqual(t, int64(sp.EndTimestamp()), at, "span %d", i)
		assert.Greater(t, int64(sp.EndTimestamp()), at-int64(time.Second), "span %d ends within the batch's time", i)
	}
}

// TestRunCountsPartialSuccess: spans an accepted request's answer rejects
// (OTLP partial success) are counted as rejected, not accepted.
func TestRunCountsPartialSuccess(t *testing.T) {
	f, addr := serve(t, func(int) error { return nil })
	f.mu.Lock()
	f.reject = 3
	f.mu.Unlock()
	res, err := Run(context.Background(), Config{Endpoint: addr, Rate: 2000, Duration: 200 * time.Millisecond, MaxInFlight: 64, Timeout: 10 * time.Second},
		vllmPayloads(t, 20))
	require.NoError(t, err)
	require.Positive(t, res.Requests)
	assert.Equal(t, 3*res.Requests, res.Rejected, "three spans of every request rejected")
	assert.Equal(t, f.spans-res.Rejected, res.Accepted, "accepted is what the receiver took less what it rejected")
	assert.Equal(t, res.Offered, res.Accepted+res.Rejected+res.RefusedTotal()+res.Unsent)
}

// stallingReceiver accepts HTTP/2 connections, opens every flow-control
// window as wide as HTTP/2 allows, and then reads nothing for its first
// stall: a request larger than the sockets' buffers stays half written,
// its writer blocked in the middle of it. Then it reads and discards all
// (so that closing the client does not wait on the blocked writer); it
// never answers.
func stallingReceiver(t *testing.T, stall time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(done)
		lis.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-done
				conn.Close()
			}()
			go func() {
				defer wg.Done()
				const maxWindow = 1<<31 - 1
				// SETTINGS: INITIAL_WINDOW_SIZE (4) at its maximum; then a
				// WINDOW_UPDATE on the connection (stream 0) to the same.
				settings := []byte{0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 4}
				settings = binary.BigEndian.AppendUint32(settings, maxWindow)
				update := []byte{0, 0, 4, 0x8, 0, 0, 0, 0, 0}
				update = binary.BigEndian.AppendUint32(update, maxWindow-65535)
				if _, err := conn.Write(append(settings, update...)); err != nil {
					return
				}
				select {
				case <-done:
					return
				case <-time.After(stall):
				}
				_, _ = io.Copy(io.Discard, conn)
			}()
		}
	}()
	return lis.Addr().String()
}

// TestRunDoesNotRestampABufferGRPCMayStillBeWriting: gRPC writes a
// request from the very bytes the codec gives it, and its writer drops a
// request that timed out only between frames, after Invoke has returned:
// the frame it is in is read on from the buffer. The next
// request must not be stamped into that buffer: `go test -race` reports
// the stamp's write against the gRPC writer's read, and the frame on the
// wire would mix both requests.
func TestRunDoesNotRestampABufferGRPCMayStillBeWriting(t *testing.T) {
	// The first request is sent at once and times out after 100 ms, while
	// the receiver still stalls it; the second is due 500 ms after the
	// first, in the same (only) buffer as the old code had it.
	addr := stallingReceiver(t, 300*time.Millisecond)
	// 16 MiB, more than a stalled loopback connection's socket buffers
	// take: the writer is still in the request when its attempt times out.
	p := &Payload{raw: make([]byte, 16<<20), spans: 1}
	res, err := Run(context.Background(), Config{
		Endpoint: addr, Rate: 2, Duration: 800 * time.Millisecond, MaxInFlight: 1, Timeout: 100 * time.Millisecond,
	}, []*Payload{p})
	require.NoError(t, err)
	assert.Equal(t, int64(2), res.Offered)
	assert.Positive(t, res.Refused[codes.DeadlineExceeded.String()], "the first request timed out, unanswered")
	assert.Equal(t, res.Offered, res.RefusedTotal()+res.Unsent)
}
