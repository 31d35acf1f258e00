package bottleneck

import (
	"math"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opt sets one signal of Inputs; in builds Inputs from opts.
type opt func(*Inputs)

func in(opts ...opt) Inputs {
	var x Inputs
	for _, o := range opts {
		o(&x)
	}
	return x
}

func util(v float64) opt {
	return func(x *Inputs) { x.Utilization, x.HasUtilization = v, true }
}

func mc(v float64) opt {
	return func(x *Inputs) { x.MemoryController, x.HasMemoryController = v, true }
}

func sm(v float64) opt {
	return func(x *Inputs) { x.SMActivity, x.HasSMActivity = v, true }
}

func tensor(v float64) opt {
	return func(x *Inputs) { x.TensorActivity, x.HasTensorActivity = v, true }
}

func dram(v float64) opt {
	return func(x *Inputs) { x.DRAMActivity, x.HasDRAMActivity = v, true }
}

func used(v float64) opt {
	return func(x *Inputs) { x.MemoryUsedFraction, x.HasMemoryUsed = v, true }
}

func pcie(v float64) opt {
	return func(x *Inputs) { x.PCIeFraction, x.HasPCIe = v, true }
}

func nvlink(v float64) opt {
	return func(x *Inputs) { x.NVLinkFraction, x.HasNVLink = v, true }
}

func power(v float64) opt {
	return func(x *Inputs) { x.PowerThrottled, x.HasPowerThrottled = v, true }
}

func thermal(v float64) opt {
	return func(x *Inputs) { x.ThermalThrottled, x.HasThermalThrottled = v, true }
}

func reqs(n int) opt { return func(x *Inputs) { x.RequestsInFlight = n } }

// gpm sets the three GPM activities at once.
func gpm(s, t, d float64) opt {
	return func(x *Inputs) { sm(s)(x); tensor(t)(x); dram(d)(x) }
}

// unmeasured sets every value high but leaves every Has flag false.
func unmeasured(x *Inputs) {
	x.Utilization, x.MemoryController, x.SMActivity, x.TensorActivity, x.DRAMActivity = 1, 1, 1, 1, 1
	x.MemoryUsedFraction, x.PCIeFraction, x.NVLinkFraction, x.PowerThrottled, x.ThermalThrottled = 1, 1, 1, 1, 1
}

// The simulated workload's phases (internal/nvmlsim), at the corners of
// their ranges: the defaults must tell them apart.
var (
	decodeLow   = gpm(0.45, 0.25, 0.585) // fewest SMs, most tensor, least DRAM
	decodeHigh  = gpm(0.65, 0.12, 0.9)
	prefillLow  = gpm(0.85, 0.6, 0.4) // least tensor, most DRAM
	prefillHigh = gpm(0.95, 0.8, 0.25)
)

// classifyCase is one row of a Classify table.
type classifyCase struct {
	name string
	in   Inputs
	th   func(*Thresholds) // changes to the defaults, if any
	want Label
}

func runClassify(t *testing.T, tests []classifyCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := DefaultThresholds()
			if tt.th != nil {
				tt.th(&th)
				require.NoError(t, th.Validate())
			}
			assert.Equal(t, tt.want, Classify(tt.in, th))
		})
	}
}

