package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/attribution"
)

// runningMetrics are the gauges inference servers export of how many
// requests they are running, as the prometheus receiver names them (and
// with the colon a Prometheus translation turns into an underscore): vLLM's,
// SGLang's, TGI's router's batch (the requests it is running), TensorRT-LLM's
// own server's active requests (trtllm-serve), and Triton's TensorRT-LLM
// backend's requests scheduled in the running batch.
var runningMetrics = map[string]runningGauge{
	"vllm:num_requests_running": {}, "vllm_num_requests_running": {},
	"sglang:num_running_reqs": {}, "sglang_num_running_reqs": {},
	"tgi_batch_current_size":      {},
	"trtllm_num_requests_running": {},
	"nv_trt_llm_request_metrics":  {attr: "request_type", value: "scheduled"},
}

// runningGauge says which of a gauge's data points count running
// requests: those whose attribute attr is value; all where attr is "".
type runningGauge struct{ attr, value string }

func (g runningGauge) counts(dp pmetric.NumberDataPoint) bool {
	if g.attr == "" {
		return true
	}
	v, ok := dp.Attributes().Get(g.attr)
	return ok && v.Str() == g.value
}

// engineCount is one server's count of its running requests at one
// scrape: its data points at that instant summed (vLLM's data-parallel
// engines, one per engine label).
type engineCount struct {
	resource pcommon.Resource // valid while the batch is being consumed
	source   string           // the server: service.name and service.instance.id
	ts       int64
	n        float64
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
					if dp.Flags().NoRecordedValue() || !(v >= 0) || !gauge.counts(dp) {
						continue
					}
					ts := int64(dp.Timestamp())
					found := false
					for c := first; c < len(dst); c++ {
						if dst[c].ts == ts {
							dst[c].n += v
							found = true
							break
						}
					}
					if !found {
						res := rm.Resource().Attributes()
						dst = append(dst, engineCount{resource: rm.Resource(), source: stringAttr(res, "service.name") + "\x00" + stringAttr(res, "service.instance.id"), ts: ts, n: v})
					}
				}
			}
		}
	}
	return dst
}

// engineSources are the servers whose counts matched one GPU set: each
// one's newest count, so that the set's count at any scrape is their sum.
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
)

// running records a server's count for the GPU set it matched and hands
// the set's sum to the set's group of books, where the set is one whole
// group: the books then know how many requests ran that they have not
// seen (attribution.Group.Running). Servers silent for longer than
// attribution.EngineGap are no longer counted. It returns what became of
// the count.
func (p *pipeline) running(set *gpuSet, source string, ts int64, n float64) string {
	srcs := p.engines[set.name]
	if srcs == nil {
		srcs = engineSources{}
		p.engines[set.name] = srcs
	}
	if e, ok := srcs[source]; ok && ts < e.ts || !ok && len(srcs) >= maxEngineSources {
		return countDropped
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
	gpus := make([]*attribution.GPU, len(set.keys))
	for i, k := range set.keys {
		if gpus[i] = p.books[k]; gpus[i] == nil {
			return countNoBooks
		}
	}
	switch grp := p.ledger.GroupOf(gpus); {
	case grp == nil:
		return countNoBooks
	case !grp.Running(ts, sum):
		return countDropped
	}
	return countBooked
}
