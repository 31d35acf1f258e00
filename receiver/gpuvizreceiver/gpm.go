package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/internal/nvmlcalls"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// gpmMetrics are the GPM metrics the receiver asks for, in request order.
var gpmMetrics = &nvmlcalls.GPMMetrics

// gpmState holds a GPU's two GPM sample buffers: the previous scrape's
// sample is kept, so each scrape's metrics cover the whole interval since
// the last one.
type gpmState struct {
	prev, cur nvml.GpmSample
	prevAt    time.Time
	havePrev  bool
	// req is reused: the struct holds hundreds of metric slots.
	req nvml.GpmMetricsGetType
}

func gpmEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuSmActivity.Enabled || m.NvidiaGpuSmOccupancy.Enabled || m.NvidiaGpuTensorActivity.Enabled ||
		m.NvidiaGpuDramActivity.Enabled || m.NvidiaGpuPipeActivity.Enabled || m.NvidiaGpuPcieThroughput.Enabled ||
		m.NvidiaGpuNvlinkThroughput.Enabled
}

// newGPMState allocates the two sample buffers; nil when NVML cannot.
func newGPMState(lib nvml.Interface) *gpmState {
	prev, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return nil
	}
	cur, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		lib.GpmSampleFree(prev)
		return nil
	}
	return &gpmState{prev: prev, cur: cur}
}

func (st *gpmState) free(lib nvml.Interface) {
	lib.GpmSampleFree(st.prev)
	lib.GpmSampleFree(st.cur)
}

// measure takes a sample with take and, when the previous one is at least
// gpmMinInterval old, computes the metrics between the two. It returns the
// computed request, or nil when this call only opened an interval.
func (st *gpmState) measure(lib nvml.Interface, now time.Time, take func(nvml.GpmSample) nvml.Return) (*nvml.GpmMetricsGetType, nvml.Return) {
	if st.havePrev && now.Sub(st.prevAt) < gpmMinInterval {
		return nil, nvml.SUCCESS // too soon: the interval grows until next time
	}
	if ret := take(st.cur); ret != nvml.SUCCESS {
		st.havePrev = false
		return nil, ret
	}
	if !st.havePrev { // the first sample only opens an interval
		st.prev, st.cur, st.prevAt, st.havePrev = st.cur, st.prev, now, true
		return nil, nvml.SUCCESS
	}
	req := &st.req
	req.NumMetrics = uint32(len(gpmMetrics))
	req.Sample1, req.Sample2 = st.prev, st.cur
	for i, id := range gpmMetrics {
		req.Metrics[i] = nvml.GpmMetric{MetricId: uint32(id)}
	}
	ret := lib.GpmMetricsGet(req)
	st.prev, st.cur, st.prevAt = st.cur, st.prev, now
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return req, nvml.SUCCESS
}

// gpmUnlabelled are the GPM metrics no bottleneck label reads: recorded
// on flush ticks only.
var gpmUnlabelled = map[nvml.GpmMetricId]bool{
	nvml.GPM_METRIC_SM_OCCUPANCY: true,
	nvml.GPM_METRIC_FP16_UTIL:    true,
	nvml.GPM_METRIC_FP32_UTIL:    true,
	nvml.GPM_METRIC_FP64_UTIL:    true,
}

// recordGPM records one GPU-wide GPM interval ending at ts; all of it on a
// flush tick, else what the labels read; with runs, leaving out the inner
// points of runs of equal values.
func recordGPM(mb *metadata.MetricsBuilder, ts pcommon.Timestamp, g *gpu, v *gpmValues, flush bool, runs *[len(gpmMetrics)]seriesRun) {
	for i := range gpmMetrics {
		if !v.valid[i] || !flush && gpmUnlabelled[gpmMetrics[i]] {
			continue
		}
		if runs == nil || gpmUnlabelled[gpmMetrics[i]] {
			recordGPMPoint(mb, ts, g, i, v.v[i])
			continue
		}
		runs[i].take(ts, v.v[i], func(ts pcommon.Timestamp, x float64) { recordGPMPoint(mb, ts, g, i, x) })
	}
}

// recordGPMPoint records GPM metric gpmMetrics[i] as NVML reports it
// (percent, MiB/s).
func recordGPMPoint(mb *metadata.MetricsBuilder, ts pcommon.Timestamp, g *gpu, i int, value float64) {
	id, name := g.id, g.name
	ratio, mibps := value/100, value*(1<<20)
	switch gpmMetrics[i] {
	case nvml.GPM_METRIC_SM_UTIL:
		mb.RecordNvidiaGpuSmActivityDataPoint(ts, ratio, id, name)
	case nvml.GPM_METRIC_SM_OCCUPANCY:
		mb.RecordNvidiaGpuSmOccupancyDataPoint(ts, ratio, id, name)
	case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
		mb.RecordNvidiaGpuTensorActivityDataPoint(ts, ratio, id, name)
	case nvml.GPM_METRIC_DRAM_BW_UTIL:
		mb.RecordNvidiaGpuDramActivityDataPoint(ts, ratio, id, name)
	case nvml.GPM_METRIC_FP16_UTIL:
		mb.RecordNvidiaGpuPipeActivityDataPoint(ts, ratio, id, name, metadata.AttributeNvidiaGpuPipeFp16)
	case nvml.GPM_METRIC_FP32_UTIL:
		mb.RecordNvidiaGpuPipeActivityDataPoint(ts, ratio, id, name, metadata.AttributeNvidiaGpuPipeFp32)
	case nvml.GPM_METRIC_FP64_UTIL:
		mb.RecordNvidiaGpuPipeActivityDataPoint(ts, ratio, id, name, metadata.AttributeNvidiaGpuPipeFp64)
	case nvml.GPM_METRIC_PCIE_RX_PER_SEC:
		mb.RecordNvidiaGpuPcieThroughputDataPoint(ts, mibps, id, name, metadata.AttributeNetworkIoDirectionReceive)
	case nvml.GPM_METRIC_PCIE_TX_PER_SEC:
		mb.RecordNvidiaGpuPcieThroughputDataPoint(ts, mibps, id, name, metadata.AttributeNetworkIoDirectionTransmit)
	case nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
		mb.RecordNvidiaGpuNvlinkThroughputDataPoint(ts, mibps, id, name, metadata.AttributeNetworkIoDirectionReceive)
	case nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
		mb.RecordNvidiaGpuNvlinkThroughputDataPoint(ts, mibps, id, name, metadata.AttributeNetworkIoDirectionTransmit)
	}
}

// recordMIGGPM records one GPU instance's GPM interval on one of its
// compute instances.
func recordMIGGPM(mb *metadata.MetricsBuilder, ts pcommon.Timestamp, g *gpu, a *migActivity) {
	in := &a.inst
	for i := range gpmMetrics {
		if !a.gpm.valid[i] {
			continue
		}
		v := a.gpm.v[i] / 100
		switch gpmMetrics[i] {
		case nvml.GPM_METRIC_SM_UTIL:
			mb.RecordNvidiaGpuMigSmActivityDataPoint(ts, v, g.id, g.name, in.uuid, in.gi, in.ci, in.profile)
		case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
			mb.RecordNvidiaGpuMigTensorActivityDataPoint(ts, v, g.id, g.name, in.uuid, in.gi, in.ci, in.profile)
		case nvml.GPM_METRIC_DRAM_BW_UTIL:
			mb.RecordNvidiaGpuMigDramActivityDataPoint(ts, v, g.id, g.name, in.uuid, in.gi, in.ci, in.profile)
		}
	}
}
