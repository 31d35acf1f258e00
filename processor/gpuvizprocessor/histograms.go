package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/bottleneck"
)

// What mdatagen cannot generate — histograms and exemplars — is built
// here; each name, unit and description is declared once, in this table.
var requestHistograms = [...]struct {
	name, unit, description string
	bounds                  []float64
}{
	// Energy: a short chat completion on one H100 costs a few J, a long
	// generation on 8 GPUs thousands.
	{"gpuviz.request.energy", "J", "GPU energy attributed to each inference request.",
		[]float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}},
	// Per token: tens of mJ to a few J.
	{"gpuviz.request.energy_per_output_token", "J/{token}", "GPU energy per output token of each inference request.",
		[]float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}},
	// Busy time: tens of ms to minutes.
	{"gpuviz.request.gpu_busy_time", "s", "GPU-busy seconds of each inference request (utilisation × time, summed over its GPUs).",
		[]float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120}},
}

const (
	histEnergy = iota
	histPerToken
	histBusy
	numHists
)

// exemplarsPerSeries bounds the exemplars kept on each derived series
// between two flushes: the first requests of the flush interval, so that
// keeping them costs nothing once the series has its share.
const exemplarsPerSeries = 4

type exemplar struct {
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
	ts      time.Time
	value   float64
}

// labelExemplars are one GPU's exemplars per label, indexed like
// bottleneck.Labels.
type labelExemplars [len(bottleneck.Times{})][]exemplar

// pushExemplar keeps ex while list has room. A request whose span has no
// trace or span ID (all zeros: invalid, though a sender may send it) is
// counted but makes no exemplar: one would link to no trace, and the
// Prometheus exporter would write it with no trace_id.
func pushExemplar(list []exemplar, ex exemplar) []exemplar {
	if ex.traceID.IsEmpty() || ex.spanID.IsEmpty() {
		return list
	}
	if len(list) < exemplarsPerSeries {
		return append(list, ex)
	}
	return list
}

// withoutSpans returns list without the exemplars of spans.
func withoutSpans(list []exemplar, spans map[pcommon.SpanID]bool) []exemplar {
	return slices.DeleteFunc(list, func(ex exemplar) bool { return spans[ex.spanID] })
}

// putExemplars adds list to the exemplars of a point from start to ts,
// each stamped with its request's end kept within them: a request that
// ended before its series started (held across the flush before its first
// point) or after the flush (its host's clock ahead) is stamped at the
// bound, so that no exemplar lies outside the interval its point counts.
func putExemplars(dst pmetric.ExemplarSlice, list []exemplar, start, ts pcommon.Timestamp) int64 {
	for _, ex := range list {
		e := dst.AppendEmpty()
		e.SetTimestamp(min(max(pcommon.NewTimestampFromTime(ex.ts), start), ts))
		e.SetTraceID(ex.traceID)
		e.SetSpanID(ex.spanID)
		e.SetDoubleValue(ex.value)
	}
	return int64(len(list))
}

// histKey keeps requests apart by the host of their GPUs (a gateway joins
// many hosts, and the Prometheus exporter tells series apart by their
// attributes alone), model and bottleneck.
type histKey struct {
	host, model string
	label       bottleneck.Label
}

type histogram struct {
	counts    []uint64
	count     uint64
	sum       float64
	exemplars []exemplar // since the last flush
	updated   time.Time
	// start is the flush before its first value: a series that expired
	// and came back starts again from 0 with a new start time.
	start pcommon.Timestamp
}

// histograms are the per-request histograms, expired when idle; their
// models are bounded per host by the emitter (boundedValues).
type histograms struct {
	idleExpiry time.Duration
	series     [numHists]map[histKey]*histogram
}

func newHistograms(idleExpiry time.Duration) *histograms {
	h := &histograms{idleExpiry: idleExpiry}
	for i := range h.series {
		h.series[i] = map[histKey]*histogram{}
	}
	return h
}

// observe counts value v of histogram i for k; since is the last flush's
// time, a new series' start.
func (h *histograms) observe(i int, k histKey, v float64, ex exemplar, now time.Time, since pcommon.Timestamp) {
	s := h.series[i][k]
	if s == nil {
		s = &histogram{counts: make([]uint64, len(requestHistograms[i].bounds)+1), start: since}
		h.series[i][k] = s
	}
	b, _ := slices.BinarySearch(requestHistograms[i].bounds, v)
	s.counts[b]++
	s.count++
	s.sum += v
	ex.value = v
	s.exemplars = pushExemplar(s.exemplars, ex)
	s.updated = now
}

// expire forgets the series idle for idle_expiry.
func (h *histograms) expire(now time.Time) {
	for i := range h.series {
		for k, s := range h.series[i] {
			if now.Sub(s.updated) > h.idleExpiry {
				delete(h.series[i], k)
			}
		}
	}
}

// hosts returns the hosts with series.
func (h *histograms) hosts() []string {
	seen := map[string]bool{}
	for i := range h.series {
		for k := range h.series[i] {
			seen[k.host] = true
		}
	}
	out := make([]string, 0, len(seen))
	for host := range seen {
		out = append(out, host)
	}
	slices.Sort(out)
	return out
}

// dropExemplars forgets the exemplars of spans.
func (h *histograms) dropExemplars(spans map[pcommon.SpanID]bool) {
	for i := range h.series {
		for _, s := range h.series[i] {
			s.exemplars = withoutSpans(s.exemplars, spans)
		}
	}
}

// appendTo adds host's histograms to ms and clears their exemplars,
// returning how many exemplars went out.
func (h *histograms) appendTo(ms pmetric.MetricSlice, host string, ts pcommon.Timestamp) int64 {
	var n int64
	for i, def := range requestHistograms {
		var keys []histKey
		for k := range h.series[i] {
			if k.host == host {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			continue
		}
		slices.SortFunc(keys, func(a, b histKey) int {
			return cmp.Or(strings.Compare(a.model, b.model), strings.Compare(string(a.label), string(b.label)))
		})
		m := ms.AppendEmpty()
		m.SetName(def.name)
		m.SetDescription(def.description)
		m.SetUnit(def.unit)
		hist := m.SetEmptyHistogram()
		hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		for _, k := range keys {
			s := h.series[i][k]
			dp := hist.DataPoints().AppendEmpty()
			dp.SetStartTimestamp(s.start)
			dp.SetTimestamp(ts)
			dp.Attributes().PutStr(attrModel, k.model)
			dp.Attributes().PutStr(attrBottleneck, string(k.label))
			dp.ExplicitBounds().FromRaw(def.bounds)
			dp.BucketCounts().FromRaw(s.counts)
			dp.SetCount(s.count)
			dp.SetSum(s.sum)
			n += putExemplars(dp.Exemplars(), s.exemplars, s.start, ts)
			s.exemplars = s.exemplars[:0]
		}
	}
	return n
}
