package infersim

// Hardware is what the cost, power and thermal models need of a GPU. The
// simulated NVML fills it from its product table (nvmlsim.Model.Hardware).
type Hardware struct {
	Name        string
	MemoryBytes float64
	// Dense BF16 tensor throughput, FLOP/s; FP8 runs at twice this.
	PeakFLOPS float64
	// HBM bandwidth, bytes/s.
	HBMBytesPerSecond float64
	// NVLink bandwidth per GPU, each direction, bytes/s.
	NVLinkBytesPerSecond float64
	PowerLimitW, IdleW   float64
	SMClockMaxMHz        uint32
	SMClockIdleMHz       uint32
}

// Efficiencies of real kernels against the peaks: the best a large GEMM
// reaches of peak tensor throughput, a streaming kernel of peak HBM
// bandwidth, and NCCL's all-reduce of NVLink bandwidth. Typical of
// published vLLM and NCCL measurements on Hopper.
const (
	computeEfficiency = 0.7
	memoryEfficiency  = 0.85
	linkEfficiency    = 0.8
	// allReduceLatency is the fixed cost of one all-reduce across a
	// tensor-parallel group.
	allReduceLatency = 8e-6
	// stepOverhead is the launch and synchronisation cost of one step on
	// the GPU, seconds (CUDA graphs keep it small).
	stepOverhead = 0.4e-3
)

// Thermal model: the die approaches ambient + thermalResistance × power
// with time constant thermalTau (heat sink and coolant mass: minutes), and
// the driver slows the clocks above slowdownC.
const (
	ambientC          = 30.0
	thermalResistance = 0.07 // °C/W: 700 W settles at 79 °C
	thermalTau        = 90.0 // seconds
	slowdownC         = 87.0 // H100/H200 software thermal slowdown
	slowdownPerC      = 0.04 // clock fraction lost per degree above it
	minClockFraction  = 0.5  // the clocks never drop below half
	powerExponent     = 2.5  // dynamic compute power ∝ clock^2.5 (voltage scales with clock)
	throttleThreshold = 0.97 // a step whose clock is below this share of max counts as throttled
)
