package gpuvizreceiver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpuviz/gpuviz/receiver/gpuvizreceiver/internal/metadata"
)

func environ(entries ...string) []byte {
	var b []byte
	for _, e := range entries {
		b = append(append(b, e...), 0)
	}
	return b
}

func TestParseEnviron(t *testing.T) {
	long := "X=" + strings.Repeat("a", 3*environChunk)
	for _, tc := range []struct {
		name string
		in   []byte
		want slurmJob
	}{
		{"job step", environ("PATH=/bin", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_ARRAY_JOB_ID=4240", "SLURM_ARRAY_TASK_ID=2"),
			slurmJob{id: "4242", arrayJob: "4240", arrayTask: "2", step: "0"}},
		{"not slurm", environ("PATH=/bin", "HF_TOKEN=hf_x"), slurmJob{}},
		{"other SLURM_ variables are not read", environ("SLURM_JOB_ACCOUNT=secret", "SLURM_JOBID=1", "SLURM_JOB_ID=2"), slurmJob{id: "2"}},
		{"the first of duplicates", environ("SLURM_JOB_ID=1", "SLURM_JOB_ID=2"), slurmJob{id: "1"}},
		{"no NUL at the end: cut short, dropped", []byte("SLURM_STEP_ID=0\x00SLURM_JOB_ID=42"), slurmJob{step: "0"}},
		{"not an id", environ("SLURM_JOB_ID=42 ; rm", "SLURM_STEP_ID=", "SLURM_ARRAY_JOB_ID="+strings.Repeat("9", maxSlurmID+1)), slurmJob{}},
		{"no =", environ("SLURM_JOB_ID"), slurmJob{}},
		{"the batch step by name, as its cgroup has it", environ("SLURM_JOB_ID=5", "SLURM_STEP_ID=-5"), slurmJob{id: "5", step: "batch"}},
		{"the extern step", environ("SLURM_STEP_ID=4294967292"), slurmJob{step: "extern"}},
		{"an entry longer than the buffer is skipped whole", environ(long, "SLURM_JOB_ID=7"), slurmJob{id: "7"}},
		{"a long entry ending in what looks like a variable", environ("X="+strings.Repeat("b", environChunk-4)+"\x01SLURM_JOB_ID=8", "SLURM_STEP_ID=1"),
			slurmJob{step: "1"}},
		{"past maxEnvironBytes nothing is read", environ(strings.Repeat("Y=1\x00", maxEnvironBytes/4), "SLURM_JOB_ID=9"), slurmJob{}},
		{"empty", nil, slurmJob{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, parseEnviron(bytes.NewReader(tc.in)), "whole reads")
			assert.Equal(t, tc.want, parseEnviron(iotest.OneByteReader(bytes.NewReader(tc.in))), "one byte at a time")
			assert.Equal(t, tc.want, parseEnviron(iotest.HalfReader(bytes.NewReader(tc.in))), "half reads")
		})
	}
}

// referenceEnviron is parseEnviron written the obvious way, over the whole
// input at once.
func referenceEnviron(in []byte) slurmJob {
	in = in[:min(len(in), maxEnvironBytes)]
	var job slurmJob
	entries := bytes.Split(in, []byte{0})
	for _, e := range entries[:len(entries)-1] { // the last is not NUL-terminated
		job.set(e)
	}
	return job
}

