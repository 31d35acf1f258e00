package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Retry policy of an export: a few attempts, each bounded, with a doubling
// pause, so a collector that is down costs a tick's spans, never the loop.
const (
	exportAttempts   = 4
	exportTimeout    = 5 * time.Second
	exportBackoff    = 200 * time.Millisecond
	exportMaxBackoff = 2 * time.Second
)

// sendFunc sends one request and returns how many spans the receiver
// rejected in a partial success. A permanent error is not retried.
type sendFunc func(ctx context.Context, req ptraceotlp.ExportRequest) (rejected int64, err error)

// permanent marks an error that retrying cannot fix (OTLP: a bad request).
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// exporter sends traces over OTLP. Not safe for concurrent use.
type exporter struct {
	send             sendFunc
	close            func() error
	sleep            func(context.Context, time.Duration) error
	attempts         int
	timeout, backoff time.Duration
	errors           *errorLogger
	describe         string // protocol and endpoint, for the log

	spans, dropped   int64
	batches, retries int64
	rejected, failed int64 // spans the receiver refused; batches given up on
}

func newExporter(cfg config, logger *errorLogger) (*exporter, error) {
	x := &exporter{
		attempts: exportAttempts, timeout: exportTimeout, backoff: exportBackoff,
		errors: logger, sleep: sleepCtx,
		describe: "OTLP/" + cfg.Protocol + " to " + cfg.Endpoint,
	}
	var err error
	if cfg.Protocol == "http" {
		x.send, x.close = httpSender(cfg.Endpoint, cfg.Insecure)
	} else {
		x.send, x.close, err = grpcSender(cfg.Endpoint, cfg.Insecure)
	}
	return x, err
}

// export sends td, retrying a failure that may pass; it gives up after the
// last attempt or when ctx ends, and counts what it dropped.
func (x *exporter) export(ctx context.Context, td ptrace.Traces) {
	n := int64(td.SpanCount())
	req := ptraceotlp.NewExportRequestFromTraces(td)
	wait := x.backoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, x.timeout)
		rejected, err := x.send(actx, req)
		cancel()
		if err == nil {
			x.batches++
			x.spans += n - rejected
			if rejected > 0 {
				x.rejected += rejected
				x.errors.Handle(fmt.Errorf("%s: the receiver rejected %d of %d spans", x.describe, rejected, n))
			}
			return
		}
		if errors.As(err, new(permanent)) || attempt == x.attempts || x.sleep(ctx, wait) != nil {
			x.failed++
			x.dropped += n
			x.errors.Handle(fmt.Errorf("%s: dropped %d spans after %d attempt(s): %w", x.describe, n, attempt, err))
			return
		}
		x.retries++
		wait = min(2*wait, exportMaxBackoff)
	}
}

// summary is the exporter's account for the log.
func (x *exporter) summary() string {
	return fmt.Sprintf("%s: %d spans in %d batches, %d retries, %d spans dropped in %d failed batches, %d rejected",
		x.describe, x.spans, x.batches, x.retries, x.dropped, x.failed, x.rejected)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// grpcSender exports through the OTLP gRPC service on one connection.
// Status codes are retried as the OTLP specification lists them.
func grpcSender(endpoint string, plain bool) (sendFunc, func() error, error) {
	creds := insecure.NewCredentials()
	if !plain {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP/gRPC client for %s: %w", endpoint, err)
	}
	client := ptraceotlp.NewGRPCClient(conn)
	send := func(ctx context.Context, req ptraceotlp.ExportRequest) (int64, error) {
		resp, err := client.Export(ctx, req)
		if err != nil {
			switch status.Code(err) {
			case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
				codes.OutOfRange, codes.Unavailable, codes.DataLoss:
				return 0, err
			}
			return 0, permanent{err}
		}
		return resp.PartialSuccess().RejectedSpans(), nil
	}
	return send, conn.Close, nil
}

// httpSender posts protobuf ExportRequests to /v1/traces. 429, 502, 503,
// 504 and transport errors are retried, as the OTLP specification says.
func httpSender(endpoint string, plain bool) (sendFunc, func() error) {
	scheme := "https"
	if plain {
		scheme = "http"
	}
	url := scheme + "://" + endpoint + "/v1/traces"
	client := &http.Client{}
	send := func(ctx context.Context, req ptraceotlp.ExportRequest) (int64, error) {
		body, err := req.MarshalProto()
		if err != nil {
			return 0, permanent{err}
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, permanent{err}
		}
		hreq.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := client.Do(hreq)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return 0, err
		}
		if resp.StatusCode/100 == 2 {
			r := ptraceotlp.NewExportResponse()
			if r.UnmarshalProto(b) != nil {
				return 0, nil // an empty or non-protobuf body still means accepted
			}
			return r.PartialSuccess().RejectedSpans(), nil
		}
		err = fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return 0, err
		}
		return 0, permanent{err}
	}
	return send, func() error { client.CloseIdleConnections(); return nil }
}

// errorLogger logs export errors, at most one every `every`, counting the
// rest.
type errorLogger struct {
	logger     interface{ Print(...any) }
	every      time.Duration
	now        func() time.Time
	last       time.Time
	suppressed int
}

func (h *errorLogger) Handle(err error) {
	now := h.now()
	if !h.last.IsZero() && now.Sub(h.last) < h.every {
		h.suppressed++
		return
	}
	if h.suppressed > 0 {
		h.logger.Print(fmt.Sprintf("%v (and %d more errors in the last %v)", err, h.suppressed, now.Sub(h.last).Round(time.Second)))
	} else {
		h.logger.Print(err)
	}
	h.last, h.suppressed = now, 0
}
