package nvmlsim

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

const mib = 1 << 20

// Device is one simulated GPU. Static facts (architecture, compute capability,
// MIG profiles, ...) come from the embedded go-nvml DGX mock device; the calls
// that change over time are methods here, computed from the device's
// Schedule. Overriding them as methods rather than through the mock's XxxFunc
// fields matters: the mock records every call it serves, which would grow
// without bound in a long-running simulation.
type Device struct {
	*server.Device

	model Model
	uuid  string
	name  string
	busID string
	now   func() time.Time

	weights  uint64 // bytes of model weights and CUDA context
	kvBudget uint64 // bytes the KV cache may grow to
	// engineMemory is what a batching engine allocates at start; zero
	// under the sequential schedule, whose KV cache grows per request.
	engineMemory uint64
	migs         []*MigDevice // in MIG mode

	// limitW is the enforced power limit: the board's, or the scenario's.
	limitW float64

	mu sync.Mutex
	// work is what the GPU does: the sequential schedule (sched, also kept
	// for its requests) or a GPU of a batching engine.
	work  workload
	sched *Schedule
	// The driver's cumulative counters (energy, throttle time, PCIe and
	// NVLink bytes) are integrals of the schedule since the simulation
	// started, accumulated up to accAt, on top of baseJ for energy.
	accAt int64
	acc   Totals
	baseJ float64
	// restartAt is when the counters last restarted (a reset), 0 before
	// any: the driver's sample buffers hold nothing from before it.
	restartAt int64
	// refreshPhase places the GPU's refresh grid (see refreshed).
	refreshPhase int64
	// gpmLag is how long before it is taken a GPM sample describes the
	// GPU (see gpmSample.Get).
	gpmLag int64
}

// GPMLag is how long before it is taken each GPM sample of the device
// describes it: the truth a scorer compares a learned lag with.
func (d *Device) GPMLag() time.Duration { return time.Duration(d.gpmLag) }

// refreshPeriod is how often the driver refreshes the energy counter and
// the instant power field: every 100 ms on an H200 with driver 580, read
// every 25 ms and every 6 ms (docs/hardware.md). Between refreshes a read
// gets the last refresh's values.
const refreshPeriod = int64(100 * time.Millisecond)

// refreshed returns the energy counter (J) and the instant power (W) as the
// driver last refreshed them, at or before accAt: the energy up to that
// refresh, and the mean power of the powerSamplePeriod (20 ms) before it.
// The H200's field 186 is one such reading held for 100 ms, not the
// period's mean: under an ~11 ms on/off load its refreshes varied as much
// as the 20 ms power samples (standard deviation 51.7 W against 53.1 W)
// where 100 ms means varied by 9.0 W (docs/hardware.md). The caller holds
// mu and has accumulated.
func (d *Device) refreshed() (joules, watts float64) {
	u := d.accAt - floorMod(d.accAt-d.refreshPhase, refreshPeriod)
	joules = max(0, d.baseJ+d.acc.Joules-d.work.Integrate(u, d.accAt).Joules) // 0 just after a reset
	watts = d.work.Integrate(u-powerSamplePeriod, u).Joules / (float64(powerSamplePeriod) / float64(time.Second))
	return joules, watts
}

func floorMod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

var _ nvml.Device = (*Device)(nil)

// workload is the activity a simulated GPU follows.
type workload interface {
	At(t int64) Segment
	Integrate(from, to int64) Totals
}

// engineGPU is one GPU of a node of batching engines.
type engineGPU struct {
	node *infersim.Node
	gpu  int
}

func (e engineGPU) At(t int64) Segment              { return e.node.At(e.gpu, t) }
func (e engineGPU) Integrate(from, to int64) Totals { return e.node.Integrate(e.gpu, from, to) }