// Foreign input: whatever the environment holds, parseEnviron keeps only the
// four variables, valid ids each, exactly as the obvious parser over the
// whole input would, however the reads are split.
func FuzzParseEnviron(f *testing.F) {
	f.Add(environ("PATH=/bin", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0"))
	f.Add(environ("SLURM_ARRAY_JOB_ID=1", "SLURM_ARRAY_TASK_ID=3", "SECRET=x"))
	f.Add([]byte("SLURM_JOB_ID=1\x00SLURM_JOB_ID=2"))
	f.Add([]byte("\x00\x00=\x00SLURM_=\x00"))
	f.Add(environ("X="+strings.Repeat("z", environChunk), "SLURM_STEP_ID=batch"))
	f.Add(environ("SLURM_STEP_ID=-5", "SLURM_JOB_ID=9"))
	f.Fuzz(func(t *testing.T, in []byte) {
		got := parseEnviron(bytes.NewReader(in))
		require.Equal(t, referenceEnviron(in), got)
		require.Equal(t, got, parseEnviron(iotest.HalfReader(bytes.NewReader(in))))
		for name, v := range map[string]string{envJobID: got.id, envArrayJobID: got.arrayJob, envArrayTask: got.arrayTask, envStepID: got.step} {
			if v == "" {
				continue
			}
			require.True(t, validSlurmID([]byte(v)), "%s=%q", name, v)
			if name == envStepID && (v == "batch" || v == "extern" || v == "interactive") {
				continue // perhaps Slurm's reserved number for it
			}
			require.Contains(t, string(in), name+"="+v+"\x00")
		}
	})
}

func TestCgroupJob(t *testing.T) {
	for cgroup, want := range map[string]slurmJob{
		"0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n":                   {id: "4242", step: "0"},
		"4:memory:/slurm/uid_1000/job_77/step_batch/task_0\n3:cpu:/slurm/uid_1000/job_77\n": {id: "77", step: "batch"},
		"0::/system.slice/node1_slurmstepd.scope/job_5/step_extern\n":                       {id: "5", step: "extern"},
		"0::/system.slice/slurmstepd.scope/job_6/step_0+1/user/task_0\n":                    {id: "6", step: "0+1"},
		"0::/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0/user/task_0\n":             {}, // Slurm 26.05's SLUID: no job id
		"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-3f4e.scope\n":           {},
		"0::/user.slice/job_42/stepping\n":                                                  {},
		"":                                                                                  {},
	} {
		assert.Equal(t, want, cgroupJob([]byte(cgroup)), cgroup)
	}
}

func TestParseMappingFile(t *testing.T) {
	many := ""
	for i := range maxSlurmJobsPerGPU + 10 {
		many += fmt.Sprintf("%d\n", 1000+i)
	}
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"dcgm-exporter's format", "job1-1\njob2-1\n", []string{"job1-1", "job2-1"}},
		{"no final newline", "4242", []string{"4242"}},
		{"spaces, CRs and blank lines", "  4242 \r\n\n\t4243\r\n", []string{"4242", "4243"}},
		{"repeats", "1\n1\n2\n", []string{"1", "2"}},
		{"not ids", "42 43\n$(reboot)\n" + strings.Repeat("9", maxSlurmID+1) + "\n44\n", []string{"44"}},
		{"empty", "", nil},
		{"at most 64", many, func() []string {
			var w []string
			for i := range maxSlurmJobsPerGPU {
				w = append(w, fmt.Sprint(1000+i))
			}
			return w
		}()},
		{"cut at the last whole line within the bound", strings.Repeat("x", maxMappingFileBytes-3) + "\n12345\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, parseMappingFile([]byte(tc.in))) })
	}
}

// Foreign input: a mapping file gives at most 64 distinct valid ids, each
// a whole line of it (trimmed).
func FuzzParseMappingFile(f *testing.F) {
	f.Add([]byte("4242\n4243\n"))
	f.Add([]byte("job1-0\r\n\n  x y\n"))
	f.Add([]byte(strings.Repeat("1\n", 100)))
	f.Add([]byte{0xff, '\n', 0, '1'})
	f.Fuzz(func(t *testing.T, in []byte) {
		jobs := parseMappingFile(in)
		require.LessOrEqual(t, len(jobs), maxSlurmJobsPerGPU)
		lines := map[string]bool{}
		for l := range bytes.SplitSeq(in[:min(len(in), maxMappingFileBytes)], []byte{'\n'}) {
			lines[string(bytes.TrimSpace(l))] = true
		}
		seen := map[string]bool{}
		for _, j := range jobs {
			require.True(t, validSlurmID([]byte(j)), "%q", j)
			require.True(t, lines[j], "%q is not a line of the file", j)
			require.False(t, seen[j], "%q twice", j)
			seen[j] = true
		}
	})
}

func TestMappingFileName(t *testing.T) {
	type parsed struct {
		index       int
		gi          int64
		isMIG, isOK bool
	}
	for name, want := range map[string]parsed{
		"0": {0, 0, false, true}, "7": {7, 0, false, true}, "12": {12, 0, false, true},
		"2.0": {2, 0, true, true}, "3.10": {3, 10, true, true},
		"01": {}, "2.": {}, ".1": {}, "2.0.1": {}, "-1": {}, "+1": {}, " 1": {}, "README": {}, "1.x": {}, "9999999": {}, "": {},
	} {
		index, gi, isMIG, ok := mappingFileName(name)
		assert.Equal(t, want, parsed{index, gi, isMIG, ok}, name)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func TestReadMappingDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "0"), "4242\n")
	writeFile(t, filepath.Join(dir, "1"), "4243\n4244\n")
	writeFile(t, filepath.Join(dir, "1.2"), "5000\n")
	writeFile(t, filepath.Join(dir, "01"), "6000\n")     // not a GPU's name
	writeFile(t, filepath.Join(dir, "9"), "6001\n")      // no such GPU
	writeFile(t, filepath.Join(dir, "notes.txt"), "1\n") // not a GPU's name
	writeFile(t, filepath.Join(dir, "4"), "\n\n")        // no job
	require.NoError(t, os.Mkdir(filepath.Join(dir, "2"), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "3"), 0o644)) // must not block the scrape
	writeFile(t, filepath.Join(dir, "target"), "7000\n")
	require.NoError(t, os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "5")))
	require.NoError(t, os.Symlink(filepath.Join(dir, "2"), filepath.Join(dir, "6"))) // to a directory

	gpus := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: true}
	m, err := readMappingDir(dir, gpus)
	require.NoError(t, err)
	assert.Equal(t, jobMapping{
		0: {gpu: []string{"4242"}},
		1: {gpu: []string{"4243", "4244"}, mig: map[int64][]string{2: {"5000"}}},
		5: {gpu: []string{"7000"}},
	}, m)

	_, err = readMappingDir(filepath.Join(dir, "missing"), gpus)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// scrapeSlurm scrapes the fixture server once with processes and the Slurm
