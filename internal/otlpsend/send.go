package otlpsend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// exportMethod is the OTLP trace service's one RPC.
const exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// MaxRate bounds Config.Rate, in spans per second: far above what one
// sender offers, and low enough that requests are due nanoseconds apart
// (a higher rate, or an infinite one, would send without pause).
const MaxRate = 1e8

// Config is a run's shape.
type Config struct {
	Endpoint string  // host:port of an OTLP/gRPC receiver (plaintext)
	Rate     float64 // spans per second offered
	Duration time.Duration
	// MaxInFlight bounds the requests awaiting an answer. A request due
	// while all are out is not sent (counted Unsent): the offered rate
	// stays fixed instead of slowing to what the receiver answers.
	MaxInFlight int
	Timeout     time.Duration // per attempt
	// Retry resends a request refused with a retryable code (as the OTLP
	// specification lists them) after RetryBackoff until it is accepted
	// or the run ends; without it a refusal is final.
	Retry        bool
	RetryBackoff time.Duration
}

// Result counts spans by outcome: Offered = Accepted + Rejected + the sum
// of Refused + Unsent once Run has returned.
type Result struct {
	Offered  int64 `json:"offered_spans"`
	Unsent   int64 `json:"unsent_spans"`   // due while MaxInFlight requests were out
	Accepted int64 `json:"accepted_spans"` // in accepted requests, less Rejected
	// Rejected: spans of accepted requests that the receiver's
	// partial-success answer says it rejected.
	Rejected int64 `json:"rejected_spans"`
	// Refused: spans of refused requests, by the final attempt's gRPC code
	// (ResourceExhausted, Unavailable, DeadlineExceeded, ...).
	Refused  map[string]int64 `json:"refused_spans"`
	Requests int64            `json:"requests"`
	Retries  int64            `json:"retries"`
	Elapsed  time.Duration    `json:"-"`
}

// RefusedTotal is the sum of Refused.
func (r Result) RefusedTotal() int64 {
	var n int64
	for _, v := range r.Refused {
		n += v
	}
	return n
}

// rawCodec hands gRPC the pre-encoded bytes as they are. Its name is
// proto's, so the receiver decodes them as any OTLP client's.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("otlpsend: raw codec given %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("otlpsend: raw codec given %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

var _ encoding.Codec = rawCodec{}

// retryable lists the codes the OTLP specification says a client retries.
func retryable(c codes.Code) bool {
	switch c {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// Run sends payloads, round robin, at cfg.Rate spans per second for
// cfg.Duration, then waits for the answers of the requests in flight.
// Request k is due at k times its spans over the rate after the start,
// and its timestamps are shifted so its latest span ends then; its IDs are
// salted with k, so no two sends share a span ID. Run's error is only for
// a run that could not start; refusals are counted, not returned.
func Run(ctx context.Context, cfg Config, payloads []*Payload) (Result, error) {
	if len(payloads) == 0 || !(cfg.Rate > 0 && cfg.Rate <= MaxRate) || cfg.Duration <= 0 || cfg.MaxInFlight <= 0 || cfg.Timeout <= 0 {
		return Result{}, errors.New("otlpsend: want payloads, a rate in (0, MaxRate], and a positive duration, max in flight and timeout")
	}
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return Result{}, fmt.Errorf("otlpsend: client for %s: %w", cfg.Endpoint, err)
	}
	defer conn.Close()

	size := 0
	for _, p := range payloads {
		size = max(size, len(p.raw))
	}
	// The free buffers are the in-flight bound: a send takes one and
	// gives it back when it is answered. One whose last attempt went
	// unanswered is replaced by a fresh one instead: gRPC writes a request
	// from the codec's bytes themselves and may still be writing them after
	// the attempt has timed out.
	free := make(chan []byte, cfg.MaxInFlight)
	for range cfg.MaxInFlight {
		free <- make([]byte, size)
	}

	s := &sender{conn: conn, cfg: cfg, res: Result{Refused: map[string]int64{}}}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var due time.Duration
	for k := uint64(0); ; k++ {
		p := payloads[k%uint64(len(payloads))]
		if due >= cfg.Duration {
			break
		}
		if !sleepUntil(runCtx, start.Add(due)) {
			break
		}
		s.add(func(r *Result) { r.Offered += int64(p.spans) })
		select {
		case buf := <-free:
			buf = buf[:len(p.raw)]
			p.stamp(buf, splitmix(k+1), start.Add(due).UnixNano())
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !s.send(runCtx, buf, p.spans) {
					buf = make([]byte, size)
				}
				free <- buf[:cap(buf)]
			}()
		default:
			s.add(func(r *Result) { r.Unsent += int64(p.spans) })
		}
		due += time.Duration(float64(p.spans) / cfg.Rate * float64(time.Second))
	}
	wg.Wait()
	s.res.Elapsed = time.Since(start)
	return s.res, nil
}

type sender struct {
	conn *grpc.ClientConn
	cfg  Config
	mu   sync.Mutex
	res  Result
}

func (s *sender) add(f func(*Result)) {
	s.mu.Lock()
	f(&s.res)
	s.mu.Unlock()
}

// send exports one request, retrying as cfg says, and counts its outcome.
// Attempts outlive the run's end by their timeout (an answer on its way
// is waited for), but no retry starts after it. It returns whether the
// last attempt was answered: if it timed out or was cancelled instead,
// gRPC's transport may still hold and write req (its writer drops a
// cancelled stream's queued data only between frames, after Invoke has
// returned), so req must not be rewritten.
func (s *sender) send(runCtx context.Context, req []byte, spans int) (answered bool) {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), s.cfg.Timeout)
		var resp []byte
		err := s.conn.Invoke(ctx, exportMethod, &req, &resp)
		cancel()
		code := status.Code(err)
		if err == nil {
			rejected := rejectedSpans(resp)
			s.add(func(r *Result) {
				r.Requests++
				r.Retries += int64(attempt)
				r.Accepted += int64(spans) - rejected
				r.Rejected += rejected
			})
			return true
		}
		if !s.cfg.Retry || !retryable(code) || !sleepUntil(runCtx, time.Now().Add(s.cfg.RetryBackoff)) {
			s.add(func(r *Result) {
				r.Requests++
				r.Retries += int64(attempt)
				r.Refused[code.String()] += int64(spans)
			})
			return code != codes.DeadlineExceeded && code != codes.Canceled
		}
	}
}

// rejectedSpans reads the partial success of an answer; an answer that
// does not decode rejected nothing it says.
func rejectedSpans(resp []byte) int64 {
	r := ptraceotlp.NewExportResponse()
	if err := r.UnmarshalProto(resp); err != nil {
		return 0
	}
	return r.PartialSuccess().RejectedSpans()
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// splitmix is SplitMix64's finaliser: a well-spread salt per send.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
