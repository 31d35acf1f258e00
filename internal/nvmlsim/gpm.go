package nvmlsim

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// gpmSample is a GPM sample of a simulated GPU: the moment it describes.
// Metrics between two samples are the schedule's integrals between the two
// moments. An H200 with driver 580 described the GPU 58-115 ms before the
// sample was taken, the lag steady within a run (docs/hardware.md, "GPM
// readings lag"): each simulated GPU lags by its own, drawn from
// [gpmLagMin, gpmLagMax).
type gpmSample struct {
	dev *Device
	at  int64
}

var _ nvml.GpmSample = (*gpmSample)(nil)

const (
	gpmLagMin = 55 * time.Millisecond
	gpmLagMax = 120 * time.Millisecond
)

func (s *gpmSample) Free() nvml.Return { return nvml.SUCCESS }

func (s *gpmSample) Get(dev nvml.Device) nvml.Return {
	d, ok := simulated(dev)
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.model.HasGPM || len(d.migs) > 0 { // in MIG mode, GPM samples GPU instances
		return nvml.ERROR_NOT_SUPPORTED
	}
	s.dev, s.at = d, d.now().UnixNano()-d.gpmLag
	return nvml.SUCCESS
}

// MigGet samples GPU instance gi of a GPU in MIG mode. The instances run the
// GPU's workload, so their activity is the GPU's.
func (s *gpmSample) MigGet(dev nvml.Device, gi int) nvml.Return {
	d, ok := simulated(dev)
	if !ok || !d.hasGPUInstance(gi) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.model.HasGPM {
		return nvml.ERROR_NOT_SUPPORTED
	}
	s.dev, s.at = d, d.now().UnixNano()-d.gpmLag
	return nvml.SUCCESS
}

// simulated returns the simulated GPU behind a handle.
func simulated(dev nvml.Device) (*Device, bool) {
	switch d := dev.(type) {
	case *Device:
		return d, true
	case *faultDevice:
		return d.Device, true
	}
	return nil, false
}

// enterFaults applies a GPU's faults to a library call on its handle.
func enterFaults(dev nvml.Device, call string) nvml.Return {
	if h, ok := dev.(*faultDevice); ok {
		return h.enter(call)
	}
	return nvml.SUCCESS
}

// GpmMigSampleGet implements nvml.Interface.
func (s *Server) GpmMigSampleGet(dev nvml.Device, gi int, sample nvml.GpmSample) nvml.Return {
	if ret := enterFaults(dev, "nvmlGpmMigSampleGet"); ret != nvml.SUCCESS {
		return ret
	}
	return sample.MigGet(dev, gi)
}

// GpmQueryDeviceSupport implements nvml.Interface: Hopper and newer.
func (s *Server) GpmQueryDeviceSupport(dev nvml.Device) (nvml.GpmSupport, nvml.Return) {
	if ret := enterFaults(dev, "nvmlGpmQueryDeviceSupport"); ret != nvml.SUCCESS {
		return nvml.GpmSupport{}, ret
	}
	d, ok := simulated(dev)
	if !ok {
		return nvml.GpmSupport{}, nvml.ERROR_INVALID_ARGUMENT
	}
	var sup nvml.GpmSupport
	if d.model.HasGPM {
		sup.IsSupportedDevice = 1
	}
	return sup, nvml.SUCCESS
}

// GpmSampleAlloc implements nvml.Interface.
func (s *Server) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) { return &gpmSample{}, nvml.SUCCESS }

// GpmSampleFree implements nvml.Interface.
func (s *Server) GpmSampleFree(sample nvml.GpmSample) nvml.Return { return sample.Free() }

// GpmSampleGet implements nvml.Interface.
func (s *Server) GpmSampleGet(dev nvml.Device, sample nvml.GpmSample) nvml.Return {
	if ret := enterFaults(dev, "nvmlGpmSampleGet"); ret != nvml.SUCCESS {
		return ret
	}
	return sample.Get(dev)
}