// readings on and returns what the scrape emitted.
func scrapeSlurm(t *testing.T, s *gpuScraper) pmetric.Metrics {
	t.Helper()
	m, err := s.scrape(context.Background())
	require.NoError(t, err)
	return m
}

type jobPoint struct{ gpu, mig, job, arrayJob, arrayTask, step string }

func slurmJobPoints(m pmetric.Metrics) []jobPoint {
	var got []jobPoint
	forEachPoint(m, func(name string, a map[string]any, v float64) {
		if name == "nvidia.gpu.slurm.job" && v == 1 {
			got = append(got, jobPoint{a["hw.id"].(string), a["nvidia.gpu.mig.id"].(string), a["slurm.job.id"].(string),
				a["slurm.array.job.id"].(string), a["slurm.array.task.id"].(string), a["slurm.step.id"].(string)})
		}
	})
	return got
}

// processJobs returns, per process, the job its memory series names.
func processJobs(m pmetric.Metrics) map[int64]jobPoint {
	got := map[int64]jobPoint{}
	forEachPoint(m, func(name string, a map[string]any, _ float64) {
		if name == "nvidia.gpu.process.memory.usage" {
			got[a["process.pid"].(int64)] = jobPoint{a["hw.id"].(string), "", a["slurm.job.id"].(string),
				a["slurm.array.job.id"].(string), a["slurm.array.task.id"].(string), a["slurm.step.id"].(string)}
		}
	})
	return got
}

