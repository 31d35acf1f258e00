package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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
	// noUtil is set when the GPU cannot sample process utilisation (in MIG
	// mode, for one): memory per process is still reported.
	noUtil bool
}

type procInfo struct {
	// start is the process's start time (procStart): with the PID, which
	// process the rest is of.
	start                                      uint64
	executable, container, podUID, commandLine string
	// slurm is the process's Slurm job, from its environment.
	slurm slurmJob
}

func processesEnabled(m *metadata.MetricsConfig) bool {
	return m.NvidiaGpuProcessMemoryUsage.Enabled || m.NvidiaGpuProcessUtilization.Enabled
}

// processesRead reports whether the scrape reads GPU processes: for their
// series, or for the Slurm jobs their environments name.
func processesRead(c *Config) bool {
	return c.Processes.Enabled && (processesEnabled(&c.Metrics) || c.Slurm.Environ && c.Metrics.NvidiaGpuSlurmJob.Enabled)
}

func (s *gpuScraper) readProcesses(g *gpu, ts pcommon.Timestamp) nvml.Return {
	procs, ret := g.dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return ret
	}
	st := &g.processes
	if st.info == nil {
		st.info = map[uint32]procInfo{}
	}
	// The largest users of memory first; the rest are not reported, which
	// bounds the series per GPU.
	slices.SortFunc(procs, func(a, b nvml.ProcessInfo) int {
		if am, bm := knownMemory(a), knownMemory(b); am != bm {
			if am > bm {
				return -1
			}
			return 1
		}
		return int(a.Pid) - int(b.Pid)
	})
	procs = procs[:min(len(procs), s.cfg.Processes.Top)]

	// util is each process's newest sample of this read. NVML samples only
	// the processes that did some work, and returns only samples newer than
	// lastSeen: a running process without one did none since the last read,
	// and is 0, not its last busy sample again.
	var util map[uint32]nvml.ProcessUtilizationSample
	// failed is a failing utilisation reading: the processes' memory series
	// are still recorded, the utilisation series skipped this scrape, and
	// the failure returned after them, for the scrape to report.
	failed := nvml.SUCCESS
	sampled := s.cfg.Metrics.NvidiaGpuProcessUtilization.Enabled && !st.noUtil
	if sampled {
		samples, ret := g.dev.GetProcessUtilization(st.lastSeen)
		switch {
		case ret == nvml.SUCCESS:
			util = make(map[uint32]nvml.ProcessUtilizationSample, len(samples))
			for _, smp := range samples {
				st.lastSeen = max(st.lastSeen, smp.TimeStamp)
				if old, ok := util[smp.Pid]; !ok || smp.TimeStamp >= old.TimeStamp {
					util[smp.Pid] = smp
				}
			}
		case ret == nvml.ERROR_NOT_FOUND: // no sample newer than lastSeen: no process did any work
		case ret == nvml.ERROR_NOT_SUPPORTED:
			st.noUtil, sampled = true, false
		case gpuLost(ret):
			return ret // the whole GPU is gone: the scrape reports it failed
		default:
			failed, sampled = ret, false
		}
	}

	holder := s.processHolders(g)
	gpuJob := g.slurm.soleJob()
	running := make(map[uint32]bool, len(procs))
	for _, p := range procs {
		running[p.Pid] = true
		// A PID another process took since the last scrape is another
		// process: one small read tells, before the rest is read again. The
		// start time read first, a process that takes the PID during the
		// reading is read again next scrape.
		start := s.procStart(p.Pid)
		info, ok := st.info[p.Pid]
		if !ok || info.start != start {
			info = s.readProcInfo(p.Pid)
			info.start = start
			st.info[p.Pid] = info
		}
		job := info.slurm
		if job.id == "" {
			job = gpuJob
		} else {
			g.slurm.jobs = append(g.slurm.jobs, job)
		}
		namespace, pod := holder(p)
		pid := int64(p.Pid)
		if p.UsedGpuMemory != memoryNotAvailable {
			g.mb.RecordNvidiaGpuProcessMemoryUsageDataPoint(ts, int64(p.UsedGpuMemory), g.id, g.name,
				pid, info.executable, info.container, info.podUID, namespace, pod, info.commandLine,
				job.id, job.arrayJob, job.arrayTask, job.step)
		}
		if sampled {
			u := util[p.Pid] // zero without a new sample
			g.mb.RecordNvidiaGpuProcessUtilizationDataPoint(ts, percent(u.SmUtil), g.id, g.name,
				pid, info.executable, info.container, info.podUID, namespace, pod, info.commandLine,
				job.id, job.arrayJob, job.arrayTask, job.step, metadata.AttributeNvidiaGpuProcessEngineSm)
			g.mb.RecordNvidiaGpuProcessUtilizationDataPoint(ts, percent(u.MemUtil), g.id, g.name,
				pid, info.executable, info.container, info.podUID, namespace, pod, info.commandLine,
				job.id, job.arrayJob, job.arrayTask, job.step, metadata.AttributeNvidiaGpuProcessEngineMemoryController)
		}
	}
	for pid := range st.info {
		if !running[pid] {
			delete(st.info, pid)
		}
	}
	return failed
}

