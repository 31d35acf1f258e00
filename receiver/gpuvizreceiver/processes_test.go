package gpuvizreceiver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/scraper/scrapererror"
)

// fakeProc writes a /proc/<pid> directory of the given files under root.
func fakeProc(t *testing.T, root, pid string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(root, pid)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
}

// processNames returns process 1000's executable name and command line
// from a scrape.
func processNames(t *testing.T, s *gpuScraper) (executable, commandLine string) {
	t.Helper()
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	found := false
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" && attrs["process.pid"] == int64(1000) {
			executable, commandLine, found = attrs["process.executable.name"].(string), attrs["process.command_line"].(string), true
		}
	})
	require.True(t, found, "process 1000's series")
	return executable, commandLine
}

// The kernel cuts a comm at 15 bytes, mid-character too ("a推理服务器", a
// binary's name, reads "a推理服务" and two bytes of 器), and argv holds
// whatever bytes it was given (a Latin-1 file name): OTLP's strings are
// UTF-8, and the official protobuf bindings refuse a whole request with
// one that is not ("string field contains invalid UTF-8").
func TestProcessNamesAreValidUTF8(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, "1000", map[string]string{
		"comm":    "a\xe6\x8e\xa8\xe7\x90\x86\xe6\x9c\x8d\xe5\x8a\xa1\xe5\x99\n",
		"cmdline": "./serve\x00--prompts\x00caf\xe9.txt\x00",
	})
	cfg := defaultConfig()
	cfg.Processes.CommandLine = true
	s := startScraper(t, cfg, fixtureServer(1), BackendNVML)
	s.procRoot = root

	executable, commandLine := processNames(t, s)
	assert.True(t, utf8.ValidString(executable), "%q", executable)
	assert.True(t, utf8.ValidString(commandLine), "%q", commandLine)
	assert.Equal(t, "a推理服务\uFFFD", executable)
	assert.Equal(t, "./serve --prompts caf\uFFFD.txt", commandLine)
}

// procStat is a /proc/<pid>/stat of a process named comm that started at
// start (field 22), as Linux 6 writes it.
func procStat(pid, comm string, start uint64) string {
	return pid + " (" + comm + ") S 1 " + pid + " " + pid + " 0 -1 4194560 81234 0 12 0 5120 930 0 0 20 0 42 0 " +
		strconv.FormatUint(start, 10) + " 33285996544 1261733 18446744073709551615 1 1 0 0 0 0 16386 16781312 17642 0 0 0 17 12 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
}

// What /proc says of a process is cached, and read again only for another
// process: a PID that another GPU process took between two scrapes (the
// first exited) is known by its start time, and does not keep the first
// process's name, container, pod, command line or job.
func TestProcessInfoOfAReusedPIDIsReadAgain(t *testing.T) {
	root := t.TempDir()
	cgroup := func(id string) string { return "0::/system.slice/docker-" + strings.Repeat(id, 64) + ".scope\n" }
	fakeProc(t, root, "1000", map[string]string{
		"comm": "trainer\n", "cmdline": "./train\x00", "cgroup": cgroup("a"),
		"stat": procStat("1000", "trainer) S (x", 5000),
	})
	cfg := defaultConfig()
	cfg.Processes.CommandLine = true
	s := startScraper(t, cfg, fixtureServer(1), BackendNVML)
	s.procRoot = root
	container := func() string {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		var id string
		forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
			if name == "nvidia.gpu.process.memory.usage" && attrs["process.pid"] == int64(1000) {
				id = attrs["container.id"].(string)
			}
		})
		return id
	}

	executable, commandLine := processNames(t, s)
	assert.Equal(t, []string{"trainer", "./train"}, []string{executable, commandLine})
	assert.Equal(t, strings.Repeat("a", 64), container())

	// The same process (its start time): what was read stands.
	writeFile(t, filepath.Join(root, "1000", "comm"), "renamed\n")
	executable, _ = processNames(t, s)
	assert.Equal(t, "trainer", executable, "one process is read once")

	// Another process took PID 1000.
	fakeProc(t, root, "1000", map[string]string{
		"comm": "vllm\n", "cmdline": "./serve\x00", "cgroup": cgroup("b"),
		"stat": procStat("1000", "vllm", 7000),
	})
	executable, commandLine = processNames(t, s)
	assert.Equal(t, []string{"vllm", "./serve"}, []string{executable, commandLine})
	assert.Equal(t, strings.Repeat("b", 64), container())
}

