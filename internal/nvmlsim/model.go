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
	// The NVLink peak is NVIDIA's nominal data rate (links × 25 GB/s on
	// NVLink 3 and 4, × 50 GB/s on NVLink 5), never above NVLinkCapacity.
	PeakFLOPS, HBMBytesPerSecond, NVLinkBytesPerSecond float64
	// NVLink as NVML's field values report it: the links present
	// (FI_DEV_NVLINK_LINK_COUNT) and the common speed of the active links
	// (FI_DEV_NVLINK_SPEED_MBPS_COMMON), per link and direction in MB/s
	// (10^6 bytes), as nvidia-smi nvlink -s prints it in GB/s: 25 GB/s on
	// an A100 SXM4, 26.562 on H100/H200 SXM5, 53.125 on Blackwell. On
	// NVLink 4 and 5 that is the lanes' signalling rate (2 lanes of
	// 106.25 or 212.5 Gbit/s), about 6% above the nominal 25 or 50 GB/s.
	NVLinks         uint32
	NVLinkSpeedMBps uint32
}

// NVLinkCapacity is what the GPU's links carry per direction, bytes/s, as
// NVML's field values give it: links × common speed.
func (m Model) NVLinkCapacity() float64 { return float64(m.NVLinks) * float64(m.NVLinkSpeedMBps) * 1e6 }

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
		NVLinks: 12, NVLinkSpeedMBps: 25_000,
	},
	"h100": {
		Name: "h100", GPU: gpus.H100_SXM5_80GB, DriverVersion: "550.54.15",
		PowerLimitW: 700, IdlePowerW: 70, SMClockMaxMHz: 1980, SMClockIdle: 345, MemClockMHz: 2619, ReservedMiB: 544, PCIeGen: 5, HasGPM: true,
		PeakFLOPS: 989e12, HBMBytesPerSecond: 3.35e12, NVLinkBytesPerSecond: 450e9,
		NVLinks: 18, NVLinkSpeedMBps: 26_562,
	},
	"h200": {
		Name: "h200", GPU: gpus.H200_SXM5_141GB, DriverVersion: "550.54.15",
		PowerLimitW: 700, IdlePowerW: 75, SMClockMaxMHz: 1980, SMClockIdle: 345, MemClockMHz: 3201, ReservedMiB: 544, PCIeGen: 5, HasGPM: true,
		PeakFLOPS: 989e12, HBMBytesPerSecond: 4.8e12, NVLinkBytesPerSecond: 450e9,
		NVLinks: 18, NVLinkSpeedMBps: 26_562,
	},
	"b200": {
		Name: "b200", GPU: gpus.B200_SXM5_180GB, DriverVersion: "570.124.06",
		PowerLimitW: 1000, IdlePowerW: 140, SMClockMaxMHz: 1965, SMClockIdle: 300, MemClockMHz: 3996, ReservedMiB: 640, PCIeGen: 5, HasGPM: true,
		PeakFLOPS: 2250e12, HBMBytesPerSecond: 8e12, NVLinkBytesPerSecond: 900e9,
		NVLinks: 18, NVLinkSpeedMBps: 53_125,
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
