// Package gpucheck is the analysis behind scripts/gpu-check and
// scripts/hardware-report, the hardware checks of otelcol-gpuviz.
//
// gpu-check captures what the collector exports over OTLP/HTTP, metrics and
// traces, while known GPU workloads run. First in phases (idle,
// compute-bound matmul, memory-bound device-to-device copy, PCIe-bound
// host-to-device copy): Analyze tells, per phase, whether the gpuviz metrics
// show the signature that phase must have. A receiver that reads the wrong
// NVML field, scales a value wrongly or labels a direction backwards fails
// here, on real hardware, where the simulation-based tests cannot see it.
// Then as requests sent as vLLM spans: AnalyzeJoin checks what the gpuviz
// processor wrote on each span (phase bottleneck labels, energy) against the
// workload's own measurements (phase boundaries, an energy reference from
// the driver's power samples, else polled instant power), and that the receiver's sampling-clock ticks separate the
// phases.
//
// hwreport.go holds what scripts/hardware-report computes: CPU time from
// /proc, latency percentiles, the collector configurations of its CPU
// comparisons and the report's Markdown.
//
// The captures, the workloads' reports and the analyses are plain data, so
// the analysis is tested without a GPU, and a saved run can be analysed
// again offline (gpucheck --analyze DIR).
package gpucheck