// procStart reads a process's start time, in clock ticks after boot: field
// 22 of /proc/<pid>/stat. 0 where /proc does not show the process.
func (s *gpuScraper) procStart(pid uint32) uint64 {
	stat, err := os.ReadFile(filepath.Join(s.procRoot, strconv.FormatUint(uint64(pid), 10), "stat"))
	if err != nil {
		return 0
	}
	return statStart(stat)
}

// statStart is the start time in a /proc/<pid>/stat, or 0. The second
// field, (comm), may hold spaces and parentheses: the fields are counted
// after its last ')', the first of them field 3.
func statStart(stat []byte) uint64 {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := bytes.Fields(stat[i+1:])
	if len(fields) < 22-2 {
		return 0
	}
	start, err := strconv.ParseUint(string(fields[22-3]), 10, 64)
	if err != nil {
		return 0
	}
	return start
}

// readProcInfo reads a process's name, container, (when configured)
// command line and Slurm job from procfs. A process /proc does not show (another PID
// namespace, already gone) simply has empty values.
func (s *gpuScraper) readProcInfo(pid uint32) procInfo {
	dir := filepath.Join(s.procRoot, strconv.FormatUint(uint64(pid), 10))
	var info procInfo
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		info.executable = procText(bytes.TrimSpace(comm))
	}
	cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err == nil {
		info.container = containerID(cgroup)
		info.podUID = podUID(cgroup)
	}
	if s.cfg.Processes.CommandLine {
		info.commandLine = readCommandLine(filepath.Join(dir, "cmdline"))
	}
	if s.cfg.Slurm.Environ {
		info.slurm = s.readEnvironJob(dir)
	}
	if info.slurm.id == "" {
		// Slurm's cgroup plugins name the job and step in the path, which
		// anyone may read: no array ids, but no privilege either.
		info.slurm = cgroupJob(cgroup)
	}
	return info
}

// procText makes text a process chose (its name, its arguments) an
// attribute value: OTLP's strings are UTF-8, and the official protobuf
// bindings refuse a whole request holding one that is not. The kernel cuts
// a comm at 15 bytes, mid-character too, and argv holds any bytes: each
// run of invalid bytes becomes U+FFFD.
func procText(b []byte) string {
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// maxCommandLineBytes bounds process.command_line: argv can reach
// megabytes (an inline chat template), it goes on every process series of
// every scrape, and Mimir and Cortex skip a series with a label value over
// 2,048 bytes.
const maxCommandLineBytes = 2 << 10

// readCommandLine reads a /proc/<pid>/cmdline, at most maxCommandLineBytes
// of it; "" when it cannot be read.
func readCommandLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	cmdline, err := io.ReadAll(io.LimitReader(f, maxCommandLineBytes))
	if err != nil {
		return ""
	}
	return commandLine(cmdline)
}

// commandLine makes a cmdline's NUL-separated arguments one line, their
// separators spaces, valid UTF-8 and at most maxCommandLineBytes, cut at a
// whole character.
func commandLine(cmdline []byte) string {
	line := procText(bytes.TrimSpace(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	if len(line) <= maxCommandLineBytes {
		return line
	}
	// U+FFFD for single invalid bytes lengthened it.
	cut := maxCommandLineBytes
	for !utf8.RuneStart(line[cut]) {
		cut--
	}
	return line[:cut]
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

// memoryNotAvailable is NVML_VALUE_NOT_AVAILABLE, what NVML reports for a
// process's memory it cannot tell (MIG inside a container): no reading, not
// 2^64 − 1 bytes.
const memoryNotAvailable = math.MaxUint64

// knownMemory is p's memory for ranking, 0 where NVML cannot tell.
func knownMemory(p nvml.ProcessInfo) uint64 {
	if p.UsedGpuMemory == memoryNotAvailable {
		return 0
	}
	return p.UsedGpuMemory
}