func TestStatStart(t *testing.T) {
	assert.Equal(t, uint64(5000), statStart([]byte(procStat("1000", "a) 1 2 (b", 5000))))
	assert.Equal(t, uint64(0), statStart([]byte("1000 (vllm) S 1 2 3")), "too short")
	// The bound is field 22 itself: a stat that ends there has it, one
	// that ends a field before has not (and is not read past its end).
	full := strings.Fields(procStat("1000", "vllm", 5000))
	assert.Equal(t, uint64(5000), statStart([]byte(strings.Join(full[:22], " "))), "ends at field 22")
	assert.Equal(t, uint64(0), statStart([]byte(strings.Join(full[:21], " "))), "ends at field 21")
	assert.Equal(t, uint64(0), statStart([]byte("1000 vllm")), "no comm")
}

// A command line can reach megabytes (an inline chat template, a JSON
// override): it is on every process series of every scrape, and Mimir and
// Cortex skip a series with a label value over 2,048 bytes. It is kept to
// maxCommandLineBytes, cut at a whole character.
func TestProcessCommandLineIsBounded(t *testing.T) {
	head := "python3 -m vllm.entrypoints.openai.api_server --chat-template "
	long := head + strings.Repeat("x", maxCommandLineBytes-len(head)-1) + "é" + strings.Repeat("{{ messages }}", 1<<16)
	root := t.TempDir()
	fakeProc(t, root, "1000", map[string]string{"comm": "python3\n", "cmdline": strings.ReplaceAll(long, " ", "\x00") + "\x00"})
	cfg := defaultConfig()
	cfg.Processes.CommandLine = true
	s := startScraper(t, cfg, fixtureServer(1), BackendNVML)
	s.procRoot = root

	_, commandLine := processNames(t, s)
	require.LessOrEqual(t, len(commandLine), maxCommandLineBytes)
	assert.Equal(t, long[:maxCommandLineBytes-1], commandLine, "cut before the é that would cross the bound")
}

// Foreign input: whatever argv holds, the command line is valid UTF-8,
// within its bound, one line, and the arguments' own text where they were
// valid UTF-8 within the bound.
func FuzzCommandLine(f *testing.F) {
	f.Add([]byte("python3\x00-m\x00vllm.entrypoints.openai.api_server\x00"))
	f.Add([]byte("./serve\x00caf\xe9\x00"))
	f.Add([]byte("\x00\x00 \x00"))
	f.Add([]byte(strings.Repeat("é", maxCommandLineBytes)))
	f.Fuzz(func(t *testing.T, in []byte) {
		in = in[:min(len(in), maxCommandLineBytes)] // what readCommandLine reads
		got := commandLine(in)
		require.True(t, utf8.ValidString(got), "%q", got)
		require.LessOrEqual(t, len(got), maxCommandLineBytes)
		require.NotContains(t, got, "\x00")
		if want := strings.TrimSpace(strings.ReplaceAll(string(in), "\x00", " ")); utf8.ValidString(want) {
			require.Equal(t, want, got)
		}
	})
}

