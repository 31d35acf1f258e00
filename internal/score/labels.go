package score

import (
	"maps"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// LabelScore is how well one kind of gpuviz label (a request's, a phase's)
// agrees with the truth bins over its windows.
type LabelScore struct {
	Spans   int `json:"spans"`   // spans whose label was scored
	Missing int `json:"missing"` // enriched request spans without the label
	// Seconds is the GPU time scored; Agreement the share of it where the
	// span's label is the bin's.
	Seconds   float64 `json:"gpu_seconds"`
	Agreement float64 `json:"agreement"`
	// Trivial is the most common true label over the windows scored, and
	// TrivialAgreement what always answering it would score.
	Trivial          string  `json:"trivial"`
	TrivialAgreement float64 `json:"trivial_agreement"`
	// Ceiling is the most any one label per span can score: every span
	// answering the true label that held most of its own window. Where
	// the truth alternates inside windows (batched steps of both kinds),
	// it bounds Agreement well below 100%.
	Ceiling float64 `json:"one_label_ceiling"`
	// Confusion is GPU seconds by true label, then by gpuviz's label.
	Confusion map[string]map[string]float64 `json:"confusion"`
}

// Labels scores the request label over [scheduled, finished), the prefill
// label over [scheduled, first_token) and the decode label over
// [first_token, finished); and, where the run handed them over
// (Options.Intervals), the labels gpuviz gave each GPU interval.
type Labels struct {
	Request LabelScore `json:"request"`
	Prefill LabelScore `json:"prefill"`
	Decode  LabelScore `json:"decode"`
	Phases  LabelScore `json:"phases"` // prefill and decode together
	// Intervals scores every GPU interval gpuviz labelled against the true
	// bins it overlaps, idle time included: the labels the bottleneck-time
	// counter, the phase spans and the live view show. Its Spans counts
	// intervals.
	Intervals LabelScore `json:"gpu_intervals"`
}

// GPUInterval is the label gpuviz gave one GPU (the truth's index) over
// [Start, End), Unix nanoseconds.
type GPUInterval struct {
	GPU        int
	Start, End int64
	Label      string
}

func scoreLabels(reqs []request, intervals []GPUInterval, tl *timeline) Labels {
	var req, pre, dec, gpu labelTally
	for _, iv := range intervals {
		gpu.addWindow(tl, []int{iv.GPU}, iv.Start, iv.End, iv.Label)
	}
	for _, r := range reqs {
		if !r.enriched {
			continue
		}
		t, attrs := r.truth, r.span.Attributes()
		req.add(tl, t.GPUs, t.Scheduled, t.Finished, attrs, attrBottleneck)
		pre.add(tl, t.GPUs, t.Scheduled, t.FirstToken, attrs, attrPrefillLabel)
		dec.add(tl, t.GPUs, t.FirstToken, t.Finished, attrs, attrDecodeLabel)
	}
	phases := pre.merged(dec)
	return Labels{Request: req.score(), Prefill: pre.score(), Decode: dec.score(), Phases: phases.score(), Intervals: gpu.score()}
}

// labelTally counts GPU nanoseconds by true label, then gpuviz label.
type labelTally struct {
	spans, missing int
	ns             map[string]map[string]int64
	ceilingNS      int64 // per span, the time its window's most held true label held
}

func (lt *labelTally) add(tl *timeline, gpus []int, from, to int64, attrs pcommon.Map, key string) {
	got, ok := label(attrs, key)
	if !ok {
		lt.missing++
		return
	}
	lt.addWindow(tl, gpus, from, to, got)
}

// addWindow scores one label, got, over [from, to) on gpus.
func (lt *labelTally) addWindow(tl *timeline, gpus []int, from, to int64, got string) {
	lt.spans++
	held := map[string]int64{}
	for _, g := range gpus {
		tl.overlapping(g, from, to, func(b *infersim.TruthBin, ns int64) {
			lt.addNS(b.Label, got, ns)
			held[b.Label] += ns
		})
	}
	lt.ceilingNS += slices.Max(append(slices.Collect(maps.Values(held)), 0))
}

func (lt *labelTally) addNS(truth, got string, ns int64) {
	if lt.ns == nil {
		lt.ns = map[string]map[string]int64{}
	}
	if lt.ns[truth] == nil {
		lt.ns[truth] = map[string]int64{}
	}
	lt.ns[truth][got] += ns
}

func (lt labelTally) merged(other labelTally) labelTally {
	out := labelTally{spans: lt.spans + other.spans, missing: lt.missing + other.missing, ceilingNS: lt.ceilingNS + other.ceilingNS}
	for _, t := range []labelTally{lt, other} {
		for truth, row := range t.ns {
			for got, ns := range row {
				out.addNS(truth, got, ns)
			}
		}
	}
	return out
}

func (lt labelTally) score() LabelScore {
	s := LabelScore{Spans: lt.spans, Missing: lt.missing, Confusion: map[string]map[string]float64{}}
	var total, agree, best int64
	for _, truth := range ordered(slices.Collect(maps.Keys(lt.ns))) {
		var rowNS int64
		s.Confusion[truth] = map[string]float64{}
		for got, ns := range lt.ns[truth] {
			s.Confusion[truth][got] = seconds(ns)
			rowNS += ns
		}
		total += rowNS
		agree += lt.ns[truth][truth]
		if rowNS > best {
			s.Trivial, best = truth, rowNS
		}
	}
	if total > 0 {
		s.Seconds = seconds(total)
		s.Agreement = float64(agree) / float64(total)
		s.TrivialAgreement = float64(best) / float64(total)
		s.Ceiling = float64(lt.ceilingNS) / float64(total)
	}
	return s
}

// ordered sorts labels as infersim.Labels lists them, any others (gpuviz's
// unknown) after, by name.
func ordered(labels []string) []string {
	rank := func(l string) int {
		if i := slices.Index(infersim.Labels, l); i >= 0 {
			return i
		}
		return len(infersim.Labels)
	}
	slices.SortFunc(labels, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return labels
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }
