package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

// processState is what the receiver keeps per GPU about its processes.
type processState struct {
	// lastSeen is the newest process-utilisation sample already read (µs),
	// carried forward so each call returns only newer samples.
	lastSeen uint64
	// info caches what /proc says of each process, for the processes
	// running now only: entries of exited processes are dropped, and their
	// series stop.
	info map[uint32]procInfo
	// util is the latest utilisation sample per running process.
	util map[uint32]nvml.ProcessUtilizationSample
	// noUtil is set when the GPU cannot sample process utilisation (in MIG
	// mode, for one): memory per process is still reported.
	noUtil bool
}

type procInfo struct {
	executable, container, podUID, commandLine string
}

func processesEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuProcessMemoryUsage.Enabled || m.NvidiaGpuProcessUtilization.Enabled
}

func (s *gpuScraper) readProcesses(g *gpu, ts pcommon.Timestamp) nvml.Return {
	procs, ret := g.dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return ret
	}
	st := &g.processes
	if st.info == nil {
		st.info = map[uint32]procInfo{}
		st.util = map[uint32]nvml.ProcessUtilizationSample{}
	}
	// The largest users of memory first; the rest are not reported, which
	// bounds the series per GPU.
	slices.SortFunc(procs, func(a, b nvml.ProcessInfo) int {
		if a.UsedGpuMemory != b.UsedGpuMemory {
			if a.UsedGpuMemory > b.UsedGpuMemory {
				return -1
			}
			return 1
		}
		return int(a.Pid) - int(b.Pid)
	})
	procs = procs[:min(len(procs), s.cfg.Processes.Top)]

	if s.cfg.Metrics.NvidiaGpuProcessUtilization.Enabled && !st.noUtil {
		samples, ret := g.dev.GetProcessUtilization(st.lastSeen)
		switch ret {
		case nvml.SUCCESS:
			for _, smp := range samples {
				st.lastSeen = max(st.lastSeen, smp.TimeStamp)
				if old, ok := st.util[smp.Pid]; !ok || smp.TimeStamp >= old.TimeStamp {
					st.util[smp.Pid] = smp
				}
			}
		case nvml.ERROR_NOT_FOUND: // no sample newer than lastSeen
		case nvml.ERROR_NOT_SUPPORTED:
			st.noUtil = true
		default:
			return ret
		}
	}

	namespace, pod := soleHolder(s.allocation(), g.id)
	running := make(map[uint32]bool, len(procs))
	for _, p := range procs {
		running[p.Pid] = true
		info, ok := st.info[p.Pid]
		if !ok {
			info = s.readProcInfo(p.Pid)
			st.info[p.Pid] = info
		}
		pid := int64(p.Pid)
		g.mb.RecordNvidiaGpuProcessMemoryUsageDataPoint(ts, int64(p.UsedGpuMemory), g.id, g.name,
			pid, info.executable, info.container, info.podUID, namespace, pod, info.commandLine)
		if u, ok := st.util[p.Pid]; ok {
			g.mb.RecordNvidiaGpuProcessUtilizationDataPoint(ts, percent(u.SmUtil), g.id, g.name,
				pid, info.executable, info.container, info.podUID, namespace, pod, info.commandLine, metadata.AttributeNvidiaGpuProcessEngineSm)
			g.mb.RecordNvidiaGpuProcessUtilizationDataPoint(ts, percent(u.MemUtil), g.id, g.name,
				pid, info.executable, info.container, info.podUID, namespace, pod, info.commandLine, metadata.AttributeNvidiaGpuProcessEngineMemoryController)
		}
	}
	for pid := range st.info {
		if !running[pid] {
			delete(st.info, pid)
		}
	}
	for pid := range st.util {
		if !running[pid] {
			delete(st.util, pid)
		}
	}
	return nvml.SUCCESS
}

// readProcInfo reads a process's name, container and (when configured)
// command line from procfs. A process /proc does not show (another PID
// namespace, already gone) simply has empty values.
func (s *gpuScraper) readProcInfo(pid uint32) procInfo {
	dir := filepath.Join(s.procRoot, strconv.FormatUint(uint64(pid), 10))
	var info procInfo
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		info.executable = strings.TrimSpace(string(comm))
	}
	if cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		info.container = containerID(cgroup)
		info.podUID = podUID(cgroup)
	}
	if s.cfg.Processes.CommandLine {
		if cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
			info.commandLine = strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return info
}

// containerIDPattern matches the 64-hex-digit container IDs that Docker,
// containerd and CRI-O put in cgroup paths (/docker/<id>,
// cri-containerd-<id>.scope, crio-<id>.scope, ...).
var containerIDPattern = regexp.MustCompile(`[0-9a-f]{64}`)

// containerID returns the container ID in a /proc/<pid>/cgroup file, or "".
func containerID(cgroup []byte) string {
	for line := range bytes.SplitSeq(cgroup, []byte{'\n'}) {
		// hierarchy-ID:controllers:path — the ID is in the path.
		parts := bytes.SplitN(line, []byte{':'}, 3)
		if len(parts) != 3 {
			continue
		}
		if ids := containerIDPattern.FindAll(parts[2], -1); len(ids) > 0 {
			return string(ids[len(ids)-1])
		}
	}
	return ""
}
