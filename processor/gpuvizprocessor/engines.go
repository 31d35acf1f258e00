package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"math"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
)

// runningMetrics are the gauges inference servers export of how many
// requests they are running, as the prometheus receiver names them (and
// with the colon a Prometheus translation turns into an underscore): vLLM's,
// SGLang's, TGI's router's batch (the requests it is running), TensorRT-LLM's
// own server's active requests (trtllm-serve), and Triton's TensorRT-LLM
// backend's requests scheduled in the running batch. SGLang with priority
// scheduling also sets its gauge per priority (priority="<int>") beside the
// total (priority="", which Prometheus drops): the breakdown is not counted.
var runningMetrics = map[string]runningGauge{
	"vllm:num_requests_running": {}, "vllm_num_requests_running": {},
	"sglang:num_running_reqs": {breakdown: "priority"}, "sglang_num_running_reqs": {breakdown: "priority"},
	"tgi_batch_current_size":      {},
	"trtllm_num_requests_running": {},
	"nv_trt_llm_request_metrics":  {attr: "request_type", value: "scheduled"},
}

// runningGauge says which of a gauge's data points count running
// requests: those whose attribute attr is value (all where attr is ""),
// less those whose attribute breakdown is set (a breakdown of a total
// the gauge also carries).
type runningGauge struct{ attr, value, breakdown string }

func (g runningGauge) counts(dp pmetric.NumberDataPoint) bool {
	if g.breakdown != "" {
		if v, ok := dp.Attributes().Get(g.breakdown); ok && v.AsString() != "" {
			return false
		}
	}
	if g.attr == "" {
		return true
	}
	v, ok := dp.Attributes().Get(g.attr)
	return ok && v.Str() == g.value
}

// engineCount is one server's count of its running requests at one
// scrape: its data points at that instant summed (vLLM's data-parallel
// engines, one per engine label). Stale where every one of its points
// then was a staleness marker (the prometheus receiver's NoRecordedValue:
// the server went away, or its scrape failed).
type engineCount struct {
	resource pcommon.Resource // valid while the batch is being consumed
	source   string           // the server: service.name and service.instance.id
	ts       int64
	n        float64
	stale    bool
}

// engineCounts returns the running-request counts in md; what else md
// holds is not read.
func engineCounts(md pmetric.Metrics, dst []engineCount) []engineCount {
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		rm := rms.At(i)
		first := len(dst)
		sms := rm.ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				gauge, ok := runningMetrics[m.Name()]
				if !ok || m.Type() != pmetric.MetricTypeGauge {
					continue
				}
				dps := m.Gauge().DataPoints()
				for d := range dps.Len() {
					dp := dps.At(d)
					v := numberValue(dp)
					stale := dp.Flags().NoRecordedValue()
					if !stale && (!(v >= 0) || math.IsInf(v, 1)) || !gauge.counts(dp) {
						continue
					}
					if stale {
						v = 0
					}
					ts := int64(dp.Timestamp())
					found := false
					for c := first; c < len(dst); c++ {
						if dst[c].ts == ts {
							dst[c].n += v
							dst[c].stale = dst[c].stale && stale
							found = true
							break
						}
					}
					if !found {
						res := rm.Resource().Attributes()
						dst = append(dst, engineCount{resource: rm.Resource(), source: stringAttr(res, "service.name") + "\x00" + stringAttr(res, "service.instance.id"), ts: ts, n: v, stale: stale})
					}
				}
			}
		}
	}
	return dst
}

// engineTally keeps, per GPU set's name, the servers whose running-request
// counts matched it: each one's newest count, so that the set's count at
// any scrape is their sum.
type engineTally map[string]engineSources

type engineSources map[string]engineSource

type engineSource struct {
	ts int64
	n  float64
}

// maxEngineSources bounds the servers one GPU set sums (a host's engines
// matched by host); counts from more are not used.
const maxEngineSources = 64

// What became of a server's count (processor_gpuviz_engine_counts).
const (
	countBooked    = "booked"
	countUnmatched = "unmatched"
	countNoBooks   = "no_books"
	countDropped   = "dropped"
	countFuture    = "future" // stamped past the processor's clock plus a minute (matchEngines)
)

// count records a server's count for the GPU set named set and returns
// the set's sum; servers silent for longer than attribution.EngineGap are
// no longer counted. False when the count is dropped: older than the
// server's last, or from a server past maxEngineSources.
func (t engineTally) count(set, source string, ts int64, n float64) (float64, bool) {
	srcs := t[set]
	if srcs == nil {
		srcs = engineSources{}
		t[set] = srcs
	}
	if e, ok := srcs[source]; ok && ts < e.ts || !ok && len(srcs) >= maxEngineSources {
		return 0, false
	}
	srcs[source] = engineSource{ts: ts, n: n}
	var sum float64
	for s, e := range srcs {
		if ts-e.ts > attribution.EngineGap {
			delete(srcs, s)
			continue
		}
		sum += e.n
	}
	return sum, true
}

// stale drops the server source from the GPU set named set, as of ts:
// it went stale then, and the set's sum no longer holds its last count.
func (t engineTally) stale(set, source string, ts int64) {
	srcs := t[set]
	if e, ok := srcs[source]; !ok || ts < e.ts {
		return
	}
	delete(srcs, source)
	if len(srcs) == 0 {
		delete(t, set)
	}
}

// forget drops the sets whose servers have all gone silent for
// attribution.EngineGap against the newest count.
func (t engineTally) forget() {
	var newest int64
	for _, srcs := range t {
		for _, e := range srcs {
			newest = max(newest, e.ts)
		}
	}
	for name, srcs := range t {
		keep := false
		for _, e := range srcs {
			keep = keep || newest-e.ts <= attribution.EngineGap
		}
		if !keep {
			delete(t, name)
		}
	}
}