// GpmMetricsGet implements nvml.Interface: percentages for activities,
// MiB/s for bandwidths, as NVML reports them.
func (s *Server) GpmMetricsGet(m *nvml.GpmMetricsGetType) nvml.Return {
	s1, ok1 := m.Sample1.(*gpmSample)
	s2, ok2 := m.Sample2.(*gpmSample)
	if !ok1 || !ok2 || s1.dev == nil || s1.dev != s2.dev || s2.at <= s1.at {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d := s1.dev
	if s.faults != nil {
		if ret := s.faults.gpus[d.Index].apply("nvmlGpmMetricsGet"); ret != nvml.SUCCESS {
			return ret
		}
	}
	d.mu.Lock()
	tot := d.work.Integrate(s1.at, s2.at)
	d.mu.Unlock()
	pct := func(x float64) float64 { return 100 * x / tot.Seconds }
	mibps := func(bytes float64) float64 { return bytes / tot.Seconds / (1 << 20) }
	for i := range m.NumMetrics {
		metric := &m.Metrics[i]
		metric.NvmlReturn = uint32(nvml.SUCCESS)
		switch nvml.GpmMetricId(metric.MetricId) {
		case nvml.GPM_METRIC_GRAPHICS_UTIL:
			metric.Value = pct(tot.BusySeconds)
		case nvml.GPM_METRIC_SM_UTIL:
			metric.Value = pct(tot.SMSeconds)
		case nvml.GPM_METRIC_SM_OCCUPANCY:
			metric.Value = pct(tot.SMSeconds * 0.45)
		case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
			metric.Value = pct(tot.TensorSeconds)
		case nvml.GPM_METRIC_DRAM_BW_UTIL:
			metric.Value = pct(tot.DRAMSeconds)
		case nvml.GPM_METRIC_FP16_UTIL:
			metric.Value = pct(tot.SMSeconds * 0.08)
		case nvml.GPM_METRIC_FP32_UTIL:
			metric.Value = pct(tot.SMSeconds * 0.15)
		case nvml.GPM_METRIC_FP64_UTIL:
			metric.Value = 0
		case nvml.GPM_METRIC_PCIE_RX_PER_SEC:
			metric.Value = mibps(tot.PCIeRxBytes)
		case nvml.GPM_METRIC_PCIE_TX_PER_SEC:
			metric.Value = mibps(tot.PCIeTxBytes)
		case nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
			metric.Value = mibps(tot.NVLinkBytes)
		default:
			metric.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		}
	}
	return nvml.SUCCESS
}

// eventSet is a simulated NVML event set. It embeds go-nvml's mock only to
// satisfy the interface; the calls the receiver makes are the Server's.
type eventSet struct{ mock.EventSet }

// EventSetCreate implements nvml.Interface.
func (s *Server) EventSetCreate() (nvml.EventSet, nvml.Return) { return &eventSet{}, nvml.SUCCESS }

// EventSetFree implements nvml.Interface.
func (s *Server) EventSetFree(nvml.EventSet) nvml.Return { return nvml.SUCCESS }

// EventSetWait implements nvml.Interface: healthy simulated GPUs raise no
// events, so every wait times out, after blocking as long as NVML would;
// an Xid storm (a fault) raises its Xids on the GPU's valid handle.
func (s *Server) EventSetWait(_ nvml.EventSet, timeoutMs uint32) (nvml.EventData, nvml.Return) {
	wait := time.Duration(timeoutMs) * time.Millisecond
	if s.faults == nil || !s.faults.hasStorms() {
		time.Sleep(wait)
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	const poll = 5 * time.Millisecond
	for deadline := time.Now().Add(wait); ; {
		if gpu, code, ok := s.faults.takeXid(); ok {
			return nvml.EventData{Device: s.handle(gpu), EventType: nvml.EventTypeXidCriticalError, EventData: code}, nvml.SUCCESS
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		time.Sleep(min(left, poll))
	}
}