func TestClassify(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []classifyCase{
		// Rule 1: no activity signal.
		{"no signals at all", in(), nil, Unknown},
		{"values without Has flags are not measurements", in(unmeasured, reqs(3)), nil, Unknown},
		{"memory, link and throttle signals alone say nothing", in(mc(0.9), dram(0.9), used(0.99), pcie(0.9), thermal(1), power(1)), nil, Unknown},
		{"NaN utilization is not measured", in(util(nan), mc(0.9)), nil, Unknown},
		{"infinite SM activity is not measured", in(sm(inf), tensor(0.9)), nil, Unknown},
		{"NaN utilization and SM activity", in(util(nan), sm(nan), reqs(1)), nil, Unknown},

		// Rule 2: idle and host_bound.
		{"idle: no kernel ran", in(util(0)), nil, Idle},
		{"host_bound: no kernel ran, requests in flight", in(util(0), reqs(2)), nil, HostBound},
		{"idle: utilization just below the bound", in(util(0.2999), mc(0.1)), nil, Idle},
		{"boundary: utilization exactly at the bound counts as working", in(util(0.3), mc(0.1), reqs(1)), nil, Unknown},
		{"idle: SM activity just below the bound", in(sm(0.2999), tensor(0), dram(0)), nil, Idle},
		{"boundary: SM activity exactly at the bound counts as working", in(gpm(0.3, 0, 0), reqs(1)), nil, Unknown},
		{"100% utilization hides an idle GPU; GPM does not", in(util(1), gpm(0.1, 0, 0.05)), nil, Idle},
		{"100% utilization, SMs starved, requests waiting", in(util(1), mc(0.2), gpm(0.1, 0.02, 0.05), reqs(8)), nil, HostBound},
		{"SM activity decides over (inconsistent) low utilization", in(util(0.1), prefillLow), nil, ComputeBound},
		{"negative request count is no request", in(util(0), reqs(-1)), nil, Idle},
		{"MIG: no utilization, GPM idle", in(sm(0.05), reqs(1)), nil, HostBound},
		{"SM activity's idle bound is busy_sm_activity", in(gpm(0.4, 0, 0)), func(th *Thresholds) { th.BusySMActivity = 0.5 }, Idle},
		{"idle before throttles: little work to slow", in(util(0.1), thermal(1), power(1)), nil, Idle},
		{"idle before memory capacity", in(sm(0.1), used(0.99), reqs(4)), nil, HostBound},
		{"saturated NVLink overturns idle: all-reduce on few SMs", in(util(1), gpm(0.15, 0, 0.2), nvlink(0.9), reqs(4)), nil, InterconnectBound},
		{"saturated PCIe overturns idle: loading weights", in(util(0.05), pcie(0.8)), nil, InterconnectBound},
		{"saturated PCIe with memory full: KV cache swapping", in(util(0.05), pcie(0.8), used(0.98), reqs(4)), nil, MemoryCapacity},
		{"saturated DRAM overturns idle", in(gpm(0.2, 0, 0.6)), nil, MemoryBound},
		{"busy memory controller does not overturn idle", in(util(0.1), mc(0.9), reqs(1)), nil, HostBound},
		{"link just below its bound does not overturn idle", in(sm(0.1), nvlink(0.6999), pcie(0.6999)), nil, Idle},
		{"unmeasured link does not overturn idle", in(sm(0.1), func(x *Inputs) { x.NVLinkFraction = 1 }), nil, Idle},
		{"NaN link does not overturn idle", in(sm(0.1), nvlink(nan)), nil, Idle},

		// Rules 3 and 4: throttles.
		{"thermal throttle", in(prefillHigh, thermal(0.8)), nil, ThermalThrottled},
		{"boundary: thermal share exactly at the bound", in(prefillHigh, thermal(0.5)), nil, ThermalThrottled},
		{"thermal share just below the bound", in(prefillHigh, thermal(0.4999)), nil, ComputeBound},
		{"power-capped prefill", in(prefillLow, power(0.9)), nil, PowerThrottled},
		{"boundary: power share exactly at the bound", in(decodeHigh, power(0.5)), nil, PowerThrottled},
		{"power share just below the bound", in(decodeHigh, power(0.4999)), nil, MemoryBound},
		{"tie: thermal before power", in(prefillHigh, thermal(1), power(1)), nil, ThermalThrottled},
		{"power when thermal is below its bound", in(prefillHigh, thermal(0.3), power(0.7)), nil, PowerThrottled},
		{"throttle before memory bound", in(decodeHigh, power(0.6)), nil, PowerThrottled},
		{"throttle before memory capacity and links", in(decodeHigh, used(0.99), nvlink(0.9), thermal(0.6)), nil, ThermalThrottled},
		{"throttle without GPM", in(util(0.99), mc(0.3), power(0.7)), nil, PowerThrottled},
		{"unmeasured throttles are not throttles", in(prefillHigh, func(x *Inputs) { x.ThermalThrottled, x.PowerThrottled = 1, 1 }), nil, ComputeBound},

		// Rule 5: memory capacity.
		{"memory full", in(decodeHigh, used(0.99)), nil, MemoryCapacity},
		{"boundary: memory used exactly at the bound", in(decodeHigh, used(0.97)), nil, MemoryCapacity},
		{"memory used just below the bound", in(decodeHigh, used(0.9699)), nil, MemoryBound},
		{"vLLM's preallocated 0.9 is not full", in(prefillHigh, used(0.9)), nil, ComputeBound},
		{"a lower configured bound catches it", in(prefillHigh, used(0.9)), func(th *Thresholds) { th.MemoryCapacityFraction = 0.9 }, MemoryCapacity},
		{"memory capacity before links", in(decodeHigh, used(0.98), pcie(0.9)), nil, MemoryCapacity},
		{"memory capacity without GPM", in(util(0.9), mc(0.7), used(0.98)), nil, MemoryCapacity},

		// Rule 6: interconnect.
		{"PCIe saturated", in(decodeHigh, pcie(0.85)), nil, InterconnectBound},
		{"boundary: PCIe exactly at the bound", in(decodeHigh, pcie(0.7)), nil, InterconnectBound},
		{"PCIe just below the bound", in(decodeHigh, pcie(0.6999)), nil, MemoryBound},
		{"NVLink saturated during prefill", in(prefillHigh, nvlink(0.95)), nil, InterconnectBound},
		{"boundary: NVLink exactly at the bound", in(prefillHigh, nvlink(0.7)), nil, InterconnectBound},
		{"either link: PCIe low, NVLink high", in(prefillHigh, pcie(0.1), nvlink(0.8)), nil, InterconnectBound},
		{"link before DRAM and tensor", in(gpm(0.9, 0.9, 0.9), nvlink(0.75)), nil, InterconnectBound},
		{"simulated all-reduce traffic is far below", in(prefillHigh, nvlink(0.13), pcie(0.03)), nil, ComputeBound},
		{"link without GPM", in(util(0.9), mc(0.8), pcie(0.9)), nil, InterconnectBound},

		// Rules 7 and 8 with GPM.
		{"simulated decode (low corner)", in(util(0.85), mc(0.65), decodeLow), nil, MemoryBound},
		{"simulated decode (high corner)", in(util(0.97), mc(0.9), decodeHigh), nil, MemoryBound},
		{"simulated prefill (low corner)", in(util(0.97), mc(0.4), prefillLow), nil, ComputeBound},
		{"simulated prefill (high corner)", in(util(1), mc(0.25), prefillHigh), nil, ComputeBound},
		{"simulated idle gap", in(util(0), mc(0), gpm(0, 0, 0)), nil, Idle},
		{"boundary: DRAM exactly at the bound", in(gpm(0.6, 0.2, 0.5)), nil, MemoryBound},
		{"DRAM just below the bound: nearer its limit than tensor (rule 10)", in(gpm(0.6, 0.2, 0.4999)), nil, MemoryBound},
		{"boundary: tensor exactly at the bound", in(gpm(0.7, 0.5, 0.3)), nil, ComputeBound},
		{"tensor just below the bound: nearer its limit than DRAM (rule 10)", in(gpm(0.7, 0.4999, 0.3)), nil, ComputeBound},
		{"tie: DRAM and tensor saturated, each at what it reaches as the limit: memory", in(gpm(0.9, 0.7, 0.85)), nil, MemoryBound},
		{"DRAM and tensor equal and saturated: tensor is nearer its limit", in(gpm(0.9, 0.7, 0.7)), nil, ComputeBound},
		{"both saturated, tensor closer to peak", in(gpm(0.9, 0.7, 0.6)), nil, ComputeBound},
		{"both saturated, DRAM closer to peak", in(gpm(0.9, 0.6, 0.8)), nil, MemoryBound},
		{"DRAM saturated, tensor below its bound but nearer its limit: busy SMs (rule 9)", in(gpm(0.9, 0.65, 0.55)), func(th *Thresholds) { th.ComputeTensor = 0.7 }, ComputeBound},
		{"DRAM saturated, tensor below its bound but nearer its limit (rule 10)", in(gpm(0.7, 0.45, 0.52)), nil, ComputeBound},
		{"DRAM saturated and nearer its limit than tensor", in(gpm(0.7, 0.4, 0.52)), nil, MemoryBound},
		{"the limits are configured", in(gpm(0.7, 0.45, 0.52)), func(th *Thresholds) { th.TensorAtLimit = 1 }, MemoryBound},
		{"DRAM saturated, tensor unmeasured", in(sm(0.7), dram(0.8)), nil, MemoryBound},
		{"tensor saturated, memory unmeasured", in(sm(0.9), tensor(0.7)), nil, ComputeBound},
		{"DRAM decides over the memory controller (DRAM low, tensor lower)", in(util(1), mc(0.9), gpm(0.6, 0.2, 0.3)), nil, MemoryBound},
		{"DRAM decides over the memory controller (both far from their bounds)", in(util(1), mc(0.9), gpm(0.6, 0.1, 0.2)), nil, Unknown},
		{"DRAM decides over the memory controller (DRAM high)", in(util(1), mc(0.1), gpm(0.6, 0.2, 0.7)), nil, MemoryBound},
		{"memory controller stands in for unmeasured DRAM", in(sm(0.6), tensor(0.2), mc(0.7)), nil, MemoryBound},
		{"NaN DRAM falls back to the memory controller", in(sm(0.6), tensor(0.2), dram(nan), mc(0.7)), nil, MemoryBound},
		{"NaN SM activity falls back to utilization", in(util(0.1), sm(nan), reqs(1)), nil, HostBound},
		{"memory controller vs saturated tensor: tensor closer to peak", in(sm(0.9), tensor(0.8), mc(0.7)), nil, ComputeBound},
		{"memory controller vs saturated tensor: an exact tie goes to memory", in(sm(0.9), tensor(0.7), mc(0.7)), nil, MemoryBound},

		// Rule 9: busy SMs, memory measured.
		{"FP32-heavy: SMs busy, no tensor, DRAM low", in(gpm(0.9, 0.05, 0.2)), nil, ComputeBound},
		{"boundary: SM activity exactly at the compute bound", in(gpm(0.8, 0.1, 0.2)), nil, ComputeBound},
		{"SM activity just below the compute bound", in(gpm(0.7999, 0.1, 0.2)), nil, Unknown},
		{"busy SMs but memory unmeasured: cannot rule out memory bound", in(sm(0.9), tensor(0.1)), nil, Unknown},
		{"busy SMs, only SM activity measured", in(sm(0.95)), nil, Unknown},
		{"busy SMs, memory via the memory controller", in(sm(0.9), mc(0.3)), nil, ComputeBound},

		// Rule 10: busy, nothing saturated: the unit nearer its limit, once one is half-way to its bound.
		{"busy, DRAM nearer its limit than tensor", in(util(0.9), mc(0.4), gpm(0.6, 0.3, 0.4), reqs(5)), nil, MemoryBound},
		{"busy, tensor nearer its limit than DRAM", in(gpm(0.6, 0.35, 0.3)), nil, ComputeBound},
		{"busy, a tie goes to memory", in(gpm(0.6, 0.3, 0.3)), func(th *Thresholds) { th.TensorAtLimit, th.DRAMAtLimit = 0.8, 0.8 }, MemoryBound},
		{"busy, DRAM reads higher, tensor is nearer its limit", in(gpm(0.6, 0.4, 0.45)), nil, ComputeBound},
		{"boundary: DRAM exactly half-way", in(gpm(0.6, 0.1, 0.25)), nil, MemoryBound},
		{"busy, both under half-way", in(gpm(0.6, 0.24, 0.2499)), nil, Unknown},
		{"half-way is of the configured bounds", in(gpm(0.6, 0.3, 0.2)), func(th *Thresholds) { th.ComputeTensor = 0.8 }, Unknown},

		// Rule 11: busy, nothing says why.
		{"busy, no GPM, nothing near its limit", in(util(0.7), mc(0.4), reqs(5)), nil, Unknown},

		// Fallback without GPM (pre-Hopper): utilization and memory controller.
		{"no GPM: simulated decode", in(util(0.85), mc(0.65)), nil, MemoryBound},
		{"no GPM: simulated prefill", in(util(0.97), mc(0.25)), nil, ComputeBound},
		{"no GPM: boundary: memory controller exactly at the bound", in(util(0.9), mc(0.6)), nil, MemoryBound},
		{"no GPM: memory controller just below the bound", in(util(0.9), mc(0.5999)), nil, ComputeBound},
		{"no GPM: boundary: utilization exactly at the compute bound", in(util(0.8), mc(0.3)), nil, ComputeBound},
		{"no GPM: utilization just below the compute bound", in(util(0.7999), mc(0.3)), nil, Unknown},
		{"no GPM: busy but memory controller unmeasured", in(util(0.95)), nil, Unknown},
		{"no GPM: busy, memory controller NaN", in(util(0.95), mc(nan)), nil, Unknown},
		{"no GPM: memory bound even at moderate utilization", in(util(0.5), mc(0.7)), nil, MemoryBound},
		{"no GPM: moderately busy, nothing saturated", in(util(0.6), mc(0.3), reqs(2)), nil, Unknown},
		{"no GPM: idle", in(util(0.1), mc(0.05)), nil, Idle},
		{"no GPM: host_bound", in(util(0.2), mc(0.1), reqs(1)), nil, HostBound},
		{"partial GPM: tensor without SM activity", in(util(0.9), tensor(0.7), mc(0.3)), nil, ComputeBound},
	}
	runClassify(t, tests)
}

