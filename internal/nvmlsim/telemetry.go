package nvmlsim

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GetCurrentClocksEventReasons implements nvml.Device: idle between
// requests, held by the software power cap or thermal slowdown.
func (d *Device) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seg := d.work.At(d.now().UnixNano())
	var reasons uint64
	if seg.Phase == PhaseIdle {
		reasons |= nvml.ClocksEventReasonGpuIdle
	}
	if seg.PowerCapped {
		reasons |= nvml.ClocksEventReasonSwPowerCap
	}
	if seg.ThermalSlowdown {
		reasons |= nvml.ClocksEventReasonSwThermalSlowdown
	}
	return reasons, nvml.SUCCESS
}

// GetFieldValues implements nvml.Device for the fields the simulation
// models; every other field answers NOT_SUPPORTED, entry by entry, as NVML
// does. A healthy simulated GPU has no errors, and like every Ampere and
// newer GPU it remaps rows instead of retiring pages. Each value is stamped
// with the read's wall-clock time (µs), as NVML stamps them: after the
// clock steps back the stamps step back with it, though the counters hold.
func (d *Device) GetFieldValues(values []nvml.FieldValue) nvml.Return {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now().UnixNano()
	d.accumulateTo(now)
	ts := now / 1000
	var joules, watts float64
	refreshed := false
	for i := range values {
		v := &values[i]
		v.Timestamp = ts
		v.NvmlReturn = uint32(nvml.SUCCESS)
		v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
		var x uint64
		if !refreshed && (v.FieldId == nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION || v.FieldId == nvml.FI_DEV_POWER_INSTANT) {
			joules, watts = d.refreshed() // once, and only when asked for
			refreshed = true
		}
		switch v.FieldId {
		case nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION:
			x = uint64(joules * 1000) // mJ
		case nvml.FI_DEV_POWER_INSTANT:
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
			x = uint64(watts * 1000) // mW
		case nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP:
			x = uint64(d.acc.CappedSeconds * 1e9)
		case nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN:
			x = uint64(d.acc.ThermalSeconds * 1e9)
		case nvml.FI_DEV_PCIE_COUNT_RX_BYTES:
			x = uint64(d.acc.PCIeRxBytes)
		case nvml.FI_DEV_PCIE_COUNT_TX_BYTES:
			x = uint64(d.acc.PCIeTxBytes)
		case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
			// NVML counts KiB, of the link ScopeId names or of all of them
			// (math.MaxUint32); the traffic spreads evenly over the links.
			switch {
			case v.ScopeId == math.MaxUint32:
				x = uint64(d.acc.NVLinkBytes / 1024)
			case v.ScopeId < d.model.NVLinks:
				x = uint64(d.acc.NVLinkBytes / 1024 / float64(d.model.NVLinks))
			default:
				v.NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT) // no such link
			}
		case nvml.FI_DEV_NVLINK_LINK_COUNT:
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
			x = uint64(d.model.NVLinks)
		case nvml.FI_DEV_NVLINK_SPEED_MBPS_COMMON: // per link and direction; every link is up
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
			x = uint64(d.model.NVLinkSpeedMBps)
		case nvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
			nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
			nvml.FI_DEV_ECC_SBE_VOL_TOTAL, nvml.FI_DEV_ECC_DBE_VOL_TOTAL, nvml.FI_DEV_PCIE_REPLAY_COUNTER,
			nvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
			nvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, nvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
			nvml.FI_DEV_REMAPPED_COR, nvml.FI_DEV_REMAPPED_UNC, nvml.FI_DEV_REMAPPED_PENDING, nvml.FI_DEV_REMAPPED_FAILURE:
		default:
			v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		}
		binary.LittleEndian.PutUint64(v.Value[:], x)
	}
	return nvml.SUCCESS
}