// newDevice returns simulated GPU index; node nil means the sequential
// schedule.
func newDevice(mock *server.Device, m Model, seed uint64, index int, now func() time.Time, node *infersim.Node) *Device {
	d := &Device{
		Device: mock,
		model:  m,
		uuid:   simulatedUUID(m.Name, seed, index),
		name:   m.GPU.Name + " (simulated)",
		busID:  mock.PciBusID,
		now:    now,
		limitW: m.PowerLimitW,
	}
	if node != nil {
		d.work = engineGPU{node: node, gpu: index}
		d.engineMemory = node.MemoryUsed(index)
		if l := node.Scenario().PowerLimitW; l > 0 {
			d.limitW = l
		}
	} else {
		d.sched = NewSchedule(m, seed, index)
		d.work = d.sched
	}
	mock.UUID = d.uuid
	total := m.GPU.MemoryMB * mib
	// Weights take 30-45% of memory depending on the GPU's seat in the
	// server (a stand-in for different model shards); vLLM-style serving lets
	// the KV cache grow to 90% of the memory in total.
	d.weights = total * uint64(30+mix(seed^uint64(index))%16) / 100
	d.kvBudget = total*9/10 - d.weights - m.ReservedMiB*mib
	// The energy counter runs from driver load: pretend that was two to four
	// days ago at a 250 W average.
	d.accAt = now().UnixNano()
	d.baseJ = float64(2+index%3) * 86400 * 250
	d.refreshPhase = int64(index) * int64(37*time.Millisecond) % refreshPeriod
	d.gpmLag = int64(gpmLagMin) + int64(mix(seed^uint64(index)^0x6770)%uint64(gpmLagMax-gpmLagMin))
	return d
}

// script is activity given segment by segment (WithScript).
type script []Segment

func (s script) At(t int64) Segment { return infersim.SegmentAt(s, t) }

func (s script) Integrate(from, to int64) Totals {
	var tot Totals
	if to > from {
		tot.Seconds = float64(to-from) / 1e9
		infersim.Accumulate(&tot, s, from, to)
	}
	return tot
}

// follow makes the device follow w, with its weights as its only memory.
func (d *Device) follow(w workload) {
	d.work, d.sched = w, nil
	d.engineMemory = d.weights
}

// Schedule returns the sequential schedule the device follows, or nil when
// it serves a batching engine.
func (d *Device) Schedule() *Schedule { return d.sched }

// sampleWindow is the period over which NVML averages utilisation and power
// readings on recent GPUs.
const sampleWindow = int64(time.Second)

func (d *Device) window(length int64) (Totals, int64) {
	t := d.now().UnixNano()
	return d.work.Integrate(t-length, t), t
}

// GetUUID implements nvml.Device.
func (d *Device) GetUUID() (string, nvml.Return) { return d.uuid, nvml.SUCCESS }

// GetName implements nvml.Device.
func (d *Device) GetName() (string, nvml.Return) { return d.name, nvml.SUCCESS }

// GetPciInfo implements nvml.Device.
func (d *Device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	info := nvml.PciInfo{PciDeviceId: d.model.GPU.PciDeviceId, Bus: uint32(d.Index)}
	for i := 0; i < len(d.busID) && i < len(info.BusId)-1; i++ {
		info.BusId[i] = int8(d.busID[i])
	}
	return info, nvml.SUCCESS
}

// GetUtilizationRates implements nvml.Device; like NVML, not in MIG mode.
func (d *Device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if len(d.migs) > 0 {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	tot, _ := d.window(sampleWindow)
	return nvml.Utilization{
		Gpu:    uint32(100*tot.BusySeconds/tot.Seconds + 0.5),
		Memory: uint32(100*tot.MemSeconds/tot.Seconds + 0.5),
	}, nvml.SUCCESS
}

// GetEncoderUtilization implements nvml.Device: LLM serving does not use NVENC.
func (d *Device) GetEncoderUtilization() (uint32, uint32, nvml.Return) {
	return 0, 167000, nvml.SUCCESS
}

// GetDecoderUtilization implements nvml.Device: LLM serving does not use NVDEC.
func (d *Device) GetDecoderUtilization() (uint32, uint32, nvml.Return) {
	return 0, 167000, nvml.SUCCESS
}

func (d *Device) memoryUsed() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.engineMemory > 0 {
		return d.engineMemory
	}
	t := d.now().UnixNano()
	return d.weights + uint64(d.sched.At(t).KVAt(t)*float64(d.kvBudget))
}

// GetMemoryInfo implements nvml.Device. As with the real v1 call, memory the
// driver reserves counts as used.
func (d *Device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	total := d.model.GPU.MemoryMB * mib
	used := d.memoryUsed() + d.model.ReservedMiB*mib
	return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
}