// The fixture /proc: process 2000 on GPU 0 is step 0 of job 4242 (task 2 of
// array 4240), with secrets in its environment; process 1000 a
// containerised server with secrets of its own; 1001 and 2001 (GPU 1) have
// no /proc entry. The mapping directory gives GPU 0 job 4242 again and job
// 7000, GPU 1 job 4243 only.
func TestSlurmJobsFromEnvironAndMappingDir(t *testing.T) {
	lib := fixtureServer(2)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "0"), "4242\n7000\n")
	writeFile(t, filepath.Join(dir, "1"), "4243\n")
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Enabled = false
	cfg.Slurm.JobMappingDir = dir
	s := startScraper(t, cfg, lib, BackendNVML)
	m := scrapeSlurm(t, s)

	gpu0, gpu1 := device(lib, 0).UUID, device(lib, 1).UUID
	assert.ElementsMatch(t, []jobPoint{
		{gpu0, "", "4242", "4240", "2", "0"}, // the environment's, not the mapping's stepless copy
		{gpu0, "", "7000", "", "", ""},
		{gpu1, "", "4243", "", "", ""},
	}, slurmJobPoints(m))
	assert.Equal(t, map[int64]jobPoint{
		1000: {gpu0, "", "", "", "", ""},           // GPU 0 has two jobs: which is 1000's is unknown
		2000: {gpu0, "", "4242", "4240", "2", "0"}, // its own environment
		1001: {gpu1, "", "4243", "", "", ""},       // GPU 1's only job
		2001: {gpu1, "", "4243", "", "", ""},
	}, processJobs(m))

	// The job file changes: GPU 1's is gone, GPU 0's names one job.
	require.NoError(t, os.Remove(filepath.Join(dir, "1")))
	writeFile(t, filepath.Join(dir, "0"), "7001\n")
	m = scrapeSlurm(t, s)
	assert.ElementsMatch(t, []jobPoint{{gpu0, "", "4242", "4240", "2", "0"}, {gpu0, "", "7001", "", "", ""}}, slurmJobPoints(m))
	assert.Equal(t, "7001", processJobs(m)[1000].job, "GPU 0's only mapped job is its unnamed processes'")
	assert.Empty(t, processJobs(m)[1001].job)
}

// Nothing of an environment but the four SLURM_* ids reaches a data point:
// not the fixtures' tokens and keys, not other SLURM_* variables, not with
// the command line on either.
func TestEnvironSecretsNeverEmitted(t *testing.T) {
	// The fixtures' secrets: tokens and keys, another SLURM_* variable's
	// value, the user, and a second SLURM_JOB_ID that must not be taken.
	secrets := []string{"never-emit", "secret-project-x", "alice", "9999"}
	for _, pid := range []string{"1000", "2000"} {
		b, err := os.ReadFile(filepath.Join("testdata", "proc", pid, "environ"))
		require.NoError(t, err)
		require.Contains(t, string(b), "never-emit", pid)
	}

	cfg := scrapeOnly()
	cfg.Processes.CommandLine = true
	cfg.Kubernetes.PodResources.Enabled = false
	s := startScraper(t, cfg, fixtureServer(2), BackendNVML)
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	m := scrapeSlurm(t, s)
	var values []string
	forEachPoint(m, func(_ string, attrs map[string]any, _ float64) {
		for _, v := range attrs {
			values = append(values, fmt.Sprint(v))
		}
	})
	for _, v := range m.ResourceMetrics().At(0).Resource().Attributes().AsRaw() {
		values = append(values, fmt.Sprint(v))
	}
	require.Contains(t, values, "4242", "the job id is there")
	for _, v := range values {
		for _, secret := range secrets {
			assert.NotContains(t, v, secret)
		}
	}
	// Nor is the environment kept: the process cache holds the four ids.
	for _, g := range s.gpus {
		for pid, info := range g.processes.info {
			for _, secret := range secrets {
				assert.NotContains(t, fmt.Sprintf("%+v", info), secret, pid)
			}
		}
	}
}

// With slurm.environ off, Slurm's cgroup path still names the job and step
// (not the array); the mapping directory and its series stay.
func TestSlurmEnvironOffUsesCgroup(t *testing.T) {
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Enabled = false
	cfg.Slurm.Environ = false
	lib := fixtureServer(2)
	m := scrapeSlurm(t, startScraper(t, cfg, lib, BackendNVML))
	assert.Equal(t, jobPoint{device(lib, 0).UUID, "", "4242", "", "", "0"}, processJobs(m)[2000])
	assert.Equal(t, []jobPoint{{device(lib, 0).UUID, "", "4242", "", "", "0"}}, slurmJobPoints(m))
}