func TestClassifyRequestsOnlyMatterWhenIdle(t *testing.T) {
	th := DefaultThresholds()
	for _, x := range []Inputs{
		in(prefillHigh), in(decodeLow), in(decodeHigh, power(1)), in(prefillLow, used(0.99)),
		in(prefillLow, nvlink(0.9)), in(gpm(0.6, 0.3, 0.3)), in(util(0.9), mc(0.7)),
	} {
		want := Classify(x, th)
		for _, n := range []int{1, 7, 1 << 20} {
			x.RequestsInFlight = n
			assert.Equal(t, want, Classify(x, th), "requests %d on %+v", n, x)
		}
	}
}

func TestDefaultThresholds(t *testing.T) {
	th := DefaultThresholds()
	require.NoError(t, th.Validate())
	// The package documentation states these numbers and argues for each;
	// changing one means changing the documentation too.
	assert.Equal(t, Thresholds{
		IdleUtilization:        0.3,
		BusySMActivity:         0.3,
		ComputeTensor:          0.5,
		ComputeSM:              0.8,
		MemoryDRAM:             0.5,
		MemoryControllerBusy:   0.6,
		InterconnectFraction:   0.7,
		MemoryCapacityFraction: 0.97,
		ThrottledShare:         0.5,
		TensorAtLimit:          0.7,
		DRAMAtLimit:            0.85,
		PowerSwing:             0.4,
	}, th)
}