// The cgroup files container runtimes and kubelets write, as a process in
// a pod or container reads in /proc/<pid>/cgroup on the host, or through
// the collector's own cgroup namespace.
func TestCgroupForms(t *testing.T) {
	const (
		id      = "3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
		node    = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f3f4e2a1b9c8d7e6f5a4b3c2d1e0f"
		uid     = "5b1a0b8e-3c2d-4e5f-8a9b-0c1d2e3f4a5b"
		uidUnit = "5b1a0b8e_3c2d_4e5f_8a9b_0c1d2e3f4a5b"
	)
	for _, tc := range []struct {
		name, cgroup     string
		container, podID string
	}{
		{"containerd, systemd driver, v2", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidUnit + ".slice/cri-containerd-" + id + ".scope\n", id, uid},
		{"containerd, systemd driver, guaranteed", "0::/kubepods.slice/kubepods-pod" + uidUnit + ".slice/cri-containerd-" + id + ".scope\n", id, uid},
		{"containerd, cgroupfs driver, v1", "12:memory:/kubepods/besteffort/pod" + uid + "/" + id + "\n11:devices:/kubepods/besteffort/pod" + uid + "/" + id + "\n1:name=systemd:/kubepods/besteffort/pod" + uid + "/" + id + "\n0::/\n", id, uid},
		{"cri-o, systemd driver", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidUnit + ".slice/crio-" + id + ".scope\n", id, uid},
		{"through the collector's cgroup namespace", "0::/../../kubepods-burstable-pod" + uidUnit + ".slice/cri-containerd-" + id + ".scope\n", id, uid},
		{"kind: a node in Docker", "0::/system.slice/docker-" + node + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + uidUnit + ".slice/cri-containerd-" + id + ".scope\n", id, uid},
		{"docker, cgroupfs, v1", "13:pids:/docker/" + id + "\n0::/system.slice/containerd.service\n", id, ""},
		{"docker, systemd", "0::/system.slice/docker-" + id + ".scope\n", id, ""},
		{"podman", "0::/machine.slice/libpod-" + id + ".scope/container\n", id, ""},
		{"podman pod", "0::/machine.slice/machine-libpod_pod_" + node + ".slice/libpod-" + id + ".scope/container\n", id, ""},
		{"rootless podman", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id + ".scope/container\n", id, ""},
		{"a cgroup namespace of its own: nothing to see", "0::/\n", "", ""},
		{"on the host", "0::/system.slice/vllm.service\n", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.container, containerID([]byte(tc.cgroup)), "container")
			assert.Equal(t, tc.podID, podUID([]byte(tc.cgroup)), "pod")
			assert.Equal(t, slurmJob{}, cgroupJob([]byte(tc.cgroup)), "slurm")
		})
	}
}

var (
	wholeUUID  = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	wholeID    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	slurmJobID = regexp.MustCompile(`^[0-9]{1,20}$`)
)

// Foreign input: whatever a cgroup file holds, a pod UID is a whole UUID
// the file names (with - or _), a container ID 64 hex digits it holds, a
// Slurm job the job_<id>/step_<step> of one of its lines.
func FuzzCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5b1a0b8e_3c2d_4e5f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f.scope\n"))
	f.Add([]byte("12:memory:/kubepods/burstable/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/3f4e\n0::/\n"))
	f.Add([]byte("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"))
	f.Add([]byte("4:memory:/slurm/uid_1000/job_77/step_batch/task_0\n"))
	f.Add([]byte("0::/machine.slice/libpod-3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f.scope/container"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if uid := podUID(in); uid != "" {
			require.Regexp(t, wholeUUID, uid)
			require.Contains(t, string(bytes.ReplaceAll(in, []byte{'_'}, []byte{'-'})), uid)
		}
		if id := containerID(in); id != "" {
			require.Regexp(t, wholeID, id)
			require.Contains(t, string(in), id)
		}
		if job := cgroupJob(in); job != (slurmJob{}) {
			require.Regexp(t, slurmJobID, job.id)
			require.True(t, validSlurmID([]byte(job.step)), "%q", job.step)
			require.Contains(t, string(in), "/job_"+job.id+"/step_"+job.step)
			require.Empty(t, job.arrayJob+job.arrayTask)
		}
	})
}

// processSM returns each process's SM utilisation in a scrape.
func processSM(t *testing.T, s *gpuScraper) map[int64]float64 {
	t.Helper()
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	out := map[int64]float64{}
	forEachPoint(m, func(name string, attrs map[string]any, v float64) {
		if name == "nvidia.gpu.process.utilization" && attrs["nvidia.gpu.process.engine"] == "sm" {
			out[attrs["process.pid"].(int64)] = v
		}
	})
	return out
}