// GetPcieThroughput implements nvml.Device: KB/s over the last 20 ms.
func (d *Device) GetPcieThroughput(counter nvml.PcieUtilCounter) (uint32, nvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tot, _ := d.window(int64(20 * time.Millisecond))
	switch counter {
	case nvml.PCIE_UTIL_RX_BYTES:
		return uint32(tot.PCIeRxBytes / tot.Seconds / 1000), nvml.SUCCESS
	case nvml.PCIE_UTIL_TX_BYTES:
		return uint32(tot.PCIeTxBytes / tot.Seconds / 1000), nvml.SUCCESS
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

// GetCurrPcieLinkGeneration implements nvml.Device.
func (d *Device) GetCurrPcieLinkGeneration() (int, nvml.Return) { return d.model.PCIeGen, nvml.SUCCESS }

// GetMaxPcieLinkGeneration implements nvml.Device.
func (d *Device) GetMaxPcieLinkGeneration() (int, nvml.Return) { return d.model.PCIeGen, nvml.SUCCESS }

// GetCurrPcieLinkWidth implements nvml.Device.
func (d *Device) GetCurrPcieLinkWidth() (int, nvml.Return) { return 16, nvml.SUCCESS }

// GetMaxPcieLinkWidth implements nvml.Device.
func (d *Device) GetMaxPcieLinkWidth() (int, nvml.Return) { return 16, nvml.SUCCESS }

// samplePeriod is how often the simulated driver fills its sample buffers
// (about 1/6 s, a whole number of µs so that NVML's µs timestamps map back
// to sample times exactly), powerSamplePeriod its power buffer (every 20 ms:
// an H200 with driver 580 kept a sample every 19.98 ms at the median,
// docs/hardware.md), and sampleBuffer how much history each holds (NVML
// keeps a bounded ring).
const (
	samplePeriod      = int64(166_667 * time.Microsecond)
	powerSamplePeriod = int64(20 * time.Millisecond)
	sampleBuffer      = 120
)

// GetSamples implements nvml.Device: the samples taken after lastSeen (µs),
// oldest first, at most the buffer's worth, none from before a reset (the
// GPU was not there to sample); NOT_FOUND when there are none.
func (d *Device) GetSamples(kind nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	switch kind {
	case nvml.GPU_UTILIZATION_SAMPLES, nvml.MEMORY_UTILIZATION_SAMPLES:
		if len(d.migs) > 0 { // as in NVML: no utilisation samples in MIG mode
			return 0, nil, nvml.ERROR_NOT_SUPPORTED
		}
	case nvml.TOTAL_POWER_SAMPLES, nvml.PROCESSOR_CLK_SAMPLES:
	default:
		return 0, nil, nvml.ERROR_NOT_SUPPORTED
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now().UnixNano()
	period := samplePeriod
	if kind == nvml.TOTAL_POWER_SAMPLES {
		period = powerSamplePeriod
	}
	last := now - now%period
	first := max(last-(sampleBuffer-1)*period, (int64(lastSeen)*1000/period+1)*period, (d.restartAt/period+1)*period)
	if first > last {
		return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_FOUND
	}
	out := make([]nvml.Sample, 0, (last-first)/period+1)
	for t := first; t <= last; t += period {
		tot := d.work.Integrate(t-period, t)
		var v uint32
		switch kind {
		case nvml.GPU_UTILIZATION_SAMPLES:
			v = uint32(100*tot.BusySeconds/tot.Seconds + 0.5)
		case nvml.MEMORY_UTILIZATION_SAMPLES:
			v = uint32(100*tot.MemSeconds/tot.Seconds + 0.5)
		case nvml.TOTAL_POWER_SAMPLES:
			v = uint32(1000 * tot.Joules / tot.Seconds)
		case nvml.PROCESSOR_CLK_SAMPLES:
			v = d.smClock(d.work.At(t))
		}
		s := nvml.Sample{TimeStamp: uint64(t / 1000)}
		binary.LittleEndian.PutUint32(s.SampleValue[:], v)
		out = append(out, s)
	}
	return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
}

// simulatedPID is the process ID of the inference server's worker on GPU
// index: one tensor-parallel worker per GPU, as vLLM runs them.
func simulatedPID(index int) uint32 { return 4100 + uint32(index) }

// simulatedMIGPID is the process ID of the worker on GPU instance gi of
// simulated GPU index in MIG mode: the first instance's is the GPU's
// worker's (simulatedPID), the others' follow every GPU's.
func simulatedMIGPID(index, gi int) uint32 { return simulatedPID(index) + uint32((gi-1)*MaxGPUs) }

// GetComputeRunningProcesses implements nvml.Device. Outside MIG mode the
// GPU runs one worker, and NVML gives it no GPU or compute instance
// (math.MaxUint32). In MIG mode each instance runs a worker holding the
// instance's memory, and NVML, asked on the GPU's handle, names each
// process's GPU and compute instance.
func (d *Device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	used := d.memoryUsed()
	if len(d.migs) == 0 {
		return []nvml.ProcessInfo{{
			Pid: simulatedPID(d.Index), UsedGpuMemory: used,
			GpuInstanceId: math.MaxUint32, ComputeInstanceId: math.MaxUint32,
		}}, nvml.SUCCESS
	}
	procs := make([]nvml.ProcessInfo, 0, len(d.migs))
	for _, m := range d.migs {
		procs = append(procs, nvml.ProcessInfo{
			Pid: simulatedMIGPID(d.Index, m.gi), UsedGpuMemory: m.used(used),
			GpuInstanceId: uint32(m.gi), ComputeInstanceId: uint32(m.ci()),
		})
	}
	return procs, nvml.SUCCESS
}

// GetProcessUtilization implements nvml.Device: the worker's SM and memory
// controller share over the last second, if that sample is newer than
// lastSeen (µs).
func (d *Device) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if len(d.migs) > 0 {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	tot, t := d.window(sampleWindow)
	ts := uint64(t / 1000)
	if ts <= lastSeen {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return []nvml.ProcessUtilizationSample{{
		Pid: simulatedPID(d.Index), TimeStamp: ts,
		SmUtil:  uint32(100*tot.SMSeconds/tot.Seconds + 0.5),
		MemUtil: uint32(100*tot.MemSeconds/tot.Seconds + 0.5),
	}}, nvml.SUCCESS
}

// GetSupportedEventTypes implements nvml.Device.
func (d *Device) GetSupportedEventTypes() (uint64, nvml.Return) {
	return nvml.EventTypeXidCriticalError, nvml.SUCCESS
}

// RegisterEvents implements nvml.Device. A healthy simulated GPU raises no
// Xid, so registering only has to succeed.
func (d *Device) RegisterEvents(types uint64, _ nvml.EventSet) nvml.Return {
	if types&^nvml.EventTypeXidCriticalError != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}