// detail sets rule 0's power readings: the interval's mean, its
// readings' (activity and throttle alike), the limit (W) and how many
// intervals the throttle readings span.
func detail(p, r, l, span float64) opt {
	return func(x *Inputs) {
		x.Power, x.ActivityReadingPower, x.ThrottleReadingPower, x.PowerLimit, x.ThrottleSpan, x.HasPowerDetail = p, r, r, l, span, true
	}
}

// throttle sets rule 0's power readings for the throttle placement alone:
// the interval's mean power p (its activity readings' too, so no activity
// moves), its throttle readings' r, the limit l (W) and how many intervals
// the throttle readings span.
func throttle(p, r, l, span float64) opt {
	return func(x *Inputs) {
		x.Power, x.ActivityReadingPower, x.ThrottleReadingPower, x.PowerLimit, x.ThrottleSpan, x.HasPowerDetail = p, p, r, l, span, true
	}
}

func TestClassifyPlacesIntervalsByPower(t *testing.T) {
	// A 250 ms GPM tick mixing a prompt's chunk into decodes reads memory
	// bound on average (tensor 0.2, DRAM 0.4).
	mixed := gpm(0.7, 0.2, 0.4)
	tests := []classifyCase{
		{"the tick alone", in(mixed), nil, MemoryBound},
		{"an interval drawing the tick's power", in(mixed, detail(450, 450, 700, 2.5)), nil, MemoryBound},
		// x = 60 / (0.4 × 700) = 0.214: tensor 0.35, DRAM 0.22.
		{"an interval drawing 60 W more: the chunk ran in it", in(mixed, detail(510, 450, 700, 2.5)), nil, ComputeBound},
		{"an interval drawing 60 W less: decodes only", in(gpm(0.7, 0.3, 0.3), detail(390, 450, 700, 2.5)), nil, MemoryBound},
		{"the same interval without a finer power reading", in(gpm(0.7, 0.3, 0.3)), nil, ComputeBound},
		{"30 W more on a 700 W board", in(mixed, detail(480, 450, 700, 2.5)), nil, ComputeBound},
		{"the swing is of the limit: on a 1,400 W board 30 W moves half as far", in(mixed, detail(480, 450, 1400, 2.5)), nil, MemoryBound},
		{"power_swing 0 turns it off", in(mixed, detail(510, 450, 700, 2.5)), func(th *Thresholds) { th.PowerSwing = 0 }, MemoryBound},
		{"a wider swing moves less", in(mixed, detail(510, 450, 700, 2.5)), func(th *Thresholds) { th.PowerSwing = 1 }, MemoryBound},
		{"activity stays a share: no negative DRAM", in(gpm(0.7, 0.6, 0.1), detail(700, 300, 700, 2.5)), nil, ComputeBound},
		{"without DRAM activity nothing moves", in(sm(0.7), tensor(0.2), mc(0.7), detail(700, 300, 700, 2.5)), nil, MemoryBound},
		{"an unknown limit moves nothing", in(mixed, detail(510, 450, 0, 2.5)), nil, MemoryBound},
		{"NaN power moves nothing", in(mixed, detail(math.NaN(), 450, 700, 2.5)), nil, MemoryBound},
		{"an infinite reading moves nothing", in(mixed, detail(510, math.Inf(1), 700, 2.5)), nil, MemoryBound},
		{"an infinite reading moves nothing towards DRAM either", in(gpm(0.7, 0.3, 0.3), detail(510, math.Inf(1), 700, 2.5)), nil, ComputeBound},

		// Throttled 40% of a 250 ms tick at 300 W mean under a 400 W cap:
		// it ran free at (300 − 160) / 0.6 = 233 W. (Activity readings at
		// the interval's own power: no activity moves.)
		{"the tick's throttle share alone", in(decodeHigh, power(0.4)), nil, MemoryBound},
		{"an interval at the cap was the throttled part", in(decodeHigh, power(0.4), throttle(400, 300, 400, 2.5)), nil, PowerThrottled},
		{"an interval at the free power was not", in(decodeHigh, power(0.4), throttle(233, 300, 400, 2.5)), nil, MemoryBound},
		// (350 − 233) / 167 = 0.7.
		{"an interval between: its share of the way to the cap", in(decodeHigh, power(0.4), throttle(350, 300, 400, 2.5)), nil, PowerThrottled},
		{"no more than all the readings' throttled time: 0.15 × 2.5", in(decodeHigh, power(0.15), throttle(400, 265, 400, 2.5)), nil, MemoryBound},
		{"never throttled where the readings say it never was", in(decodeHigh, power(0), throttle(400, 233, 400, 2.5)), nil, MemoryBound},
		{"throttled throughout where the readings say so", in(decodeHigh, power(1), throttle(200, 400, 400, 2.5)), nil, PowerThrottled},
		{"no less than the readings' free time leaves: 1 − 0.1 × 2.5", in(decodeHigh, power(0.9), throttle(200, 380, 400, 2.5)), nil, PowerThrottled},
		{"a reading as long as the interval bounds it to its own share", in(decodeHigh, power(0.4), throttle(400, 300, 400, 1)), nil, MemoryBound},
		{"readings at or above the limit say nothing of the free power", in(decodeHigh, power(0.4), throttle(420, 410, 400, 2.5)), nil, MemoryBound},
		// 380 W mean: free at 367 W, 33 W under the cap, less than half
		// the swing (80 W): the H200's GEMMs, throttled most of the time,
		// wandered that much either way.
		{"a board running free near its cap says nothing", in(decodeHigh, power(0.4), throttle(400, 380, 400, 2.5)), nil, MemoryBound},
		// 328 W mean: free at 280 W, 120 W under the cap: more than half
		// the swing, though less than all of it.
		{"a board running free more than half the swing under its cap", in(decodeHigh, power(0.4), throttle(400, 328, 400, 2.5)), nil, PowerThrottled},
		// Throttled 60% at 333 W mean: free at 232.5 W.
		{"readings shorter than the interval bound it to their own share", in(decodeHigh, power(0.6), throttle(233, 333, 400, 0.5)), nil, PowerThrottled},
		// A power cap holds the mean a little under the limit.
		{"throttled throughout at a mean under the cap", in(decodeHigh, power(1), throttle(200, 390, 400, 2.5)), nil, PowerThrottled},
		{"power_swing 0 turns the throttle placement off too", in(decodeHigh, power(0.4), throttle(400, 300, 400, 2.5)), func(th *Thresholds) { th.PowerSwing = 0 }, MemoryBound},
		{"the activity readings' power is their own", in(mixed, detail(450, 450, 700, 2.5), func(x *Inputs) { x.ActivityReadingPower = 390 }), nil, ComputeBound},
	}
	runClassify(t, tests)
}