// Process utilisation samples: the newest of a process's samples is its
// value, whatever order NVML lists them in, and the next call asks only
// for samples newer than the newest seen.
func TestProcessUtilizationTakesTheNewestSample(t *testing.T) {
	lib := fixtureServer(1)
	var asked []uint64
	device(lib, 0).GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		asked = append(asked, lastSeen)
		if lastSeen > 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return []nvml.ProcessUtilizationSample{
			{Pid: 1000, TimeStamp: 9, SmUtil: 80},
			{Pid: 1000, TimeStamp: 5, SmUtil: 10},
			{Pid: 2000, TimeStamp: 7, SmUtil: 30},
		}, nvml.SUCCESS
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	assert.Equal(t, map[int64]float64{1000: 0.8, 2000: 0.3}, processSM(t, s))
	// NOT_FOUND (nothing newer) is no failure, and leaves the memory series.
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	assert.Len(t, pointsOf(m, "nvidia.gpu.process.memory.usage", nil)[device(lib, 0).UUID], 2)
	assert.Equal(t, []uint64{0, 9}, asked)
}

// NVML samples only the processes that did some work, and returns only
// samples newer than lastSeen: a process that stops computing but keeps its
// memory (an idle inference server) gets none, and is 0 on both engines,
// not its last busy sample again. So is every process when NVML has no new
// sample at all (NOT_FOUND), and a process never sampled.
func TestProcessUtilizationWithoutANewSampleIsZero(t *testing.T) {
	lib := fixtureServer(1)
	var samples [][]nvml.ProcessUtilizationSample // one read's answer each
	device(lib, 0).GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		next := samples[0]
		samples = samples[1:]
		var out []nvml.ProcessUtilizationSample
		for _, smp := range next {
			if smp.TimeStamp > lastSeen {
				out = append(out, smp)
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	samples = [][]nvml.ProcessUtilizationSample{
		{{Pid: 1000, TimeStamp: 10, SmUtil: 80, MemUtil: 40}, {Pid: 2000, TimeStamp: 10, SmUtil: 30, MemUtil: 20}},
		{{Pid: 1000, TimeStamp: 10, SmUtil: 80, MemUtil: 40}, {Pid: 2000, TimeStamp: 20, SmUtil: 50, MemUtil: 10}},
		{{Pid: 2000, TimeStamp: 20, SmUtil: 50, MemUtil: 10}},
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	util := func() map[string]float64 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		out := map[string]float64{}
		forEachPoint(m, func(name string, attrs map[string]any, v float64) {
			if name == "nvidia.gpu.process.utilization" {
				out[fmt.Sprint(attrs["process.pid"], " ", attrs["nvidia.gpu.process.engine"])] = v
			}
		})
		return out
	}
	assert.Equal(t, map[string]float64{"1000 sm": 0.8, "1000 memory_controller": 0.4, "2000 sm": 0.3, "2000 memory_controller": 0.2}, util())
	assert.Equal(t, map[string]float64{"1000 sm": 0, "1000 memory_controller": 0, "2000 sm": 0.5, "2000 memory_controller": 0.1}, util(),
		"process 1000 has no new sample: idle")
	assert.Equal(t, map[string]float64{"1000 sm": 0, "1000 memory_controller": 0, "2000 sm": 0, "2000 memory_controller": 0}, util(),
		"NOT_FOUND: nothing new for any process")
}

// A GPU that cannot sample process utilisation (MIG mode) answers
// NOT_SUPPORTED: it is not asked again, and its processes' memory is still
// reported.
func TestProcessUtilizationNotSupportedIsAskedOnce(t *testing.T) {
	lib := fixtureServer(1)
	calls := 0
	device(lib, 0).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		calls++
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	for range 2 {
		m, err := s.scrape(context.Background())
		require.NoError(t, err)
		assert.Len(t, pointsOf(m, "nvidia.gpu.process.memory.usage", nil)[device(lib, 0).UUID], 2)
		assert.Empty(t, pointsOf(m, "nvidia.gpu.process.utilization", nil))
	}
	assert.Equal(t, 1, calls)
}

// A process-utilisation reading that fails (not NOT_FOUND, not
// NOT_SUPPORTED) costs the utilisation series only: the processes' memory
// series and Slurm jobs, from the process list that was read, are still
// reported, and the failure is still the scrape's error and the GPU's
// degraded status. The next scrape asks again.
func TestProcessUtilizationFailureKeepsTheMemorySeries(t *testing.T) {
	lib := fixtureServer(1)
	calls := 0
	device(lib, 0).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		calls++
		return nil, nvml.ERROR_UNKNOWN
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	gpu := device(lib, 0).UUID
	for range 2 {
		m, err := s.scrape(context.Background())
		require.Error(t, err)
		assert.True(t, scrapererror.IsPartialScrapeError(err), "%v", err)
		assert.ErrorContains(t, err, "reading processes: ERROR_UNKNOWN")
		assert.Equal(t, "degraded", stateOf(m, gpu))

		assert.Len(t, pointsOf(m, "nvidia.gpu.process.memory.usage", nil)[gpu], 2)
		assert.Empty(t, pointsOf(m, "nvidia.gpu.process.utilization", nil))
		assert.Equal(t, "4242", processJobs(m)[2000].job, "process 2000's job, from its environment")
		assert.Contains(t, slurmJobPoints(m), jobPoint{gpu, "", "4242", "4240", "2", "0"})
	}
	assert.Equal(t, 2, calls)
}

// A GPU lost under the process-utilisation reading is lost, as from any
// other reading: reported failed, with no process series of that scrape.
// Back, its process utilisation is read again: a loss is no NOT_SUPPORTED.
func TestProcessUtilizationOfALostGPU(t *testing.T) {
	lib := fixtureServer(1)
	lost := true
	device(lib, 0).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		if lost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return []nvml.ProcessUtilizationSample{{Pid: 1000, TimeStamp: 9, SmUtil: 80}}, nvml.SUCCESS
	}
	s := startScraper(t, scrapeOnly(), lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.Error(t, err)
	assert.ErrorContains(t, err, "is lost")
	assert.Equal(t, "failed", stateOf(m, device(lib, 0).UUID))
	assert.Empty(t, pointsOf(m, "nvidia.gpu.process.memory.usage", nil))
	assert.Empty(t, pointsOf(m, "nvidia.gpu.process.utilization", nil))

	lost = false
	assert.Equal(t, map[int64]float64{1000: 0.8, 2000: 0}, processSM(t, s))
}

// processes.top keeps the largest users of memory; between equals, the
// lower PID, so the series kept do not change from scrape to scrape.
func TestProcessesTopTiesGoToTheLowerPID(t *testing.T) {
	lib := fixtureServer(1)
	device(lib, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 3000, UsedGpuMemory: 1 << 30}, {Pid: 2000, UsedGpuMemory: 1 << 30}, {Pid: 2500, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	cfg := scrapeOnly()
	cfg.Processes.Top = 2
	s := startScraper(t, cfg, lib, BackendNVML)
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	var pids []int64
	forEachPoint(m, func(name string, attrs map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" {
			pids = append(pids, attrs["process.pid"].(int64))
		}
	})
	assert.ElementsMatch(t, []int64{2000, 2500}, pids)
}

// statStart reads field 22 of /proc/<pid>/stat whatever the process named
// itself (comm may hold spaces, parentheses, anything but a NUL), and
// never panics on what it is given.
func FuzzStatStart(f *testing.F) {
	f.Add([]byte("vllm"), uint64(123456), []byte("1 (sh) S 0"))
	f.Add([]byte("a) (b ) c"), uint64(0), []byte(")"))
	f.Add([]byte(""), uint64(1<<63), []byte("9 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -1"))
	f.Fuzz(func(t *testing.T, comm []byte, start uint64, raw []byte) {
		stat := fmt.Appendf(nil, "4242 (%s) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 %d 100000 200 18446744073709551615\n", comm, start)
		require.Equal(t, start, statStart(stat), "%q", stat)
		if got := statStart(raw); got != 0 {
			fields := bytes.Fields(raw[bytes.LastIndexByte(raw, ')')+1:])
			require.Equal(t, strconv.FormatUint(got, 10), strings.TrimLeft(string(fields[19]), "+0"), "%q", raw)
		}
	})
}
