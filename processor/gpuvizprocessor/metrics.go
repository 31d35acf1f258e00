package gpuvizprocessor // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor"

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/analysis"
	"github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"
)

// gaugeSignals maps GPU metrics, by their standard names, to the timeline
// signal they feed. The receiver's sub-second samples feed the same signals
// as its scrape-time readings: both are averages over the period before
// their timestamp.
var gaugeSignals = map[string]timeline.Signal{
	"hw.gpu.utilization":                               timeline.Utilization, // hw.gpu.task=general only
	"nvidia.gpu.samples.utilization":                   timeline.Utilization,
	"nvidia.gpu.memory_controller.utilization":         timeline.MemoryController,
	"nvidia.gpu.samples.memory_controller.utilization": timeline.MemoryController,
	"nvidia.gpu.sm.activity":                           timeline.SMActivity,
	"nvidia.gpu.tensor.activity":                       timeline.TensorActivity,
	"nvidia.gpu.dram.activity":                         timeline.DRAMActivity,
	"hw.power":                                         timeline.Power,
	"nvidia.gpu.samples.power":                         timeline.Power,
	"hw.gpu.memory.usage":                              timeline.MemoryUsed,
	"hw.gpu.memory.limit":                              timeline.MemoryLimit,
}

// pcieLaneBytesPerSecond is one PCIe lane's usable bandwidth per direction,
// by generation (after line encoding): what a link's capacity is made of.
var pcieLaneBytesPerSecond = [...]float64{0, 250e6, 500e6, 985e6, 1969e6, 3938e6, 7563e6}

// processMetrics is the metrics side: it learns the timeline from the GPU
// metrics passing through (which it never changes) and, every
// metrics.interval, appends the derived metrics.
func (c *core) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	c.observe(ctx, md)
	if c.cfg.Metrics.Enabled {
		c.derived.appendTo(ctx, md, c.now())
	}
	return md, nil
}

// pointReader walks one batch of metrics into the timeline.
type pointReader struct {
	c        *core
	learned  int64
	refused  map[string]int64
	throttle map[throttleKey]*throttleState
	// throttleTimes are the batch's cumulative throttle times, turned into
	// measured throttled shares once the whole batch is read.
	throttleTimes []throttleTime
}

// throttleTime is one point of nvidia.gpu.throttle.time.
type throttleTime struct {
	key    timeline.Key
	ts     time.Time
	reason throttleGroup
	slot   int // the reason's index within its group
	total  float64
}

type throttleKey struct {
	key timeline.Key
	ts  pcommon.Timestamp
}

type throttleState struct{ power, thermal bool }

func (c *core) observe(ctx context.Context, md pmetric.Metrics) {
	r := pointReader{c: c}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		rm := rms.At(i)
		host := stringAttr(rm.Resource().Attributes(), "host.name")
		sms := rm.ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				r.metric(ms.At(k), host)
			}
		}
	}
	r.throttleShares()
	for tk, st := range r.throttle {
		if r.c.derived.throttleMeasured(tk.key) {
			continue // measured shares beat the flags of the moment
		}
		ts := tk.ts.AsTime()
		r.add(tk.key, timeline.PowerThrottled, ts, boolFloat(st.power))
		r.add(tk.key, timeline.ThermalThrottled, ts, boolFloat(st.thermal))
	}
	if r.learned > 0 {
		c.tel.ProcessorGpuvizGpuPoints.Add(ctx, r.learned)
	}
	for reason, n := range r.refused {
		c.tel.ProcessorGpuvizGpuPointsRefused.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
	}
}

func (r *pointReader) refuse(reason string) {
	if r.refused == nil {
		r.refused = map[string]int64{}
	}
	r.refused[reason]++
}

func (r *pointReader) add(k timeline.Key, sig timeline.Signal, ts time.Time, v float64) {
	if r.c.store.Add(k, sig, ts, v) {
		r.learned++
		r.c.derived.observe(k, sig, ts, v)
		return
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		r.refuse("bad_value")
	} else {
		r.refuse("gpu_limit")
	}
}

