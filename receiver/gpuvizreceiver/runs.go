package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// A tick series often holds one value for long stretches: the throttle
// times while nothing throttles, GPM activity and NVLink traffic of an idle
// or single-GPU engine. Every point costs every exporter downstream, so the
// inner points of a run of equal values are not recorded: a run is bounded
// by its first and last point, and a consumer that reads a point as the
// value since the previous one (as the gpuviz processor and any step
// interpolation do) loses nothing. Every hand-on to the pipeline carries
// the latest point of every series, so no series lags behind the others
// (the processor releases a span once any series covers its end).

// tickRuns is the run state of one GPU's tick series, kept by whoever
// records its ticks.
type tickRuns struct {
	fields [numTickFields]seriesRun
	gpm    [len(gpmMetrics)]seriesRun
}

// seriesRun is where one series' current run stands.
type seriesRun struct {
	pendingTS pcommon.Timestamp // the run's latest point, not yet recorded
	pendingV  float64
	pending   bool
	last      float64 // the value of the run
	started   bool
}

// take passes to record the points to record for the reading (ts, v), in
// time order: none (inside a run), itself, or the end of the run it ends
// and itself.
func (s *seriesRun) take(ts pcommon.Timestamp, v float64, record func(pcommon.Timestamp, float64)) {
	if s.started && v == s.last {
		s.pendingTS, s.pendingV, s.pending = ts, v, true
		return
	}
	s.flush(record)
	record(ts, v)
	s.started, s.last = true, v
}

// flush records the run's latest point, if it is not yet; the run goes on.
func (s *seriesRun) flush(record func(pcommon.Timestamp, float64)) {
	if s.pending {
		record(s.pendingTS, s.pendingV)
		s.pending = false
	}
}

// flush records the latest point of every series of GPU g that is not yet.
func (r *tickRuns) flush(mb *metadata.MetricsBuilder, g *gpu) {
	for k := range r.fields {
		r.fields[k].flush(func(ts pcommon.Timestamp, v float64) { recordField(mb, g, tickField(k), ts, v) })
	}
	for i := range r.gpm {
		r.gpm[i].flush(func(ts pcommon.Timestamp, v float64) { recordGPMPoint(mb, ts, g, i, v) })
	}
}

// tickRecorder holds one GPU's ticks between hand-ons: its runs and a
// builder of its own, as the scrape has. mdatagen's Record compares a
// point with every point of its metric so far (for one with the same
// attributes and timestamps), so a builder shared by all GPUs makes
// (GPUs × ticks)²/2 comparisons per metric and hand-on, one per GPU
// GPUs × ticks²/2 (docs/benchmarks.md).
type tickRecorder struct {
	g    *gpu
	runs tickRuns
	mb   *metadata.MetricsBuilder
}

func newTickRecorder(g *gpu, mb *metadata.MetricsBuilder) *tickRecorder {
	return &tickRecorder{g: g, mb: mb}
}

func (t *tickRecorder) record(r *tickReading) { recordTick(t.mb, t.g, r, &t.runs) }

// handOn moves what was recorded, each run's latest point included, into
// md, a batch of one resource (mergeMetrics).
func (t *tickRecorder) handOn(md pmetric.Metrics, resource pcommon.Resource) {
	t.runs.flush(t.mb, t.g)
	mergeMetrics(md, t.mb.Emit(metadata.WithResource(resource)))
}
