package inferspans // import "github.com/gpuviz/gpuviz/internal/inferspans"

import (
	"fmt"
	"io"
	"iter"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// RunningMetric is, per engine family, the gauge its server exports of how
// many requests it is running (scheduled and not finished, preempted ones
// not counted), on /metrics (trtllm-serve: /prometheus/metrics); "" for a
// family whose server exports none here.
var RunningMetric = map[string]string{
	infersim.FamilyVLLM:   "vllm:num_requests_running",
	infersim.FamilySGLang: "sglang:num_running_reqs",
	infersim.FamilyTGI:    "tgi_batch_current_size",      // the router's running batch
	infersim.FamilyTRTLLM: "trtllm_num_requests_running", // trtllm-serve's active requests
}

// prometheusScope is the scope the collector's prometheus receiver puts
// scraped metrics under.
const prometheusScope = "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver"

// AppendRunning appends to md each engine's running-request gauge as a
// prometheus receiver scraping its server at t hands it on: one resource
// per server (service.name its job, service.instance.id its target, and
// what the deployment adds, as on its spans), the value node's engine
// counts at t. Engines whose family exports no such gauge are left out.
func AppendRunning(md pmetric.Metrics, node *infersim.Node, t int64, env Env) {
	for ei, e := range runningEngines(node) {
		name := RunningMetric[e.Family]
		rm := md.ResourceMetrics().AppendEmpty()
		resource(e, env, kv{"service.name", e.Name}, kv{"service.instance.id", fmt.Sprintf("%s:%d", env.Host, 8000+ei)}).
			MoveTo(rm.Resource().Attributes())
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(prometheusScope)
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.Timestamp(t))
		dp.SetDoubleValue(float64(node.Running(ei, t)))
		dp.Attributes().PutStr("model_name", e.LLM.Name)
		dp.Attributes().PutStr("engine", "0")
	}
}

// WriteRunning writes what the node's servers' /metrics would show at t of
// their running-request gauges, in Prometheus' text format, as one
// endpoint: each engine's series under its engine index and model. A
// prometheus receiver scraping it sees one server, so its counts are
// summed; that describes the node's GPUs only where one engine serves them
// all (the other scenarios' spans match each engine's own GPUs, and the
// processor leaves counts of a different set of GPUs unbooked).
func WriteRunning(w io.Writer, node *infersim.Node, t int64) error {
	typed := map[string]bool{}
	for ei, e := range runningEngines(node) {
		name := RunningMetric[e.Family]
		if !typed[name] {
			typed[name] = true
			if _, err := fmt.Fprintf(w, "# HELP %s Number of requests running.\n# TYPE %s gauge\n", name, name); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "%s{engine=\"%d\",model_name=%q} %d\n", name, ei, e.LLM.Name, node.Running(ei, t)); err != nil {
			return err
		}
	}
	return nil
}

// runningEngines yields, by index, the node's engines whose family exports
// a running-request gauge.
func runningEngines(node *infersim.Node) iter.Seq2[int, infersim.Engine] {
	return func(yield func(int, infersim.Engine) bool) {
		for ei, e := range node.Scenario().Engines {
			if RunningMetric[e.Family] != "" && !yield(ei, e) {
				return
			}
		}
	}
}
