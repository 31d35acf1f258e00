package score

import (
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// DefaultBaselineInterval is the gpuviz receiver's default collection
// interval: how often a deployment without gpuviz would read the energy
// counter.
const DefaultBaselineInterval = 10 * time.Second

// Options tune the scoring.
type Options struct {
	// BaselineInterval is the naive baseline's counter interval, a multiple
	// of the truth's bin width; 0 means DefaultBaselineInterval.
	BaselineInterval time.Duration
	// Intervals are the labels gpuviz gave GPU intervals, where the run can
	// hand them over (the in-process harness); none: not scored.
	Intervals []GPUInterval
}

// Report is the score of one scenario run. It holds plain values only, so
// it serialises to JSON as it is.
type Report struct {
	Scenario          string       `json:"scenario"`
	Seed              uint64       `json:"seed"`
	PooledSeeds       []uint64     `json:"pooled_seeds,omitempty"` // the runs' seeds where several are scored as one; Seed is then 0
	GPUModel          string       `json:"gpu_model"`
	BaselineIntervalS float64      `json:"baseline_interval_s"`
	Coverage          Coverage     `json:"coverage"`
	Energy            EnergyErrors `json:"energy"`          // gpuviz's
	Baseline          EnergyErrors `json:"baseline_energy"` // the naive baseline's, on the same requests
	Labels            Labels       `json:"labels"`
	Conservation      Conservation `json:"conservation"`
}

// Score scores the traces the collector exported for one run against the
// run's truth. The traces may come in any number of batches.
func Score(truth *infersim.Truth, traces []ptrace.Traces, opts Options) (Report, error) {
	interval := opts.BaselineInterval
	if interval == 0 {
		interval = DefaultBaselineInterval
	}
	tl, err := newTimeline(truth)
	if err != nil {
		return Report{}, err
	}
	if interval < 0 || int64(interval)%tl.width != 0 {
		return Report{}, fmt.Errorf("baseline interval %s is not a positive multiple of the truth's bin width %s", interval, time.Duration(tl.width))
	}
	if err := checkEngines(truth); err != nil {
		return Report{}, err
	}
	reqs, cov, err := matchRequests(truth, indexSpans(traces))
	if err != nil {
		return Report{}, err
	}
	gpuviz := gpuvizEstimates(reqs)
	return Report{
		Scenario:          truth.Header.Scenario,
		Seed:              truth.Header.Seed,
		GPUModel:          truth.Header.GPUModel,
		BaselineIntervalS: interval.Seconds(),
		Coverage:          cov,
		Energy:            energyErrors(reqs, gpuviz),
		Baseline:          energyErrors(reqs, onEqualTerms(baseline(truth, reqs, tl, int64(interval)), gpuviz)),
		Labels:            scoreLabels(reqs, opts.Intervals, tl),
		Conservation:      conserve(reqs, tl),
	}, nil
}

// checkEngines makes sure every request names an engine of the header and
// every engine a match the baseline knows.
func checkEngines(truth *infersim.Truth) error {
	for i, e := range truth.Header.Engines {
		if e.Match != infersim.MatchHost && e.Match != infersim.MatchAttribute {
			return fmt.Errorf("truth header: engine %d (%s): match %q is neither %q nor %q", i, e.Name, e.Match, infersim.MatchHost, infersim.MatchAttribute)
		}
	}
	for _, r := range truth.Requests {
		if r.Engine < 0 || r.Engine >= len(truth.Header.Engines) {
			return fmt.Errorf("truth request %s: engine %d, but the header lists %d", r.TraceID, r.Engine, len(truth.Header.Engines))
		}
	}
	return nil
}
