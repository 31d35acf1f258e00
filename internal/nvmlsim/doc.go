// Package nvmlsim is the simulated backend: NVIDIA servers, built on go-nvml's
// DGX mocks, whose GPUs serve a deterministic (seeded) LLM inference workload.
//
// It satisfies nvml.Interface, so the receiver reads it through exactly the
// code path it uses on real hardware. Its data is never passed off as real:
// device UUIDs start with "GPU-simulated-" and product names end with
// "(simulated)"; the receiver also marks every data point's resource.
//
// The workload is a pure function of (seed, GPU index, time): see Schedule.
// Readings that NVML averages over time (utilisation, power) and the energy
// counter are exact integrals of that schedule, so power and energy always
// agree.
package nvmlsim // import "github.com/gpuviz/gpuviz/internal/nvmlsim"
