package nvmlsim

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// The entry points of faultableCalls on a GPU with faults: each passes
// through the handle's faults before it reaches the simulated device.

var _ nvml.Device = (*faultDevice)(nil)

// guard makes call through h's faults: the faults' answer, or read's.
func guard[T any](h *faultDevice, call string, read func() (T, nvml.Return)) (T, nvml.Return) {
	if ret := h.enter(call); ret != nvml.SUCCESS {
		var zero T
		return zero, ret
	}
	return read()
}

func (h *faultDevice) GetClockInfo(c nvml.ClockType) (uint32, nvml.Return) {
	return guard(h, "nvmlDeviceGetClockInfo", func() (uint32, nvml.Return) { return h.Device.GetClockInfo(c) })
}

func (h *faultDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return guard(h, "nvmlDeviceGetComputeRunningProcesses", h.Device.GetComputeRunningProcesses)
}

func (h *faultDevice) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	return guard(h, "nvmlDeviceGetCurrentClocksEventReasons", h.Device.GetCurrentClocksEventReasons)
}

func (h *faultDevice) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	return guard(h, "nvmlDeviceGetEnforcedPowerLimit", h.Device.GetEnforcedPowerLimit)
}

// GetFieldValues answers a fault for the whole call and for every value,
// as NVML does when the call itself fails.
func (h *faultDevice) GetFieldValues(values []nvml.FieldValue) nvml.Return {
	if ret := h.enter("nvmlDeviceGetFieldValues"); ret != nvml.SUCCESS {
		for i := range values {
			values[i].NvmlReturn = uint32(ret)
		}
		return ret
	}
	return h.Device.GetFieldValues(values)
}

func (h *faultDevice) GetIndex() (int, nvml.Return) {
	return guard(h, "nvmlDeviceGetIndex", func() (int, nvml.Return) { return h.Device.Index, nvml.SUCCESS })
}

func (h *faultDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	return guard(h, "nvmlDeviceGetMemoryInfo", h.Device.GetMemoryInfo)
}

func (h *faultDevice) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	return guard(h, "nvmlDeviceGetMemoryInfo_v2", h.Device.GetMemoryInfo_v2)
}

func (h *faultDevice) GetName() (string, nvml.Return) {
	return guard(h, "nvmlDeviceGetName", h.Device.GetName)
}

func (h *faultDevice) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	return guard(h, "nvmlDeviceGetPciInfo", h.Device.GetPciInfo)
}

func (h *faultDevice) GetPcieThroughput(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
	return guard(h, "nvmlDeviceGetPcieThroughput", func() (uint32, nvml.Return) { return h.Device.GetPcieThroughput(c) })
}

func (h *faultDevice) GetPerformanceState() (nvml.Pstates, nvml.Return) {
	return guard(h, "nvmlDeviceGetPerformanceState", h.Device.GetPerformanceState)
}

func (h *faultDevice) GetPowerUsage() (uint32, nvml.Return) {
	return guard(h, "nvmlDeviceGetPowerUsage", h.Device.GetPowerUsage)
}

func (h *faultDevice) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	return guard(h, "nvmlDeviceGetProcessUtilization", func() ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return h.Device.GetProcessUtilization(lastSeen)
	})
}

func (h *faultDevice) GetSamples(kind nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	if ret := h.enter("nvmlDeviceGetSamples"); ret != nvml.SUCCESS {
		return 0, nil, ret
	}
	return h.Device.GetSamples(kind, lastSeen)
}

func (h *faultDevice) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	return guard(h, "nvmlDeviceGetTemperature", func() (uint32, nvml.Return) { return h.Device.GetTemperature(sensor) })
}

func (h *faultDevice) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	return guard(h, "nvmlDeviceGetTotalEnergyConsumption", h.Device.GetTotalEnergyConsumption)
}

func (h *faultDevice) GetUUID() (string, nvml.Return) {
	return guard(h, "nvmlDeviceGetUUID", h.Device.GetUUID)
}

func (h *faultDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	return guard(h, "nvmlDeviceGetUtilizationRates", h.Device.GetUtilizationRates)
}

// The calls below cannot be named by a fault, but a GPU that is gone (a
// reset) answers GPU_IS_LOST from any call, a handle from before a reset
// is invalid for every call, and an error fault naming no calls fails
// every one: they pass through the faults too.

func (h *faultDevice) GetMigMode() (int, int, nvml.Return) {
	if ret := h.enter("nvmlDeviceGetMigMode"); ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	return h.Device.GetMigMode()
}

func (h *faultDevice) GetMaxMigDeviceCount() (int, nvml.Return) {
	return guard(h, "nvmlDeviceGetMaxMigDeviceCount", h.Device.GetMaxMigDeviceCount)
}

func (h *faultDevice) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	return guard(h, "nvmlDeviceGetMigDeviceHandleByIndex", func() (nvml.Device, nvml.Return) { return h.Device.GetMigDeviceHandleByIndex(i) })
}

func (h *faultDevice) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	return guard(h, "nvmlDeviceGetGpuInstanceById", func() (nvml.GpuInstance, nvml.Return) { return h.Device.GetGpuInstanceById(id) })
}

func (h *faultDevice) GetGpuInstanceProfileInfo(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	return guard(h, "nvmlDeviceGetGpuInstanceProfileInfo", func() (nvml.GpuInstanceProfileInfo, nvml.Return) {
		return h.Device.GetGpuInstanceProfileInfo(p)
	})
}

func (h *faultDevice) GetMinorNumber() (int, nvml.Return) {
	return guard(h, "nvmlDeviceGetMinorNumber", h.Device.GetMinorNumber)
}

func (h *faultDevice) GetCurrPcieLinkGeneration() (int, nvml.Return) {
	return guard(h, "nvmlDeviceGetCurrPcieLinkGeneration", h.Device.GetCurrPcieLinkGeneration)
}

func (h *faultDevice) GetMaxPcieLinkGeneration() (int, nvml.Return) {
	return guard(h, "nvmlDeviceGetMaxPcieLinkGeneration", h.Device.GetMaxPcieLinkGeneration)
}

func (h *faultDevice) GetCurrPcieLinkWidth() (int, nvml.Return) {
	return guard(h, "nvmlDeviceGetCurrPcieLinkWidth", h.Device.GetCurrPcieLinkWidth)
}

func (h *faultDevice) GetMaxPcieLinkWidth() (int, nvml.Return) {
	return guard(h, "nvmlDeviceGetMaxPcieLinkWidth", h.Device.GetMaxPcieLinkWidth)
}

func (h *faultDevice) GetEncoderUtilization() (uint32, uint32, nvml.Return) {
	if ret := h.enter("nvmlDeviceGetEncoderUtilization"); ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	return h.Device.GetEncoderUtilization()
}

func (h *faultDevice) GetDecoderUtilization() (uint32, uint32, nvml.Return) {
	if ret := h.enter("nvmlDeviceGetDecoderUtilization"); ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	return h.Device.GetDecoderUtilization()
}

func (h *faultDevice) GetFanSpeed() (uint32, nvml.Return) {
	return guard(h, "nvmlDeviceGetFanSpeed", h.Device.GetFanSpeed)
}

func (h *faultDevice) GetSupportedEventTypes() (uint64, nvml.Return) {
	return guard(h, "nvmlDeviceGetSupportedEventTypes", h.Device.GetSupportedEventTypes)
}

func (h *faultDevice) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	if ret := h.enter("nvmlDeviceRegisterEvents"); ret != nvml.SUCCESS {
		return ret
	}
	return h.Device.RegisterEvents(types, set)
}
