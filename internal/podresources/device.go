package podresources // import "github.com/gpuviz/gpuviz/internal/podresources"

import (
	"strconv"
	"strings"
)

// DeviceID is one device ID as the kubelet reports it, parsed. The NVIDIA
// device plugin and DRA driver name a GPU in several forms:
//
//	GPU-8f6c...           a whole GPU, by UUID (the plugin's default strategy)
//	MIG-1d2e...           a MIG device, by UUID
//	GPU-8f6c...::3        replica 3 of a time-sliced GPU (nvidia.com/gpu.shared)
//	0, 1, ...             a GPU by NVML index (the plugin's index strategy)
//	gpu-0, gpu-1, ...     a whole GPU by its device minor number, /dev/nvidia<N>
//	                      (the gpu.nvidia.com DRA driver's device name)
//	nvidia0, nvidia1, ... a whole GPU by its device minor number (GKE's device
//	                      plugin, which names a GPU by its /dev file)
//	nvidia0/vgpu3         replica 3 of a GPU GKE time-shares or shares by MPS
//	nvidia0/gi2           a MIG partition on GKE: GPU instance 2 (the ID NVML
//	                      gives it, read from /proc/driver/nvidia/capabilities/
//	                      gpu<minor>/mig/gi<N>) of the GPU with device minor 0
//	nvidia0/gi2/vgpu1     replica 1 of that partition, time-shared
type DeviceID struct {
	// UUID is the GPU or MIG UUID; "" when the ID names a number.
	UUID string
	// Index is the GPU's NVML index when the ID names one, else -1.
	Index int
	// Minor is the GPU's device minor number when the ID names one, else
	// -1. It is not the NVML index: NVML orders GPUs by PCI bus, the
	// kernel numbers them as it probes them.
	Minor int
	// GPUInstance is the NVML GPU instance ID of a MIG partition on the
	// GPU of that Minor when the ID names one (GKE's nvidia<minor>/gi<N>),
	// else -1.
	GPUInstance int
	// Replica is the time-slicing replica, else -1.
	Replica int
}

// ParseDeviceID parses a device ID; ok is false for an ID that names no
// NVIDIA GPU in a known form.
func ParseDeviceID(id string) (DeviceID, bool) {
	d := DeviceID{Index: -1, Minor: -1, GPUInstance: -1, Replica: -1}
	id = strings.TrimSpace(id)
	if base, rep, found := strings.Cut(id, "::"); found {
		n, err := strconv.Atoi(rep)
		if err != nil || n < 0 {
			return d, false
		}
		d.Replica, id = n, base
	}
	if base, rep, found := strings.Cut(id, "/vgpu"); found && d.Replica < 0 && strings.HasPrefix(base, "nvidia") {
		n, err := strconv.Atoi(rep)
		if err != nil || n < 0 {
			return d, false
		}
		d.Replica, id = n, base
	}
	switch {
	case strings.HasPrefix(id, "GPU-") || strings.HasPrefix(id, "MIG-"):
		if len(id) <= len("GPU-") {
			return d, false
		}
		d.UUID = id
		return d, true
	case strings.HasPrefix(id, "gpu-"):
		// DRA: the driver names a whole GPU gpu-<minor> (GpuInfo.CanonicalName
		// in NVIDIA's dra-driver-nvidia-gpu).
		n, ok := number(id[len("gpu-"):])
		d.Minor = n
		return d, ok
	case strings.HasPrefix(id, "nvidia"):
		// GKE: the device plugin names a GPU by its device file, nvidia<minor>,
		// and a MIG partition nvidia<minor>/gi<N> after the GPU instance's
		// capability directory, whose N is the instance's NVML ID
		// (container-engine-accelerators' pkg/gpu/nvidia/mig).
		gpu, gi, isMIG := strings.Cut(id[len("nvidia"):], "/gi")
		n, ok := number(gpu)
		if isMIG && ok {
			d.GPUInstance, ok = number(gi)
		}
		if !ok {
			d.GPUInstance = -1
			return d, false
		}
		d.Minor = n
		return d, true
	default:
		n, ok := number(id)
		d.Index = n
		return d, ok
	}
}

// number reads a GPU number; -1 and false for anything else.
func number(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<16 {
		return -1, false
	}
	return n, true
}

// isGPUResource reports whether a device-plugin resource is NVIDIA GPUs:
// nvidia.com/gpu, its shared (time-sliced) form, and the MIG resources of
// the mixed strategy (nvidia.com/mig-1g.10gb, ...).
func isGPUResource(name string) bool {
	return name == "nvidia.com/gpu" || name == "nvidia.com/gpu.shared" || strings.HasPrefix(name, "nvidia.com/mig-")
}

// isGPUDriver reports whether a DRA driver is NVIDIA's GPU driver.
func isGPUDriver(name string) bool { return name == "gpu.nvidia.com" }