// Rule 0 moves the readings as the package documentation has it: tensor
// activity by x × TensorAtLimit, DRAM activity by −x × DRAMAtLimit, x the
// power above the activity readings' over PowerSwing × PowerLimit, each kept
// in [0, 1]; the throttled share to (P − F) / (L − F) within the readings'
// bounds.
func TestPlaceByPowerMovesTheReadings(t *testing.T) {
	th := DefaultThresholds()
	for _, tc := range []struct {
		name                   string
		in                     Inputs
		tensor, dram, throttle float64
	}{
		// x = 27 / 280.
		{"27 W above the readings", in(gpm(0.7, 0.2, 0.4), detail(477, 450, 700, 2.5)), 0.2 + 27.0/280*0.7, 0.4 - 27.0/280*0.85, 0},
		{"27 W below", in(gpm(0.7, 0.2, 0.4), detail(423, 450, 700, 2.5)), 0.2 - 27.0/280*0.7, 0.4 + 27.0/280*0.85, 0},
		{"kept in [0, 1] going up", in(gpm(0.7, 0.2, 0.4), detail(700, 300, 700, 2.5)), 1, 0, 0},
		{"kept in [0, 1] going down", in(gpm(0.7, 0.2, 0.4), detail(100, 500, 700, 2.5)), 0, 1, 0},
		// Free at (300 − 160) / 0.6 = 233 W: (350 − 233) / 167 = 0.7.
		{"throttled share", in(gpm(0.7, 0.2, 0.4), power(0.4), throttle(350, 300, 400, 2.5)), 0.2, 0.4, 0.7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := tc.in
			placeByPower(&x, th)
			assert.InDelta(t, tc.tensor, x.TensorActivity, 1e-9, "tensor")
			assert.InDelta(t, tc.dram, x.DRAMActivity, 1e-9, "DRAM")
			assert.InDelta(t, tc.throttle, x.PowerThrottled, 1e-9, "throttled")
		})
	}
}