func (r *pointReader) metric(m pmetric.Metric, host string) {
	name := m.Name()
	sig, isGauge := gaugeSignals[name]
	switch {
	case isGauge, name == "hw.energy", name == "hw.gpu.io", name == "nvidia.gpu.pcie.throughput",
		name == "nvidia.gpu.nvlink.throughput", name == "nvidia.gpu.pcie.link.generation",
		name == "nvidia.gpu.pcie.link.width", name == "nvidia.gpu.throttle.active", name == "nvidia.gpu.info",
		name == "nvidia.gpu.process.memory.usage", name == "nvidia.gpu.throttle.time":
	default:
		return // not a GPU metric the timeline uses
	}
	var dps pmetric.NumberDataPointSlice
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		dps = m.Gauge().DataPoints()
	case pmetric.MetricTypeSum:
		dps = m.Sum().DataPoints()
	default:
		r.refuse("bad_type")
		return
	}
	for i := range dps.Len() {
		dp := dps.At(i)
		attrs := dp.Attributes()
		id := stringAttr(attrs, "hw.id")
		if id == "" {
			r.refuse("no_hw_id")
			continue
		}
		h := host
		if h == "" {
			h = stringAttr(attrs, "host.name")
		}
		k := timeline.Key{Host: h, GPU: id}
		ts := dp.Timestamp().AsTime()
		v := numberValue(dp)
		switch name {
		case "hw.gpu.utilization":
			if task := stringAttr(attrs, "hw.gpu.task"); task == "general" || task == "" {
				r.add(k, sig, ts, v)
			}
		case "hw.energy":
			if r.c.store.AddEnergy(k, ts, v) {
				r.learned++
			} else {
				r.refuse("gpu_limit")
			}
		case "hw.gpu.io":
			r.ioCounter(k, stringAttr(attrs, "network.io.direction"), ts, v)
		case "nvidia.gpu.pcie.throughput":
			r.add(k, directional(stringAttr(attrs, "network.io.direction"), timeline.PCIeRx, timeline.PCIeTx), ts, v)
		case "nvidia.gpu.nvlink.throughput":
			r.add(k, directional(stringAttr(attrs, "network.io.direction"), timeline.NVLinkRx, timeline.NVLinkTx), ts, v)
		case "nvidia.gpu.pcie.link.generation", "nvidia.gpu.pcie.link.width":
			if stringAttr(attrs, "nvidia.gpu.pcie.link.kind") == "current" {
				r.link(k, name, ts, v)
			}
		case "nvidia.gpu.throttle.active":
			r.throttleReason(k, dp.Timestamp(), stringAttr(attrs, "nvidia.gpu.throttle.reason"), v != 0)
		case "nvidia.gpu.throttle.time":
			if group, slot, ok := throttleReasonGroup(stringAttr(attrs, "nvidia.gpu.throttle.reason")); ok {
				r.throttleTimes = append(r.throttleTimes, throttleTime{key: k, ts: ts, reason: group, slot: slot, total: v})
			}
		case "nvidia.gpu.info":
			if idx, ok := attrs.Get("nvidia.gpu.index"); ok && idx.Type() == pcommon.ValueTypeInt {
				r.c.store.SetIndex(k, int(idx.Int()))
			}
		case "nvidia.gpu.process.memory.usage":
			if pid, ok := attrs.Get("process.pid"); ok && pid.Type() == pcommon.ValueTypeInt {
				r.c.store.SetProcess(k, pid.Int(), ts)
			}
		default:
			r.add(k, sig, ts, v)
		}
	}
}

func directional(dir string, rx, tx timeline.Signal) timeline.Signal {
	if dir == "transmit" {
		return tx
	}
	return rx
}

// ioCounter turns the cumulative hw.gpu.io counter into a PCIe rate.
func (r *pointReader) ioCounter(k timeline.Key, dir string, ts time.Time, total float64) {
	rate, ok := r.c.derived.counterRate(k, dir, ts, total)
	if ok {
		r.add(k, directional(dir, timeline.PCIeRx, timeline.PCIeTx), ts, rate)
	}
}

