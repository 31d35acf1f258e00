package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuviz/gpuviz/internal/nvmlsim"
)

// openBackend returns the initialised nvml.Interface the configuration asks
// for, and which backend it turned out to be (auto resolves to one of the
// others). Everything after this reads GPUs through the same interface.
func openBackend(cfg *Config, logger *zap.Logger) (nvml.Interface, Backend, error) {
	switch cfg.Backend {
	case BackendSimulated:
		lib, err := openSimulated(cfg.Simulated, logger)
		return lib, BackendSimulated, err
	case BackendAuto:
		lib, err := openNVML(cfg.NVML.LibraryPath)
		if err == nil {
			return lib, BackendNVML, nil
		}
		logger.Warn("NVML is not usable, so the gpuviz receiver falls back to the SIMULATED backend: "+
			"these GPUs are not real (their data carries gpuviz.backend=simulated). "+
			"Set backend: nvml to make this an error instead.",
			zap.Error(err), zap.String("model", cfg.Simulated.Model), zap.Int("gpus", cfg.Simulated.GPUs))
		lib, err = openSimulated(cfg.Simulated, logger)
		return lib, BackendSimulated, err
	default:
		lib, err := openNVML(cfg.NVML.LibraryPath)
		return lib, BackendNVML, err
	}
}

func openSimulated(cfg SimulatedConfig, logger *zap.Logger) (nvml.Interface, error) {
	opts := []nvmlsim.Option{nvmlsim.WithScenario(cfg.Scenario)}
	if cfg.MIG {
		opts = append(opts, nvmlsim.WithMIG())
	}
	if len(cfg.Faults) > 0 {
		opts = append(opts, nvmlsim.WithFaults(cfg.Faults))
		logger.Warn("FAULT INJECTION IS ON: the simulated GPUs will fail as simulated.faults says "+
			"(their data carries gpuviz.simulated.faults); this is for testing, never for production",
			zap.String("faults", faultSummary(cfg.Faults)))
	}
	lib, err := nvmlsim.New(cfg.Model, cfg.GPUs, cfg.Seed, nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("simulated backend: %w", err)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("simulated backend: %w", ret)
	}
	return lib, nil
}

// faultSummary names the injected faults, kind@gpu (kind alone for
// missing entry points), in configuration order.
func faultSummary(faults []nvmlsim.Fault) string {
	names := make([]string, len(faults))
	for i, f := range faults {
		names[i] = string(f.Kind)
		if f.Kind != nvmlsim.FaultMissing {
			names[i] += "@" + strconv.Itoa(f.GPU)
		}
	}
	return strings.Join(names, ",")
}

func openNVML(path string) (nvml.Interface, error) {
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initError(ret, path)
	}
	return lib, nil
}

// initError explains a failed nvmlInit in terms of what the user can do.
func initError(ret nvml.Return, path string) error {
	if path == "" {
		path = "libnvidia-ml.so.1"
	}
	var hint string
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		hint = fmt.Sprintf("the NVML library %s was not found: install the NVIDIA driver (it ships NVML), "+
			"point nvml.library_path at libnvidia-ml.so.1, or set backend: simulated (or auto) to run without a GPU", path)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		hint = "NVML loaded but the NVIDIA kernel driver is not running: check `nvidia-smi` and `lsmod | grep nvidia`, " +
			"and in a container run with the NVIDIA container runtime"
	case nvml.ERROR_NO_PERMISSION:
		hint = "no permission to open the GPUs: the collector's user needs read/write access to /dev/nvidia* " +
			"(in a container: the NVIDIA container runtime, or the devices mounted)"
	default:
		hint = "nvmlInit failed"
	}
	return fmt.Errorf("nvml backend: %s: %w", hint, ret)
}
