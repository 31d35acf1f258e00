package timeline // import "github.com/gpuviz/gpuviz/processor/gpuvizprocessor/internal/timeline"

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Key identifies one GPU across hosts: host.name + hw.id (GPU UUID). The
// UUID alone would do on real hardware, but simulated and cloned machines
// repeat UUIDs, and spans name their host, not their GPU's UUID.
type Key struct{ Host, GPU string }

// Signal is one per-GPU quantity the store keeps.
type Signal uint8

// The signals, in the order of Window.Stats and Interval.Values.
const (
	Utilization      Signal = iota // fraction of time a kernel ran, 0..1
	MemoryController               // memory-controller busy fraction, 0..1
	SMActivity                     // GPM share of SMs busy, 0..1
	TensorActivity                 // GPM tensor-pipe busy, 0..1
	DRAMActivity                   // GPM DRAM bandwidth share, 0..1
	Power                          // W
	MemoryUsed                     // bytes
	MemoryLimit                    // bytes
	PCIeRx                         // bytes/s
	PCIeTx                         // bytes/s
	NVLinkRx                       // bytes/s
	NVLinkTx                       // bytes/s
	PCIeCapacity                   // bytes/s the PCIe link can carry per direction
	NVLinkCapacity                 // bytes/s the GPU's NVLinks can carry per direction
	PowerThrottled                 // share of the time clocks were held by a power reason (measured from throttle times, else the 0/1 flag)
	ThermalThrottled               // share of the time clocks were held by a thermal reason, likewise
	NumSignals                     // the number of signals, not a signal
)

var signalNames = [NumSignals]string{
	Utilization:      "utilization",
	MemoryController: "memory_controller",
	SMActivity:       "sm_activity",
	TensorActivity:   "tensor_activity",
	DRAMActivity:     "dram_activity",
	Power:            "power",
	MemoryUsed:       "memory_used",
	MemoryLimit:      "memory_limit",
	PCIeRx:           "pcie_rx",
	PCIeTx:           "pcie_tx",
	NVLinkRx:         "nvlink_rx",
	NVLinkTx:         "nvlink_tx",
	PCIeCapacity:     "pcie_capacity",
	NVLinkCapacity:   "nvlink_capacity",
	PowerThrottled:   "power_throttled",
	ThermalThrottled: "thermal_throttled",
}

// String names the signal in snake_case ("utilization", "pcie_rx", ...).
func (s Signal) String() string {
	if s < NumSignals {
		return signalNames[s]
	}
	return "Signal(" + strconv.Itoa(int(s)) + ")"
}

// Config bounds the store.
type Config struct {
	// MaxGPUs is how many GPUs are tracked at most; a point, index or process
	// for a new GPU beyond it is refused.
	MaxGPUs int
	// MaxPointsPerSignal is the ring capacity per GPU per signal; the oldest
	// point is overwritten.
	MaxPointsPerSignal int
	// Retention: points older than the GPU's newest point minus Retention
	// are dropped, and Expire forgets GPUs with no point newer than
	// now − Retention.
	Retention time.Duration
	// MaxSpan is the longest stretch one sample may describe (see the package
	// documentation).
	MaxSpan time.Duration
}

// DefaultConfig returns the defaults:
//
//   - MaxGPUs 4096: a gateway collector for a large inference cluster (512
//     eight-GPU nodes); an agent on a node sees 8.
//   - MaxPointsPerSignal 4096: about 11 minutes of the driver's ~6/s samples,
//     so a request's window is read from the fine-grained samples for most of
//     Retention; signals sent once per scrape keep far fewer (rings grow on
//     demand).
//   - Retention 15m: spans reach the processor late (SDK batching, queues,
//     tail sampling that holds a trace until it completes), and requests run
//     up to minutes; 15 minutes covers both with room.
//   - MaxSpan 30s: three default 10 s scrape intervals. A scraped value
//     (GPM, memory, throughput) describes the interval since the previous
//     scrape, so the cap must exceed one interval and tolerate a missed
//     scrape or two; a longer gap means nobody was watching, and the store
//     says so rather than stretching an old reading over it.
func DefaultConfig() Config {
	return Config{
		MaxGPUs:            4096,
		MaxPointsPerSignal: 4096,
		Retention:          15 * time.Minute,
		MaxSpan:            30 * time.Second,
	}
}

// Validate reports every bad field, by its configuration name.
func (c Config) Validate() error {
	var errs []error
	if c.MaxGPUs < 1 {
		errs = append(errs, fmt.Errorf("max_gpus must be at least 1, got %d", c.MaxGPUs))
	}
	if c.MaxPointsPerSignal < 2 {
		errs = append(errs, fmt.Errorf("max_points_per_signal must be at least 2 (an energy counter measures between two readings), got %d", c.MaxPointsPerSignal))
	}
	if c.Retention <= 0 {
		errs = append(errs, fmt.Errorf("retention must be positive, got %v", c.Retention))
	}
	if c.MaxSpan <= 0 {
		errs = append(errs, fmt.Errorf("max_span must be positive, got %v", c.MaxSpan))
	}
	return errors.Join(errs...)
}