// link turns the current PCIe generation and width into the link's
// capacity per direction.
func (r *pointReader) link(k timeline.Key, name string, ts time.Time, v float64) {
	if capacity, ok := r.c.derived.linkCapacity(k, name, v); ok {
		r.add(k, timeline.PCIeCapacity, ts, capacity)
	}
}

func (r *pointReader) throttleReason(k timeline.Key, ts pcommon.Timestamp, reason string, active bool) {
	if r.throttle == nil {
		r.throttle = map[throttleKey]*throttleState{}
	}
	tk := throttleKey{k, ts}
	st := r.throttle[tk]
	if st == nil {
		st = &throttleState{}
		r.throttle[tk] = st
	}
	switch reason {
	case "sw_power_cap", "hw_power_brake", "hw_slowdown":
		st.power = st.power || active
	case "sw_thermal_slowdown", "hw_thermal_slowdown":
		st.thermal = st.thermal || active
	}
}

// throttleGroup is what a throttle reason says of a throttled interval.
type throttleGroup int

const (
	throttlePower throttleGroup = iota
	throttleThermal
	numThrottleGroups
)

// throttleSlots is the most reasons of one group NVML times.
const throttleSlots = 2

// throttleReasonGroup places a reason NVML times: sw_power_cap and
// hw_power_brake are power, the thermal slowdowns thermal; sync_boost is
// neither.
func throttleReasonGroup(reason string) (throttleGroup, int, bool) {
	switch reason {
	case "sw_power_cap":
		return throttlePower, 0, true
	case "hw_power_brake":
		return throttlePower, 1, true
	case "sw_thermal_slowdown":
		return throttleThermal, 0, true
	case "hw_thermal_slowdown":
		return throttleThermal, 1, true
	}
	return 0, 0, false
}

// throttleShares turns the batch's cumulative throttle times, in time
// order per GPU, into the share of each interval the clocks were held.
func (r *pointReader) throttleShares() {
	slices.SortFunc(r.throttleTimes, func(a, b throttleTime) int {
		return cmp.Or(cmp.Compare(a.key.Host, b.key.Host), cmp.Compare(a.key.GPU, b.key.GPU), a.ts.Compare(b.ts))
	})
	// The reasons of one reading carry timestamps µs apart: a run of points
	// of one GPU within minThrottleInterval is one reading, measured once.
	for i := 0; i < len(r.throttleTimes); {
		first := r.throttleTimes[i]
		var groups [numThrottleGroups]bool
		j := i
		for ; j < len(r.throttleTimes); j++ {
			p := r.throttleTimes[j]
			if p.key != first.key || p.ts.Sub(first.ts) >= minThrottleInterval {
				break
			}
			r.c.derived.setThrottleTotal(p)
			groups[p.reason] = true
		}
		at := r.throttleTimes[j-1].ts
		for group, seen := range groups {
			if !seen {
				continue
			}
			if share, ok := r.c.derived.throttleShare(first.key, throttleGroup(group), at); ok {
				sig := timeline.PowerThrottled
				if throttleGroup(group) == throttleThermal {
					sig = timeline.ThermalThrottled
				}
				r.add(first.key, sig, at, share)
			}
		}
		i = j
	}
}

func stringAttr(m pcommon.Map, key string) string {
	if v, ok := m.Get(key); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

func numberValue(dp pmetric.NumberDataPoint) float64 {
	if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
		return float64(dp.IntValue())
	}
	return dp.DoubleValue()
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// analysisSignal maps timeline signals to the streaming analysis' inputs.
func analysisSignal(sig timeline.Signal) (analysis.Signal, bool) {
	switch sig {
	case timeline.Utilization:
		return analysis.Utilization, true
	case timeline.PCIeRx:
		return analysis.PCIe, true
	}
	return 0, false
}
