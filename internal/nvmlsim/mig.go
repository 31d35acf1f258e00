package nvmlsim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// migProfile is the layout of a simulated GPU in MIG mode: two 3-slice GPU
// instances (3g.71gb on an H200), one compute instance each, both running
// the GPU's workload: a worker process each (see GetComputeRunningProcesses).
const (
	migProfile   = nvml.GPU_INSTANCE_PROFILE_3_SLICE
	migInstances = 2
	migSlots     = 7 // NVML's MIG device slots per GPU
)

// MigDevice is a MIG device of a simulated GPU.
type MigDevice struct {
	mock.Device // satisfies the interface; the calls the receiver makes are methods here
	parent      *Device
	uuid        string
	gi          int
	totalBytes  uint64
}

var _ nvml.Device = (*MigDevice)(nil)

func (d *Device) enableMIG(seed uint64) {
	prof := d.model.GPU.MIGProfiles.GpuInstanceProfiles[migProfile]
	for gi := 1; gi <= migInstances; gi++ {
		d.migs = append(d.migs, &MigDevice{
			parent:     d,
			uuid:       fmt.Sprintf("MIG-simulated-%s-%x-%02d-%d", d.model.Name, seed, d.Index, gi),
			gi:         gi,
			totalBytes: prof.MemorySizeMB * mib,
		})
	}
}

// GetMigMode implements nvml.Device.
func (d *Device) GetMigMode() (int, int, nvml.Return) {
	if len(d.migs) > 0 {
		return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
	}
	return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
}

// GetMaxMigDeviceCount implements nvml.Device.
func (d *Device) GetMaxMigDeviceCount() (int, nvml.Return) { return migSlots, nvml.SUCCESS }

// GetMigDeviceHandleByIndex implements nvml.Device.
func (d *Device) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= migSlots {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if i >= len(d.migs) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return d.migs[i], nvml.SUCCESS
}

// GetGpuInstanceById implements nvml.Device.
func (d *Device) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	for _, m := range d.migs {
		if m.gi == id {
			info := nvml.GpuInstanceInfo{Device: d, Id: uint32(id), ProfileId: migProfile}
			return server.NewGpuInstanceFromInfo(info, d.model.GPU.MIGProfiles), nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (d *Device) hasGPUInstance(gi int) bool {
	for _, m := range d.migs {
		if m.gi == gi {
			return true
		}
	}
	return false
}

// GetUUID implements nvml.Device.
func (m *MigDevice) GetUUID() (string, nvml.Return) { return m.uuid, nvml.SUCCESS }

// GetGpuInstanceId implements nvml.Device.
func (m *MigDevice) GetGpuInstanceId() (int, nvml.Return) { return m.gi, nvml.SUCCESS }

// GetComputeInstanceId implements nvml.Device.
func (m *MigDevice) GetComputeInstanceId() (int, nvml.Return) { return m.ci(), nvml.SUCCESS }

// ci is the device's compute instance ID: one compute instance each, 0.
func (m *MigDevice) ci() int { return 0 }

// IsMigDeviceHandle implements nvml.Device.
func (m *MigDevice) IsMigDeviceHandle() (bool, nvml.Return) { return true, nvml.SUCCESS }

// GetDeviceHandleFromMigDeviceHandle implements nvml.Device.
func (m *MigDevice) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	return m.parent, nvml.SUCCESS
}

// GetMemoryInfo implements nvml.Device: the instances share the GPU's
// workload, and so its memory use, evenly.
func (m *MigDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	used := m.used(m.parent.memoryUsed())
	return nvml.Memory{Total: m.totalBytes, Used: used, Free: m.totalBytes - used}, nvml.SUCCESS
}

// used is the instance's share of gpuUsed, the GPU's memory in use: what
// its worker holds.
func (m *MigDevice) used(gpuUsed uint64) uint64 {
	return min(gpuUsed/uint64(len(m.parent.migs)), m.totalBytes)
}

// GetComputeRunningProcesses implements nvml.Device: like NVML asked on a
// MIG device's handle, the processes of its own GPU and compute instance,
// as the GPU's handle lists them.
func (m *MigDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	procs, ret := m.parent.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	own := procs[:0]
	for _, p := range procs {
		if p.GpuInstanceId == uint32(m.gi) && p.ComputeInstanceId == uint32(m.ci()) {
			own = append(own, p)
		}
	}
	return own, nvml.SUCCESS
}

// GetUtilizationRates implements nvml.Device: like NVML, not on a MIG
// device.
func (m *MigDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
}

// GetSamples implements nvml.Device: NVML keeps no utilisation samples for
// a MIG device; the simulation keeps none of the other buffers for one
// either.
func (m *MigDevice) GetSamples(nvml.SamplingType, uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	return 0, nil, nvml.ERROR_NOT_SUPPORTED
}
