package gpucheck

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// Point is one data point of a number metric (gauge or sum), flattened: the
// analysis needs the metric, the data point's attributes, the time and the
// value, nothing else.
type Point struct {
	Metric       string            `json:"metric"`
	Attrs        map[string]string `json:"attributes"`
	TimeUnixNano int64             `json:"time_unix_nano"`
	Value        float64           `json:"value"`
}

// Phase is one phase of the workload, as the workload reports it when the
// phase ends. Start and End are Unix times in nanoseconds, the clock the
// collector stamps its data points with.
type Phase struct {
	Name  string `json:"phase"`
	Start int64  `json:"start_unix_nano"`
	End   int64  `json:"end_unix_nano"`
}

// Workload is what the workload printed: the UUID of the GPU it ran on (empty
// when PyTorch could not tell) and its phases in the order they ran.
type Workload struct {
	GPUUUID string  `json:"gpu_uuid,omitempty"`
	Phases  []Phase `json:"phases"`
}

// AddLine folds one line of the workload's standard output into w: either
// {"gpu_uuid": "GPU-..."} or {"phase": ..., "start_unix_nano": ...,
// "end_unix_nano": ...}. Blank lines are ignored; anything else is an error,
// which the caller may report and go on (libraries sometimes print to stdout).
func (w *Workload) AddLine(line string) error {
	line = strings.TrimSpace(line)
	if line == "" {
		return nil
	}
	var msg struct {
		GPUUUID *string `json:"gpu_uuid"`
		Phase
	}
	if err := json.Unmarshal([]byte(line), &msg); err != nil {
		return fmt.Errorf("workload printed a line that is not JSON: %q", line)
	}
	switch {
	case msg.GPUUUID != nil:
		w.GPUUUID = *msg.GPUUUID
	case msg.Name != "":
		if msg.Start <= 0 || msg.End <= msg.Start {
			return fmt.Errorf("workload phase %q has no valid start_unix_nano/end_unix_nano: %q", msg.Name, line)
		}
		w.Phases = append(w.Phases, msg.Phase)
	default:
		return fmt.Errorf("workload printed JSON with neither gpu_uuid nor phase: %q", line)
	}
	return nil
}

// FromMetrics flattens the gauges and sums of md, int and double alike, into
// points carrying their data point attributes. Resource and scope attributes
// are left out: the receiver puts what identifies a GPU (hw.id) on every data
// point. Histograms and summaries are skipped: gpuviz emits none.
func FromMetrics(md pmetric.Metrics) []Point {
	var points []Point
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		sms := rms.At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				var dps pmetric.NumberDataPointSlice
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					dps = m.Gauge().DataPoints()
				case pmetric.MetricTypeSum:
					dps = m.Sum().DataPoints()
				default:
					continue
				}
				for l := 0; l < dps.Len(); l++ {
					dp := dps.At(l)
					var v float64
					switch dp.ValueType() {
					case pmetric.NumberDataPointValueTypeInt:
						v = float64(dp.IntValue())
					case pmetric.NumberDataPointValueTypeDouble:
						v = dp.DoubleValue()
					default:
						continue
					}
					attrs := make(map[string]string, dp.Attributes().Len())
					for key, val := range dp.Attributes().All() {
						attrs[key] = val.AsString()
					}
					points = append(points, Point{
						Metric:       m.Name(),
						Attrs:        attrs,
						TimeUnixNano: int64(dp.Timestamp()),
						Value:        v,
					})
				}
			}
		}
	}
	return points
}

// Capture accumulates the points and spans of every export the collector
// sends. The HTTP server calls Add and AddTraces from its own goroutines
// while the check reads Points and Spans, hence the mutex.
type Capture struct {
	mu     sync.Mutex
	points []Point
	spans  []Span
}

// Add appends the points of md.
func (c *Capture) Add(md pmetric.Metrics) {
	points := FromMetrics(md)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.points = append(c.points, points...)
}

// Points returns a copy of everything captured so far.
func (c *Capture) Points() []Point {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Point(nil), c.points...)
}
