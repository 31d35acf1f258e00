// Package nvmlcalls holds what the receiver asks of NVML that the tools
// measuring it (cmd/gpuviz-hwreport) must ask alike: the GPM metrics, in
// request order, and the symbol probe that keeps a missing entry point
// from being called.
package nvmlcalls // import "github.com/gpuviz/gpuviz/internal/nvmlcalls"

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// GPMMetrics are the GPM metrics the receiver asks for, in request order.
var GPMMetrics = [...]nvml.GpmMetricId{
	nvml.GPM_METRIC_SM_UTIL,
	nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL,
	nvml.GPM_METRIC_DRAM_BW_UTIL,
	nvml.GPM_METRIC_FP16_UTIL,
	nvml.GPM_METRIC_FP32_UTIL,
	nvml.GPM_METRIC_FP64_UTIL,
	nvml.GPM_METRIC_PCIE_RX_PER_SEC,
	nvml.GPM_METRIC_PCIE_TX_PER_SEC,
	nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
	nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
}

// HasSymbols reports whether the loaded library has every named entry
// point. Calling one it lacks is a dynamic-linker abort, not an error
// code, so callers look once and never call what is missing.
func HasSymbols(lib nvml.Interface, names ...string) bool {
	ext := lib.Extensions()
	for _, n := range names {
		if ext.LookupSymbol(n) != nil {
			return false
		}
	}
	return true
}
