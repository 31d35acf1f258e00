package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuviz/gpuviz/internal/nvmlcalls"
	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// gpu is one device the receiver reads: its handle, the facts that do not
// change while it runs (read once at start), and what it has shown it cannot
// do.
type gpu struct {
	// dev is the GPU's handle, the scrape's: a new one replaces it after a
	// reset (reacquire), published in handle for the tick and Xid watcher.
	dev    nvml.Device
	handle atomic.Pointer[nvml.Device]
	index  int
	busID  string

	// Attribute values shared by every data point of this GPU.
	id, name, vendor, model, driver string

	// unsupported holds the readings NVML answered ERROR_NOT_SUPPORTED for:
	// they are not asked again.
	unsupported readingSet
	// lost is set while the GPU answers ERROR_GPU_IS_LOST.
	lost bool
	// memoryV1 is set when the v2 memory call turned out unsupported.
	memoryV1 bool

	fields    fieldRequest // the field values read in one batched call
	counters  counters     // cumulative byte counters built from wrapping ones
	pcieMax   [2]int       // max PCIe generation and width, read once
	mig       migState
	processes processState
	slurm     slurmState
	xids      xidCounts
	// tick holds the fast readings' state; the sampling clock owns it when
	// samples are on, the scrape otherwise.
	tick *tickState
	// tickStalled is set while the sampling clock's calls on this GPU have
	// not returned within a tick: the GPU reports degraded.
	tickStalled atomic.Bool
	// tickAbandoned is set when a call of the sampling clock had still not
	// returned at shutdown: its buffers may still be in use, so they are
	// not freed.
	tickAbandoned bool
	// mb holds what the GPU's scrape records: GPUs are scraped
	// concurrently, each into its own builder (scraper.go).
	mb *metadata.MetricsBuilder
	// scraping is closed when the GPU's scrape in flight returns; nil when
	// none is. scrapeSince is when that scrape began, scrapeStalled whether
	// it outlived a deadline, scrapeErrs what it failed on. All but
	// scrapeErrs are the scrape goroutine's; scrapeErrs passes with
	// scraping.
	scraping      chan struct{}
	scrapeSince   time.Time
	scrapeStalled bool
	scrapeErrs    []error
	// health is what the latest readings say about the GPU's state beyond
	// answering calls: ok, degraded (pending remap, new uncorrected ECC
	// errors or Xids of the hardware's) or failed (a failed remap).
	health metadata.AttributeHwState
}

// readingSet is a set of readings, one bit each.
type readingSet uint64

func (s readingSet) has(r reading) bool { return s&(1<<r) != 0 }
func (s *readingSet) add(r reading)     { *s |= 1 << r }

// symbols records which optional NVML entry points the loaded library has.
// Calling one it lacks kills the process (a dynamic-linker error, not a
// return code), so each is looked up once at start and readings that need a
// missing one are never made.
type symbols struct {
	memoryInfoV2 bool
	totalEnergy  bool
	// clocksEventReasons is the r535+ name of clocksThrottleReasons.
	clocksEventReasons    bool
	clocksThrottleReasons bool
	gpm                   bool
	// gpmMIG: GPM samples per GPU instance (nvmlGpmMigSampleGet), which a
	// driver may lack where it has GPM.
	gpmMIG bool
	// minorNumber: the GPU's /dev/nvidia<N>, which DRA device names carry.
	minorNumber bool
}

func probeSymbols(lib nvml.Interface) symbols {
	has := func(names ...string) bool { return nvmlcalls.HasSymbols(lib, names...) }
	return symbols{
		memoryInfoV2:          has("nvmlDeviceGetMemoryInfo_v2"),
		totalEnergy:           has("nvmlDeviceGetTotalEnergyConsumption"),
		clocksEventReasons:    has("nvmlDeviceGetCurrentClocksEventReasons"),
		clocksThrottleReasons: has("nvmlDeviceGetCurrentClocksThrottleReasons"),
		gpm:                   has("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet", "nvmlGpmMetricsGet"),
		gpmMIG:                has("nvmlGpmMigSampleGet"),
		minorNumber:           has("nvmlDeviceGetMinorNumber"),
	}
}

// selectGPUs resolves the configured device list (empty: all GPUs) to NVML
// indexes. A device that does not exist is a configuration error.
func selectGPUs(lib nvml.Interface, refs []DeviceRef) ([]int, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("cannot count GPUs: %w", ret)
	}
	if len(refs) == 0 {
		all := make([]int, count)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	var indexes []int
	add := func(i, idx int) error {
		if j := slices.Index(indexes, idx); j >= 0 {
			return fmt.Errorf("devices[%d]: GPU %d is devices[%d] too: each GPU once, or its series are read twice", i, idx, j)
		}
		indexes = append(indexes, idx)
		return nil
	}
	for i, ref := range refs {
		if idx, ok := ref.index(); ok {
			if idx >= count {
				return nil, fmt.Errorf("devices[%d]: there is no GPU %d: NVML sees %d GPUs (0 to %d)", i, idx, count, count-1)
			}
			if err := add(i, idx); err != nil {
				return nil, err
			}
			continue
		}
		dev, ret := lib.DeviceGetHandleByUUID(string(ref))
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("devices[%d]: no GPU has UUID %q (%v): `nvidia-smi -L` lists the UUIDs", i, ref, ret)
		}
		idx, ret := dev.GetIndex()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("devices[%d]: cannot read the index of GPU %q: %w", i, ref, ret)
		}
		if err := add(i, idx); err != nil {
			return nil, err
		}
	}
	return indexes, nil
}

// openGPU reads the static facts of GPU index.
func openGPU(lib nvml.Interface, index int, driver string) (*gpu, error) {
	dev, ret := lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %d: cannot get a handle: %w", index, ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %d: cannot read its UUID: %w", index, ret)
	}
	model, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %d: cannot read its name: %w", index, ret)
	}
	g := &gpu{
		dev:    dev,
		index:  index,
		id:     uuid,
		name:   fmt.Sprintf("GPU %d", index),
		vendor: "NVIDIA",
		model:  model,
		driver: driver,
	}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		g.busID = busID(pci.BusId[:])
	}
	g.handle.Store(&dev)
	return g, nil
}

// busID turns NVML's NUL-terminated C string into a Go string, in the form
// nvidia-smi prints (00000000:1B:00.0).
func busID(raw []int8) string {
	var b strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// worsen lowers the GPU's health to st unless it is already worse.
func (g *gpu) worsen(st metadata.AttributeHwState) {
	if severity(st) > severity(g.health) {
		g.health = st
	}
}

func severity(st metadata.AttributeHwState) int {
	switch st {
	case metadata.AttributeHwStateFailed:
		return 2
	case metadata.AttributeHwStateDegraded:
		return 1
	}
	return 0
}