func TestValidatePowerSwing(t *testing.T) {
	for _, good := range []float64{0, 0.4, 1} {
		th := DefaultThresholds()
		th.PowerSwing = good
		assert.NoError(t, th.Validate(), "%v", good)
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		th := DefaultThresholds()
		th.PowerSwing = bad
		assert.ErrorContains(t, th.Validate(), "power_swing: ", "%v", bad)
	}
}

// thresholdFields names every field as Validate must, with a setter.
var thresholdFields = []struct {
	name string
	set  func(*Thresholds, float64)
}{
	{"idle_utilization", func(t *Thresholds, v float64) { t.IdleUtilization = v }},
	{"busy_sm_activity", func(t *Thresholds, v float64) { t.BusySMActivity = v }},
	{"compute_tensor", func(t *Thresholds, v float64) { t.ComputeTensor = v }},
	{"compute_sm", func(t *Thresholds, v float64) { t.ComputeSM = v }},
	{"memory_dram", func(t *Thresholds, v float64) { t.MemoryDRAM = v }},
	{"memory_controller_busy", func(t *Thresholds, v float64) { t.MemoryControllerBusy = v }},
	{"interconnect_fraction", func(t *Thresholds, v float64) { t.InterconnectFraction = v }},
	{"memory_capacity_fraction", func(t *Thresholds, v float64) { t.MemoryCapacityFraction = v }},
	{"throttled_share", func(t *Thresholds, v float64) { t.ThrottledShare = v }},
	{"tensor_at_limit", func(t *Thresholds, v float64) { t.TensorAtLimit = v }},
	{"dram_at_limit", func(t *Thresholds, v float64) { t.DRAMAtLimit = v }},
}

func TestValidate(t *testing.T) {
	for _, f := range thresholdFields {
		t.Run(f.name, func(t *testing.T) {
			for _, bad := range []float64{0, -0.1, 1.0001, 30, math.NaN(), math.Inf(1), math.Inf(-1)} {
				th := DefaultThresholds()
				f.set(&th, bad)
				err := th.Validate()
				require.Error(t, err, "%s = %v", f.name, bad)
				assert.True(t, strings.HasPrefix(err.Error(), f.name+": "), "%q names %s", err, f.name)
				for _, other := range thresholdFields {
					if other.name != f.name {
						assert.NotContains(t, err.Error(), other.name)
					}
				}
			}
			for _, good := range []float64{1, 1e-9, 0.5} {
				th := DefaultThresholds()
				f.set(&th, good)
				assert.NoError(t, th.Validate(), "%s = %v", f.name, good)
			}
		})
	}
	t.Run("every bad field is reported", func(t *testing.T) {
		err := Thresholds{}.Validate()
		require.Error(t, err)
		for _, f := range thresholdFields {
			assert.Contains(t, err.Error(), f.name+": 0 must be a share in (0, 1]")
		}
	})
	t.Run("a percentage is explained", func(t *testing.T) {
		th := DefaultThresholds()
		th.ThrottledShare = 50
		assert.EqualError(t, th.Validate(), "throttled_share: 50 must be a share in (0, 1] (0.5 means 50%)")
	})
}

func TestLabels(t *testing.T) {
	assert.Equal(t, []Label{
		ThermalThrottled, PowerThrottled, MemoryCapacity, InterconnectBound,
		MemoryBound, ComputeBound, HostBound, Idle, Unknown,
	}, Labels)
	values := map[Label]string{
		Idle: "idle", ComputeBound: "compute_bound", MemoryBound: "memory_bound",
		InterconnectBound: "interconnect_bound", PowerThrottled: "power_throttled",
		ThermalThrottled: "thermal_throttled", MemoryCapacity: "memory_capacity",
		HostBound: "host_bound", Unknown: "unknown",
	}
	assert.Len(t, Labels, len(values))
	for l, s := range values {
		assert.Equal(t, s, string(l))
		assert.Contains(t, Labels, l)
	}
	// The package documentation explains every label.
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	for _, l := range Labels {
		assert.Contains(t, string(doc), "//   - "+string(l)+":", "doc.go explains %s", l)
	}
}

