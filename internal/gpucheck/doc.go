// Package gpucheck is the analysis behind scripts/gpu-check, the hardware
// check of otelcol-gpuviz: it captures what the collector exports over
// OTLP/HTTP while a known GPU workload runs in phases (idle, compute-bound
// matmul, memory-bound device-to-device copy, PCIe-bound host-to-device copy),
// and tells, per phase, whether the gpuviz metrics show the signature that
// phase must have. A receiver that reads the wrong NVML field, scales a value
// wrongly or labels a direction backwards fails here, on real hardware, where
// the simulation-based tests cannot see it.
//
// The capture, the phases and the analysis are plain data, so the analysis is
// tested without a GPU, and a saved run can be analysed again offline
// (gpucheck --analyze DIR).
package gpucheck