// A MIG instance's job file (index.gpu_instance_id) is reported on that
// instance's MIG devices; the series needs the MIG reading's layout.
func TestSlurmJobsOnMIGInstances(t *testing.T) {
	lib := fixtureServer(2)
	withMIG(lib) // GPU 0: instance 1 (MIG-a, MIG-b), instance 2 (MIG-c)
	device(lib, 0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "0.1"), "8001\n")
	writeFile(t, filepath.Join(dir, "0.2"), "8002\n")
	writeFile(t, filepath.Join(dir, "0.5"), "8005\n") // no such instance
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Enabled = false
	cfg.Slurm.JobMappingDir = dir
	s := startScraper(t, cfg, lib, BackendNVML)
	scrapeSlurm(t, s) // learns the layout
	var got []jobPoint
	for _, p := range slurmJobPoints(scrapeSlurm(t, s)) {
		if p.gpu == device(lib, 0).UUID {
			got = append(got, p)
		}
	}
	gpu0 := device(lib, 0).UUID
	assert.ElementsMatch(t, []jobPoint{{gpu0, "MIG-a", "8001", "", "", ""}, {gpu0, "MIG-b", "8001", "", "", ""}, {gpu0, "MIG-c", "8002", "", "", ""}}, got)
}

// A mapping directory that is missing at start, appears, and goes is logged
// at each change, never per scrape, and never fails a scrape.
func TestMappingDirLoggedOnChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	core, logs := observer.New(zapcore.InfoLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Enabled = false
	cfg.Slurm.JobMappingDir = dir
	lib := fixtureServer(1)
	s := newGPUScraper(cfg, set)
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, BackendNVML, nil }
	s.procRoot = t.TempDir() // no processes' Slurm jobs
	require.NoError(t, s.start(context.Background(), nil))
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })

	count := func(msg string) int { return logs.FilterMessageSnippet(msg).Len() }
	for range 3 {
		assert.Empty(t, slurmJobPoints(scrapeSlurm(t, s)))
	}
	assert.Equal(t, 1, count("does not exist"))
	require.NoError(t, os.Mkdir(dir, 0o755))
	writeFile(t, filepath.Join(dir, "0"), "4242\n")
	for range 2 {
		assert.Equal(t, []jobPoint{{device(lib, 0).UUID, "", "4242", "", "", ""}}, slurmJobPoints(scrapeSlurm(t, s)))
	}
	assert.Equal(t, 1, count("reading Slurm jobs"))
	require.NoError(t, os.RemoveAll(dir))
	for range 2 {
		assert.Empty(t, slurmJobPoints(scrapeSlurm(t, s)))
	}
	assert.Equal(t, 2, count("does not exist"))
}

// An environment the collector may not read (not root, no CAP_SYS_PTRACE)
// leaves the attributes empty and is logged once, not per process or
// scrape. Root reads every file, so this runs unprivileged only.
func TestEnvironDeniedLoggedOnce(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every environ")
	}
	root := t.TempDir()
	for _, pid := range []string{"1000", "2000"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		writeFile(t, filepath.Join(root, pid, "environ"), string(environ("SLURM_JOB_ID=1")))
		require.NoError(t, os.Chmod(filepath.Join(root, pid, "environ"), 0))
	}
	core, logs := observer.New(zapcore.WarnLevel)
	set := receivertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Enabled = false
	lib := fixtureServer(1)
	s := newGPUScraper(cfg, set)
	s.open = func(*Config, *zap.Logger) (nvml.Interface, Backend, error) { return lib, BackendNVML, nil }
	s.procRoot = root
	require.NoError(t, s.start(context.Background(), nil))
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })
	for range 2 {
		m := scrapeSlurm(t, s)
		for pid, p := range processJobs(m) {
			assert.Empty(t, p.job, pid)
		}
	}
	assert.Equal(t, 1, logs.FilterMessageSnippet("cannot read GPU processes' environments").Len())
}