func TestLabelsMutationDoesNotAffectDominant(t *testing.T) {
	saved := slices.Clone(Labels)
	t.Cleanup(func() { copy(Labels, saved) })
	slices.Reverse(Labels)
	assert.Equal(t, ThermalThrottled, Dominant(map[Label]float64{Unknown: 1, ThermalThrottled: 1}))
}

func TestDominant(t *testing.T) {
	tests := []struct {
		name string
		time map[Label]float64
		want Label
	}{
		{"nil map", nil, Unknown},
		{"empty map", map[Label]float64{}, Unknown},
		{"all zero", map[Label]float64{Idle: 0, ComputeBound: 0, MemoryBound: 0}, Unknown},
		{"only negative, NaN", map[Label]float64{Idle: -1, ComputeBound: math.NaN()}, Unknown},
		{"one label", map[Label]float64{MemoryBound: 0.1}, MemoryBound},
		{"most time wins", map[Label]float64{ComputeBound: 3, MemoryBound: 5, Idle: 4.9}, MemoryBound},
		{"most time wins over tie order", map[Label]float64{ThermalThrottled: 1, Unknown: 1.5}, Unknown},
		{"unknown alone", map[Label]float64{Unknown: 2}, Unknown},
		{"NaN ignored beside a real time", map[Label]float64{ThermalThrottled: math.NaN(), Idle: 1}, Idle},
		{"negative ignored", map[Label]float64{ThermalThrottled: -5, Idle: 0.5}, Idle},
		{"+Inf wins", map[Label]float64{Idle: math.Inf(1), ComputeBound: 1e300}, Idle},
		{"labels outside Labels ignored", map[Label]float64{"gpu_on_fire": 10, Idle: 1}, Idle},
		{"only labels outside Labels", map[Label]float64{"": 10, "Idle": 3}, Unknown},
		{"tie: thermal before power", map[Label]float64{PowerThrottled: 2, ThermalThrottled: 2}, ThermalThrottled},
		{"tie: a throttle explains more than compute bound", map[Label]float64{ComputeBound: 2, PowerThrottled: 2}, PowerThrottled},
		{"tie: capacity before links", map[Label]float64{InterconnectBound: 1, MemoryCapacity: 1}, MemoryCapacity},
		{"tie: links before DRAM", map[Label]float64{MemoryBound: 1, InterconnectBound: 1}, InterconnectBound},
		{"tie: memory before compute", map[Label]float64{ComputeBound: 1, MemoryBound: 1}, MemoryBound},
		{"tie: a GPU limit before starvation", map[Label]float64{HostBound: 1, ComputeBound: 1}, ComputeBound},
		{"tie: host_bound before idle", map[Label]float64{Idle: 1, HostBound: 1}, HostBound},
		{"tie: anything before unknown", map[Label]float64{Unknown: 1, Idle: 1}, Idle},
		{"tie below a larger time", map[Label]float64{ThermalThrottled: 1, PowerThrottled: 1, Idle: 2}, Idle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Dominant(tt.time))
		})
	}
	t.Run("every pair ties to the earlier label", func(t *testing.T) {
		for i, a := range Labels {
			for _, b := range Labels[i+1:] {
				assert.Equal(t, a, Dominant(map[Label]float64{a: 7, b: 7}), "%s vs %s", a, b)
			}
		}
	})
	t.Run("all tied: the first label", func(t *testing.T) {
		m := map[Label]float64{}
		for _, l := range Labels {
			m[l] = 1
		}
		assert.Equal(t, Labels[0], Dominant(m))
	})
}

// randomValue returns a signal value: mostly a share, sometimes a bound
// exactly, sometimes garbage.
func randomValue(r *rand.Rand, th Thresholds) float64 {
	switch r.Intn(20) {
	case 0:
		return math.NaN()
	case 1:
		return math.Inf(1 - 2*r.Intn(2))
	case 2:
		return -r.Float64()
	case 3:
		return 1 + r.Float64()
	case 4, 5:
		bounds := []float64{0, 1, th.IdleUtilization, th.BusySMActivity, th.ComputeTensor, th.ComputeSM,
			th.MemoryDRAM, th.MemoryControllerBusy, th.InterconnectFraction, th.MemoryCapacityFraction, th.ThrottledShare,
			th.TensorAtLimit, th.DRAMAtLimit}
		return bounds[r.Intn(len(bounds))]
	default:
		return r.Float64()
	}
}

func randomThresholds(r *rand.Rand) Thresholds {
	th := DefaultThresholds()
	switch r.Intn(4) {
	case 0: // defaults
	case 1, 2: // valid, random
		for _, f := range thresholdFields {
			f.set(&th, 1-r.Float64()) // (0, 1]
		}
	default: // anything, invalid included
		for _, f := range thresholdFields {
			f.set(&th, randomValue(r, th))
		}
	}
	return th
}

