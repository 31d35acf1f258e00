package nvmlsim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// Model describes one simulated GPU product: the go-nvml mock configuration
// for its static facts, and the electrical and clock envelope the workload
// model moves within. Figures are the public board specifications (SXM
// variants) rounded; idle figures are typical of a GPU in persistence mode.
type Model struct {
	Name          string
	GPU           gpus.Config
	DriverVersion string
	PowerLimitW   float64 // board power limit (TDP)
	IdlePowerW    float64
	SMClockMaxMHz uint32
	SMClockIdle   uint32
	MemClockMHz   uint32
	ReservedMiB   uint64 // memory the driver reserves for itself
	PCIeGen       int    // every model here has a x16 link
	HasGPM        bool   // GPU Performance Monitoring: Hopper and newer
	// Peaks the inference engine's roofline runs against: dense BF16
	// tensor FLOP/s, HBM bytes/s, NVLink bytes/s per GPU each direction.
	PeakFLOPS, HBMBytesPerSecond, NVLinkBytesPerSecond float64
}

// Hardware returns what the inference engine model needs of the product.
func (m Model) Hardware() infersim.Hardware {
	return infersim.Hardware{
		Name: m.Name, MemoryBytes: float64(m.GPU.MemoryMB * mib), PeakFLOPS: m.PeakFLOPS,
		HBMBytesPerSecond: m.HBMBytesPerSecond, NVLinkBytesPerSecond: m.NVLinkBytesPerSecond,
		PowerLimitW: m.PowerLimitW, IdleW: m.IdlePowerW, SMClockMaxMHz: m.SMClockMaxMHz, SMClockIdleMHz: m.SMClockIdle,
	}
}

var models = map[string]Model{
	"a100": {
		Name: "a100", GPU: gpus.A100_SXM4_80GB, DriverVersion: "550.54.15",
		PowerLimitW: 400, IdlePowerW: 55, SMClockMaxMHz: 1410, SMClockIdle: 210, MemClockMHz: 1593, ReservedMiB: 512, PCIeGen: 4,
		PeakFLOPS: 312e12, HBMBytesPerSecond: 2.039e12, NVLinkBytesPerSecond: 300e9,
	},
	"h100": {
		Name: "h100", GPU: gpus.H100_SXM5_80GB, DriverVersion: "550.54.15",
		PowerLimitW: 700, IdlePowerW: 70, SMClockMaxMHz: 1980, SMClockIdle: 345, MemClockMHz: 2619, ReservedMiB: 544, PCIeGen: 5, HasGPM: true,
		PeakFLOPS: 989e12, HBMBytesPerSecond: 3.35e12, NVLinkBytesPerSecond: 450e9,
	},
	"h200": {
		Name: "h200", GPU: gpus.H200_SXM5_141GB, DriverVersion: "550.54.15",
		PowerLimitW: 700, IdlePowerW: 75, SMClockMaxMHz: 1980, SMClockIdle: 345, MemClockMHz: 3201, ReservedMiB: 544, PCIeGen: 5, HasGPM: true,
		PeakFLOPS: 989e12, HBMBytesPerSecond: 4.8e12, NVLinkBytesPerSecond: 450e9,
	},
	"b200": {
		Name: "b200", GPU: gpus.B200_SXM5_180GB, DriverVersion: "570.124.06",
		PowerLimitW: 1000, IdlePowerW: 140, SMClockMaxMHz: 1965, SMClockIdle: 300, MemClockMHz: 3996, ReservedMiB: 640, PCIeGen: 5, HasGPM: true,
		PeakFLOPS: 2250e12, HBMBytesPerSecond: 8e12, NVLinkBytesPerSecond: 900e9,
	},
}

// Models lists the names LookupModel accepts, sorted.
func Models() []string {
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupModel returns the model with the given name (case-insensitive).
func LookupModel(name string) (Model, error) {
	m, ok := models[strings.ToLower(name)]
	if !ok {
		return Model{}, fmt.Errorf("unknown simulated GPU model %q: use one of %s", name, strings.Join(Models(), ", "))
	}
	return m, nil
}
