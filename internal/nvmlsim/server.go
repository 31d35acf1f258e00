package nvmlsim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuviz/gpuviz/internal/infersim"
)

// MaxGPUs bounds the size of a simulated server.
const MaxGPUs = 64

// Server is a simulated NVIDIA server: go-nvml's DGX mock server whose
// devices are this package's Devices.
type Server struct {
	*server.Server
	devices []*Device
	symbols map[string]bool
	node    *infersim.Node // nil under the sequential schedule
	faults  *faultState    // nil without faults (WithFaults)
}

var (
	_ nvml.Interface         = (*Server)(nil)
	_ nvml.ExtendedInterface = (*Server)(nil)
)

// symbols are the optional NVML entry points the simulation implements;
// LookupSymbol reports the rest missing, as an older driver would, so that a
// reader never calls something the simulation would have to panic on.
var symbols = []string{
	"nvmlDeviceGetCurrentClocksEventReasons",
	"nvmlDeviceGetMemoryInfo_v2",
	"nvmlDeviceGetMinorNumber",
	"nvmlDeviceGetTotalEnergyConsumption",
	"nvmlGpmMetricsGet",
	"nvmlGpmMigSampleGet",
	"nvmlGpmQueryDeviceSupport",
	"nvmlGpmSampleAlloc",
	"nvmlGpmSampleFree",
	"nvmlGpmSampleGet",
}

// Option configures a simulated server.
type Option func(*options)

type options struct {
	mig      bool
	scenario string
	script   []Segment
	faults   []Fault
}

// WithMIG puts every GPU in MIG mode, split into two 3-slice GPU instances.
func WithMIG() Option { return func(o *options) { o.mig = true } }

// WithScript makes every GPU follow segs instead of a scenario: activity
// known to the nanosecond, for tests that look for it in what is read (so
// its GPM samples describe the moment they are taken, without the driver's
// lag).
// segs must be in time order and contiguous, and cover every moment the
// GPUs are read (the last segment stands for any time after it).
func WithScript(segs []Segment) Option { return func(o *options) { o.script = segs } }

// ScenarioSequential is the one-request-at-a-time schedule (see Schedule):
// what New runs unless WithScenario names a batching scenario.
const ScenarioSequential = "sequential"

// DefaultScenario is the batching scenario a simulated server runs by
// default in the receiver's configuration.
const DefaultScenario = infersim.DefaultScenario

// WithScenario makes the GPUs serve the named workload: a batching
// scenario of internal/infersim, or ScenarioSequential.
func WithScenario(name string) Option { return func(o *options) { o.scenario = name } }

// Scenarios lists the names WithScenario accepts, sorted.
func Scenarios() []string {
	names := append(infersim.Scenarios(), ScenarioSequential)
	slices.Sort(names)
	return names
}

// NewNode returns the batching engines a simulated server of count GPUs of
// the named model runs under scenario, driven by seed: what the server's
// GPUs follow, for a process (the load generator, a scorer) that must see
// the same engines.
func NewNode(model, scenario string, count int, seed uint64) (*infersim.Node, error) {
	if !slices.Contains(infersim.Scenarios(), strings.ToLower(scenario)) {
		return nil, fmt.Errorf("unknown scenario %q: use one of %s", scenario, strings.Join(Scenarios(), ", "))
	}
	m, err := LookupModel(model)
	if err != nil {
		return nil, err
	}
	sc, err := infersim.LookupScenario(scenario, count, m.Hardware())
	if err != nil {
		return nil, err
	}
	return infersim.NewNode(m.Hardware(), sc, seed), nil
}

// New returns a simulated server of gpus GPUs of the named model (see
// Models) following the workload seeded by seed. now is the clock the
// workload is read against; nil means time.Now.
func New(model string, count int, seed uint64, now func() time.Time, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	m, err := LookupModel(model)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > MaxGPUs {
		return nil, fmt.Errorf("a simulated server has 1 to %d GPUs, not %d", MaxGPUs, count)
	}
	if now == nil {
		now = time.Now
	}
	mock, err := server.New(
		server.WithGPUs(gpus.Multiple(count, m.GPU)...),
		server.WithDriverVersion(m.DriverVersion),
		server.WithNVMLVersion("12."+m.DriverVersion),
		server.WithCUDADriverVersion(12040),
	)
	if err != nil {
		return nil, err
	}
	s := &Server{Server: mock, symbols: map[string]bool{}}
	if o.scenario != "" && !strings.EqualFold(o.scenario, ScenarioSequential) {
		if s.node, err = NewNode(model, o.scenario, count, seed); err != nil {
			return nil, err
		}
	}
	for _, name := range symbols {
		s.symbols[name] = true
	}
	for i, d := range mock.Devices {
		dev := newDevice(d.(*server.Device), m, seed, i, now, s.node)
		if o.script != nil {
			dev.follow(script(o.script))
			dev.gpmLag = 0
		}
		if o.mig {
			dev.enableMIG(seed)
		}
		s.devices = append(s.devices, dev)
	}
	if len(o.faults) > 0 {
		for i := range o.faults {
			if err := o.faults[i].Validate(count); err != nil {
				return nil, fmt.Errorf("faults[%d].%w", i, err)
			}
		}
		s.armFaults(o.faults, now)
	}
	return s, nil
}

// simulatedUUID is deterministic and says what it is.
func simulatedUUID(model string, seed uint64, index int) string {
	return fmt.Sprintf("GPU-simulated-%s-%x-%02d", model, seed, index)
}

// Node returns the batching engines the GPUs serve, or nil under the
// sequential schedule.
func (s *Server) Node() *infersim.Node { return s.node }

// Device returns simulated GPU i.
func (s *Server) Device(i int) *Device { return s.devices[i] }

// Extensions implements nvml.Interface.
func (s *Server) Extensions() nvml.ExtendedInterface { return s }

// LookupSymbol implements nvml.ExtendedInterface.
func (s *Server) LookupSymbol(name string) error {
	if s.symbols[name] {
		return nil
	}
	return fmt.Errorf("simulated NVML has no symbol %s", name)
}

// DeviceGetCount implements nvml.Interface.
func (s *Server) DeviceGetCount() (int, nvml.Return) { return len(s.devices), nvml.SUCCESS }

// DeviceGetHandleByIndex implements nvml.Interface.
func (s *Server) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s.handle(i), nvml.SUCCESS
}

// DeviceGetHandleByUUID implements nvml.Interface.
func (s *Server) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	for i, d := range s.devices {
		if d.uuid == uuid {
			return s.handle(i), nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}