// examples/slurm's Prolog and Epilog keep a directory this receiver reads
// as they meant: two jobs, one sharing a GPU with the other; each ends.
func TestExamplePrologEpilog(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := filepath.Join(t.TempDir(), "slurm-jobs")
	run := func(script, job, gpus string) {
		t.Helper()
		cmd := exec.Command(sh, filepath.Join("..", "..", "examples", "slurm", script))
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GPUVIZ_SLURM_JOB_DIR=" + dir, "SLURM_JOB_ID=" + job, "SLURM_JOB_GPUS=" + gpus}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %s: %s", script, job, out)
		assert.Empty(t, string(out), script)
	}
	gpus := map[int]bool{0: true, 1: true, 2: true, 3: true}
	read := func() jobMapping {
		t.Helper()
		m, err := readMappingDir(dir, gpus)
		require.NoError(t, err)
		return m
	}
	run("prolog.sh", "4242", "0,2")
	run("prolog.sh", "4243", "2")
	run("prolog.sh", "4243", "2") // a Prolog run twice adds nothing
	assert.Equal(t, jobMapping{0: {gpu: []string{"4242"}}, 2: {gpu: []string{"4242", "4243"}}}, read())
	run("epilog.sh", "4242", "0,2")
	assert.Equal(t, jobMapping{2: {gpu: []string{"4243"}}}, read())
	run("epilog.sh", "4243", "")
	assert.Equal(t, jobMapping{}, read())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.Equal(t, ".lock", e.Name(), "files of ended jobs are removed")
	}

	// Whatever goes wrong, they exit 0 (a failing Prolog drains the node).
	run("prolog.sh", "", "0")
	run("prolog.sh", "4244", "")
	run("prolog.sh", "x; reboot", "0")
	run("prolog.sh", "4244", "0,../../etc,1")
	assert.Equal(t, jobMapping{0: {gpu: []string{"4244"}}, 1: {gpu: []string{"4244"}}}, read())
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, "")
	dir = filepath.Join(file, "jobs") // cannot be made
	run("prolog.sh", "4245", "0")
	run("epilog.sh", "4245", "0")
}

// A GPU lost after a scrape that found job 4242's process on it: the
// lost GPU's scrape ends before its processes are read, and it does not
// report the job the previous scrape's processes named as holding it still.
func TestSlurmJobsOfALostGPUAreNotCarriedOver(t *testing.T) {
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Enabled = false
	cfg.Slurm.Environ = false
	lib := fixtureServer(1)
	s := startScraper(t, cfg, lib, BackendNVML)
	require.Len(t, slurmJobPoints(scrapeSlurm(t, s)), 1)

	device(lib, 0).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
	}
	m, _ := s.scrape(context.Background())
	require.Equal(t, "failed", stateOf(m, device(lib, 0).UUID))
	assert.Empty(t, slurmJobPoints(m), "the lost GPU's processes were not read")
}

// One GPU's nvidia.gpu.slurm.job series stop at maxSlurmJobsPerGPU, and
// processes of one job give it one series (the builder would merge
// repeats; the bound must not count them).
func TestSlurmJobSeriesAreBoundedAndOnePerJob(t *testing.T) {
	cfg := scrapeOnly()
	cfg.Kubernetes.PodResources.Enabled = false
	s := startScraper(t, cfg, fixtureServer(1), BackendNVML)
	g := s.gpus[0]
	g.slurm.jobs = []slurmJob{{id: "1"}, {id: "1"}, {id: "2"}}
	s.recordSlurmJobs(g, 0)
	assert.Len(t, slurmJobPoints(g.mb.Emit()), 2)

	g.slurm.jobs = nil
	for i := range maxSlurmJobsPerGPU + 5 {
		g.slurm.jobs = append(g.slurm.jobs, slurmJob{id: strconv.Itoa(i)})
	}
	s.recordSlurmJobs(g, 0)
	assert.Len(t, slurmJobPoints(g.mb.Emit()), maxSlurmJobsPerGPU)

	// A repeat takes none of the bound: 64 jobs, one of them twice, are
	// 64 series.
	g.slurm.jobs = []slurmJob{{id: "0"}}
	for i := range maxSlurmJobsPerGPU {
		g.slurm.jobs = append(g.slurm.jobs, slurmJob{id: strconv.Itoa(i)})
	}
	s.recordSlurmJobs(g, 0)
	assert.Len(t, slurmJobPoints(g.mb.Emit()), maxSlurmJobsPerGPU)
}

// A Slurm id is 1 to maxSlurmID bytes.
func TestSlurmIDLength(t *testing.T) {
	assert.True(t, validSlurmID(bytes.Repeat([]byte{'1'}, maxSlurmID)))
	assert.False(t, validSlurmID(bytes.Repeat([]byte{'1'}, maxSlurmID+1)))
	assert.False(t, validSlurmID(nil))
}
