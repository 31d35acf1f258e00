package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
)

// source yields the requests that finished in [from, to) (Unix ns), in
// order of Finished, each with the server that ran it. Consecutive calls
// are given consecutive ranges.
type source interface {
	Finished(from, to int64) []served
}

// server is an inference server: its engine and the deployment it runs in.
type server struct {
	engine infersim.Engine
	env    inferspans.Env
}

// served is a finished request and its server.
type served struct {
	req infersim.Request
	srv *server
}

// engineSource serves the requests of a scenario's engines: exactly those
// the collector's simulated GPUs run for the same model, GPU count, seed and
// scenario.
type engineSource struct {
	node    *infersim.Node
	servers []server // by engine index
}

func newEngineSource(node *infersim.Node, env inferspans.Env) *engineSource {
	s := &engineSource{node: node}
	for _, e := range node.Scenario().Engines {
		s.servers = append(s.servers, server{engine: e, env: env})
	}
	return s
}

func (s *engineSource) Finished(from, to int64) []served {
	reqs := s.node.Finished(from, to)
	out := make([]served, len(reqs))
	for i, r := range reqs {
		out[i] = served{req: r, srv: &s.servers[r.Engine]}
	}
	return out
}

// truthFile writes an engine scenario's ground truth as the run passes:
// every request as it finishes (aborted ones too: they have energy), then
// every GPU's bins that have ended.
type truthFile struct {
	f    *os.File
	w    *infersim.TruthWriter
	node *infersim.Node
	gpus int
	next int64 // start of the first bin not yet written
}

// createTruth creates path and writes the header; bins are written from the
// first bin that starts at or after start.
func createTruth(path string, node *infersim.Node, h infersim.TruthHeader, start int64) (*truthFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--truth: %w", err)
	}
	w, err := infersim.NewTruthWriter(f, h)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("--truth: %w", err), f.Close())
	}
	width := int64(infersim.BinWidth)
	return &truthFile{f: f, w: w, node: node, gpus: len(h.GPUIDs), next: (start + width - 1) / width * width}, nil
}

// advance writes reqs and the bins that ended by to, and flushes, so the
// file is whole up to to while the run goes on.
func (t *truthFile) advance(reqs []served, to int64) error {
	for _, s := range reqs {
		if err := t.w.Request(s.req); err != nil {
			return err
		}
	}
	width := int64(infersim.BinWidth)
	if end := to / width * width; end > t.next {
		for gpu := range t.gpus {
			for _, b := range t.node.Bins(gpu, t.next, end) {
				if err := t.w.Bin(b); err != nil {
					return err
				}
			}
		}
		t.next = end
	}
	return t.w.Flush()
}

func (t *truthFile) close() error {
	return errors.Join(t.w.Flush(), t.f.Close())
}
