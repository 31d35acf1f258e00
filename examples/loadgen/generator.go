package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
	"github.com/gpuviz/gpuviz/internal/inferspans"
	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// generator emits, at every tick, the spans of the requests that finished
// since the last one (as servers export a request's spans when it ends),
// and the ground truth. Not safe for concurrent use.
type generator struct {
	src      source
	exp      *exporter
	truth    *truthFile // nil without --truth
	families []string   // in the summary's order
	// synthetic is synthetic mode's source, which turns arrivals away.
	synthetic *syntheticSource
	counts    map[string]int64
	noSpan    int64 // aborted requests whose server exported nothing
	last      int64 // every request that finished before it was emitted
	logger    *log.Logger
	progress  int64 // when the next progress line is due
	// node is an engine scenario's simulation (nil otherwise): its servers'
	// /metrics read it.
	node *infersim.Node
}

// newGenerator builds what cfg asks for from start (Unix ns) on; host is
// the host.name the collector's receiver reports.
func newGenerator(cfg config, start int64, exp *exporter, host string, logger *log.Logger, rng *rand.Rand) (*generator, error) {
	g := &generator{exp: exp, counts: map[string]int64{}, last: start, logger: logger, progress: start + int64(progressEvery)}
	if cfg.Mode == modeSynthetic || cfg.Mode == modeFlood {
		var inner requestSource
		if cfg.Mode == modeFlood {
			inner = newFloodSource(start, cfg.Rate, rng)
		} else {
			g.synthetic = newSyntheticSource(start, cfg.Rate, cfg.Concurrency, defaultShape, rng)
			inner = g.synthetic
		}
		src := &legacySource{
			inner:    inner,
			families: cfg.Families, match: cfg.Match, service: cfg.Service, host: host,
		}
		if cfg.Match == matchAttribute {
			src.gpuIDs = []string{cfg.GPUUUID}
		}
		g.src, g.families = src, cfg.Families
		return g, nil
	}
	model, err := nvmlsim.LookupModel(cfg.SimModel)
	if err != nil {
		return nil, err
	}
	var uuids []string
	for i := range cfg.SimGPUs {
		uuids = append(uuids, nvmlsim.SimulatedUUID(model.Name, cfg.SimSeed, i))
	}
	if cfg.Scenario == scenarioSequential {
		g.src = &legacySource{
			inner:    newSimulatedSource(model, cfg.SimSeed, cfg.SimGPUs),
			families: cfg.Families, match: cfg.Match, service: cfg.Service, host: host, gpuIDs: uuids,
		}
		g.families = cfg.Families
		return g, nil
	}
	// The collector's simulated GPUs follow exactly this node.
	node, err := nvmlsim.NewNode(model.Name, cfg.Scenario, cfg.SimGPUs, cfg.SimSeed)
	if err != nil {
		return nil, err
	}
	sc := node.Scenario()
	g.node = node
	g.src = newEngineSource(node, inferspans.Env{Host: host, GPUIDs: uuids})
	for _, e := range sc.Engines {
		if !slices.Contains(g.families, e.Family) {
			g.families = append(g.families, e.Family)
		}
	}
	if cfg.Truth != "" {
		if g.truth, err = createTruth(cfg.Truth, node, node.Header(cfg.SimSeed, uuids, host), start); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// loop ticks at every time ticks delivers until ctx ends or ticks closes.
// Only a failure to write the truth stops it: a truth file with holes
// would mislead the scorer.
func (g *generator) loop(ctx context.Context, ticks <-chan time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case now, ok := <-ticks:
			if !ok {
				return nil
			}
			if err := g.tick(ctx, now.UnixNano()-int64(settle)); err != nil {
				return err
			}
			if t := now.UnixNano(); t >= g.progress {
				g.logger.Print(g.summary())
				g.progress = t + int64(progressEvery)
			}
		}
	}
}

// tick emits the requests that finished in [last, to). Exports outlive a
// cancelled ctx (each is bounded), so the last tick's spans still leave.
func (g *generator) tick(ctx context.Context, to int64) error {
	if to <= g.last {
		return nil
	}
	reqs := g.src.Finished(g.last, to)
	g.last = to
	td := ptrace.NewTraces()
	for _, s := range reqs {
		if inferspans.Append(td, s.req, s.srv.engine, s.srv.env) {
			g.counts[s.srv.engine.Family]++
		} else {
			g.noSpan++
		}
	}
	if td.SpanCount() > 0 {
		g.exp.export(context.WithoutCancel(ctx), td)
	}
	if g.truth != nil {
		return g.truth.advance(reqs, to)
	}
	return nil
}

// close flushes and closes the truth file and the exporter's connection.
func (g *generator) close() error {
	var err error
	if g.truth != nil {
		err = g.truth.close()
	}
	return errors.Join(err, g.exp.close())
}

// summary is the one line printed on exit: requests emitted per family, and
// the aborted requests whose server exported no span.
func (g *generator) summary() string {
	var b strings.Builder
	b.WriteString("requests emitted:")
	var total int64
	for _, f := range g.families {
		fmt.Fprintf(&b, " %s=%d", f, g.counts[f])
		total += g.counts[f]
	}
	fmt.Fprintf(&b, " total=%d aborted_without_span=%d", total, g.noSpan)
	return b.String()
}