// GetMemoryInfo_v2 implements nvml.Device.
func (d *Device) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	total := d.model.GPU.MemoryMB * mib
	reserved := d.model.ReservedMiB * mib
	used := d.memoryUsed()
	return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Reserved: reserved, Used: used, Free: total - used - reserved}, nvml.SUCCESS
}

// GetPowerUsage implements nvml.Device: milliwatts averaged over the last second.
func (d *Device) GetPowerUsage() (uint32, nvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tot, _ := d.window(sampleWindow)
	return uint32(1000 * tot.Joules / tot.Seconds), nvml.SUCCESS
}

// GetTotalEnergyConsumption implements nvml.Device: millijoules since driver
// load, the exact integral of the schedule's power up to the driver's last
// refresh.
func (d *Device) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.accumulate()
	j, _ := d.refreshed()
	return uint64(j * 1000), nvml.SUCCESS
}

// accumulate brings the cumulative counters up to now. A clock that steps
// back leaves them where they are: counters never decrease.
func (d *Device) accumulate() { d.accumulateTo(d.now().UnixNano()) }

// accumulateTo brings the cumulative counters up to t, the clock's now.
func (d *Device) accumulateTo(t int64) {
	if t <= d.accAt {
		return
	}
	d.acc.Add(d.work.Integrate(d.accAt, t))
	d.accAt = t
}

// restartCounters starts the cumulative counters again from zero at at
// (no later than now), as a GPU reset or a driver reload does, and empties
// the sample buffers: no sample is taken while the GPU is gone.
func (d *Device) restartCounters(at int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.accAt, d.acc, d.baseJ = at, Totals{}, 0
	d.restartAt = at
}

// GetEnforcedPowerLimit implements nvml.Device.
func (d *Device) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	return uint32(d.limitW * 1000), nvml.SUCCESS
}

// GetTemperature implements nvml.Device. An engine's GPU has the thermal
// model's temperature; the sequential schedule's die follows the last
// minute's mean power (a first-order stand-in for the heat sink's thermal
// mass): about 32 °C idle, about 78 °C at a sustained power limit.
func (d *Device) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	if sensor != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if seg := d.work.At(d.now().UnixNano()); seg.TempC > 0 {
		return uint32(float64(seg.TempC) + 0.5), nvml.SUCCESS
	}
	tot, _ := d.window(int64(time.Minute))
	load := (tot.Joules/tot.Seconds - d.model.IdlePowerW) / (d.model.PowerLimitW - d.model.IdlePowerW)
	return uint32(32 + 46*max(load, 0) + 0.5), nvml.SUCCESS
}

// GetClockInfo implements nvml.Device. SM and graphics clocks boost while
// kernels run and sag as power nears the limit; the memory clock is fixed.
func (d *Device) GetClockInfo(clock nvml.ClockType) (uint32, nvml.Return) {
	switch clock {
	case nvml.CLOCK_MEM:
		return d.model.MemClockMHz, nvml.SUCCESS
	case nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM:
	default:
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.smClock(d.work.At(d.now().UnixNano())), nvml.SUCCESS
}

func (d *Device) smClock(seg Segment) uint32 {
	if seg.ClockMHz > 0 {
		return seg.ClockMHz
	}
	if seg.Phase == PhaseIdle {
		return d.model.SMClockIdle
	}
	headroom := (seg.PowerW/d.model.PowerLimitW - 0.85) / 0.15 // 0 below 85% of the limit, 1 at it
	sag := 0.12 * min(max(headroom, 0), 1)
	return uint32(float64(d.model.SMClockMaxMHz) * (1 - sag))
}

// GetPerformanceState implements nvml.Device: P0 while requests ran in the
// last ten seconds, P1 when the server has been quiet longer.
func (d *Device) GetPerformanceState() (nvml.Pstates, nvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if tot, _ := d.window(int64(10 * time.Second)); tot.BusySeconds > 0 {
		return nvml.PSTATE_0, nvml.SUCCESS
	}
	return nvml.PSTATE_1, nvml.SUCCESS
}

// GetFanSpeed implements nvml.Device: SXM boards have no fan of their own,
// and NVML says so.
func (d *Device) GetFanSpeed() (uint32, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}
