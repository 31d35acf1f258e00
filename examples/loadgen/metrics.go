package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
)

// runningHandler serves GET /metrics as the node's servers would, at the
// moment of the request (now): their running-request gauges.
func runningHandler(node *infersim.Node, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		// A failed write is the scraper's hang-up: nothing to answer.
		_ = inferspans.WriteRunning(w, node, now().UnixNano())
	})
	return mux
}

// serveRunning serves runningHandler on addr until the returned stop is
// called.
func serveRunning(addr string, node *infersim.Node, logger *log.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	srv := &http.Server{Handler: runningHandler(node, time.Now), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("--metrics-listen: %v", err)
		}
	}()
	logger.Printf("serving the simulated servers' /metrics on http://%s/metrics", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // after 5 s the scrape in flight is cut off
		<-done
	}, nil
}