// signals lists each signal's value and Has flag, to vary them generically.
func signals(x *Inputs) []struct {
	v   *float64
	has *bool
} {
	return []struct {
		v   *float64
		has *bool
	}{
		{&x.Utilization, &x.HasUtilization},
		{&x.MemoryController, &x.HasMemoryController},
		{&x.SMActivity, &x.HasSMActivity},
		{&x.TensorActivity, &x.HasTensorActivity},
		{&x.DRAMActivity, &x.HasDRAMActivity},
		{&x.MemoryUsedFraction, &x.HasMemoryUsed},
		{&x.PCIeFraction, &x.HasPCIe},
		{&x.NVLinkFraction, &x.HasNVLink},
		{&x.PowerThrottled, &x.HasPowerThrottled},
		{&x.ThermalThrottled, &x.HasThermalThrottled},
	}
}

// TestClassifyProperties checks, on 100,000 random intervals with a fixed
// seed, that Classify never panics, always returns a member of Labels, is
// deterministic, never reads the value of an unmeasured signal, treats a
// NaN value like an unmeasured one, and returns Unknown without an
// activity signal.
func TestClassifyProperties(t *testing.T) {
	r := rand.New(rand.NewSource(20240601))
	for i := range 100_000 {
		th := randomThresholds(r)
		var x Inputs
		for _, s := range signals(&x) {
			*s.v = randomValue(r, th)
			*s.has = r.Intn(3) != 0
		}
		x.RequestsInFlight = r.Intn(5) - 1

		got := Classify(x, th)
		require.Contains(t, Labels, got, "case %d: %+v %+v", i, x, th)
		require.Equal(t, got, Classify(x, th), "case %d: not deterministic", i)

		// An unmeasured signal's value is never read.
		y := x
		for _, s := range signals(&y) {
			if !*s.has {
				*s.v = randomValue(r, th)
			}
		}
		require.Equal(t, got, Classify(y, th), "case %d: an unmeasured value changed the label: %+v vs %+v", i, x, y)

		// A NaN measurement is no measurement.
		z, w := x, x
		k := r.Intn(len(signals(&z)))
		zs, ws := signals(&z)[k], signals(&w)[k]
		*zs.v, *zs.has = math.NaN(), true
		*ws.has = false
		require.Equal(t, Classify(w, th), Classify(z, th), "case %d: NaN in signal %d is not like unmeasured", i, k)

		if !(x.HasUtilization && !math.IsNaN(x.Utilization) && !math.IsInf(x.Utilization, 0)) &&
			!(x.HasSMActivity && !math.IsNaN(x.SMActivity) && !math.IsInf(x.SMActivity, 0)) {
			require.Equal(t, Unknown, got, "case %d: no activity signal", i)
		}
	}
}

// TestDominantProperties checks on random maps that Dominant returns a
// member of Labels whose time is the largest.
func TestDominantProperties(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for i := range 10_000 {
		m := map[Label]float64{}
		for _, l := range Labels {
			if r.Intn(2) == 0 {
				m[l] = float64(r.Intn(4)) // small integers: many ties
			}
		}
		got := Dominant(m)
		require.Contains(t, Labels, got)
		most := 0.0
		for _, v := range m {
			most = max(most, v)
		}
		if most == 0 {
			require.Equal(t, Unknown, got, "case %d: %v", i, m)
			continue
		}
		require.Equal(t, most, m[got], "case %d: %v", i, m)
		for _, l := range Labels[:slices.Index(Labels, got)] {
			require.Less(t, m[l], most, "case %d: earlier %s ties %s: %v", i, l, got, m)
		}
	}
}

func TestTimesOf(t *testing.T) {
	var tm Times
	tm.Add(MemoryBound, 2)
	tm.Add(HostBound, 0.5)
	assert.Equal(t, 2.0, tm.Of(MemoryBound))
	assert.Equal(t, 0.5, tm.Of(HostBound))
	assert.Zero(t, tm.Of(Idle))
	assert.Zero(t, tm.Of("nonsense"))
}

func TestTimesShare(t *testing.T) {
	id := func(l Label) ID { return ID(Index(l)) }
	for _, tc := range []struct {
		name  string
		times map[Label]float64
		label Label
		want  float64
	}{
		{"alone", map[Label]float64{MemoryBound: 3}, MemoryBound, 1},
		{"the dominant of two", map[Label]float64{MemoryBound: 3, ComputeBound: 1}, MemoryBound, 0.75},
		{"the other", map[Label]float64{MemoryBound: 3, ComputeBound: 1}, ComputeBound, 0.25},
		{"idle counts as time", map[Label]float64{HostBound: 1, Idle: 1}, HostBound, 0.5},
		{"a label without time", map[Label]float64{MemoryBound: 3}, Idle, 0},
		{"no time at all", nil, Unknown, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tm Times
			for l, d := range tc.times {
				tm.Add(l, d)
			}
			assert.InDelta(t, tc.want, tm.Share(id(tc.label)), 1e-12)
		})
	}
	var odd Times
	odd[id(MemoryBound)], odd[id(ComputeBound)] = 1, math.NaN()
	assert.Equal(t, 1.0, odd.Share(id(MemoryBound)), "NaN adds no time")
	assert.Zero(t, odd.Share(id(ComputeBound)))
}

func TestIDNamesItsLabel(t *testing.T) {
	for i, l := range Labels {
		assert.Equal(t, l, ID(i).Label())
		var tm Times
		tm.Add(l, 1)
		assert.Equal(t, ID(i), tm.DominantID())
	}
	var none Times
	assert.Equal(t, Unknown, none.DominantID().Label())
}
