package nvmlsim

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// MaxGPUs bounds the size of a simulated server.
const MaxGPUs = 64

// Server is a simulated NVIDIA server: go-nvml's DGX mock server whose
// devices are this package's Devices.
type Server struct {
	*server.Server
	devices []*Device
	symbols map[string]bool
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

type options struct{ mig bool }

// WithMIG puts every GPU in MIG mode, split into two 3-slice GPU instances.
func WithMIG() Option { return func(o *options) { o.mig = true } }

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
	for _, name := range symbols {
		s.symbols[name] = true
	}
	for i, d := range mock.Devices {
		dev := newDevice(d.(*server.Device), m, seed, i, now)
		if o.mig {
			dev.enableMIG(seed)
		}
		s.devices = append(s.devices, dev)
	}
	return s, nil
}

// simulatedUUID is deterministic and says what it is.
func simulatedUUID(model string, seed uint64, index int) string {
	return fmt.Sprintf("GPU-simulated-%s-%x-%02d", model, seed, index)
}

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
	return s.devices[i], nvml.SUCCESS
}

// DeviceGetHandleByUUID implements nvml.Interface.
func (s *Server) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	for _, d := range s.devices {
		if d.uuid == uuid {
			return d, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}
