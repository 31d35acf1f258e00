package gpuvizreceiver // import "github.com/gpuviz/gpuviz/receiver/gpuvizreceiver"

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.uber.org/zap"
)

// slurmJob is the Slurm job a GPU process runs in, from its environment,
// or a job a mapping file names (id alone). Every field is "" when unknown.
type slurmJob struct {
	id, arrayJob, arrayTask, step string
}

// slurmState is what one GPU's scrape knows of Slurm jobs.
type slurmState struct {
	// mapped are the job files of this GPU and its MIG instances, read by
	// the scrape before the GPU's own (scraper.go).
	mapped gpuJobFiles
	// jobs are the jobs of this scrape's GPU processes (readProcesses).
	jobs []slurmJob
}

// maxSlurmJobsPerGPU bounds the nvidia.gpu.slurm.job series of one GPU, and
// the job ids read from one mapping file: Slurm shares a GPU between a few
// jobs at most (shards), and the processor keeps 64 holders per GPU.
const maxSlurmJobsPerGPU = 64

// maxSlurmID bounds one job, array or step id. Slurm's are 32-bit numbers;
// the mapping files allow any name (dcgm-exporter's tests use "job1-0").
const maxSlurmID = 64

// validSlurmID reports whether v is usable as a job, array or step id: 1 to
// 64 bytes of letters, digits and . _ + - (a heterogeneous job's component
// is 1234+0). Anything else, from a mapping file or an environment, is
// dropped rather than reported.
func validSlurmID(v []byte) bool {
	if len(v) == 0 || len(v) > maxSlurmID {
		return false
	}
	for _, c := range v {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '.', c == '_', c == '+', c == '-':
		default:
			return false
		}
	}
	return true
}

// --- /proc/<pid>/environ -----------------------------------------------------

// The environment variables read; all others are skipped unread past their
// name.
const (
	envJobID      = "SLURM_JOB_ID"
	envArrayJobID = "SLURM_ARRAY_JOB_ID"
	envArrayTask  = "SLURM_ARRAY_TASK_ID"
	envStepID     = "SLURM_STEP_ID"
)

// maxEnvironBytes bounds how much of one process's environment is read:
// slurmstepd sets the SLURM_* variables before the job's own, and a
// process's environment rarely reaches 64 KiB; past the bound the rest is
// not read.
const maxEnvironBytes = 256 << 10

// environChunk is the read buffer: an entry longer than it (no SLURM_* id
// is) is skipped whole.
const environChunk = 4 << 10

// parseEnviron reads a NUL-separated environment (/proc/<pid>/environ) and
// returns the Slurm job variables in it, nothing else. Only entries ended
// by a NUL count, so an entry cut short (by maxEnvironBytes, or a process
// changing its environment) is never taken for a shorter id. The first of
// duplicate entries wins, as getenv(3) has it. The one buffer the
// environment passes through is cleared before it returns.
func parseEnviron(r io.Reader) slurmJob {
	var job slurmJob
	buf := make([]byte, environChunk)
	defer clear(buf)
	start, end, read := 0, 0, 0 // buf[start:end] is read and not parsed
	skipping := false           // in an entry longer than buf
	done := false
	for {
		for {
			i := bytes.IndexByte(buf[start:end], 0)
			if i < 0 {
				break
			}
			if !skipping {
				job.set(buf[start : start+i])
			}
			skipping = false
			start += i + 1
		}
		if done {
			return job
		}
		if start > 0 {
			end = copy(buf, buf[start:end])
			start = 0
		}
		if end == len(buf) {
			skipping, end = true, 0
		}
		limit := min(len(buf), end+maxEnvironBytes-read)
		if limit <= end {
			return job
		}
		n, err := r.Read(buf[end:limit])
		read, end = read+n, end+n
		done = err != nil || n == 0
	}
}

var slurmPrefix = []byte("SLURM_")

// set takes one NAME=value entry when it is one of the variables read.
func (j *slurmJob) set(entry []byte) {
	if !bytes.HasPrefix(entry, slurmPrefix) {
		return
	}
	name, value, ok := bytes.Cut(entry, []byte{'='})
	if !ok || !validSlurmID(value) {
		return
	}
	var field *string
	switch string(name) {
	case envJobID:
		field = &j.id
	case envArrayJobID:
		field = &j.arrayJob
	case envArrayTask:
		field = &j.arrayTask
	case envStepID:
		field = &j.step
	default:
		return
	}
	if *field == "" {
		*field = string(value)
		if field == &j.step {
			j.step = stepName(j.step)
		}
	}
}

// stepName names Slurm's special steps as its cgroups and sacct do: their
// SLURM_STEP_ID is a reserved 32-bit value, printed signed.
func stepName(step string) string {
	switch step {
	case "-5", "4294967291": // SLURM_BATCH_SCRIPT
		return "batch"
	case "-4", "4294967292": // SLURM_EXTERN_CONT
		return "extern"
	case "-6", "4294967290": // SLURM_INTERACTIVE_STEP
		return "interactive"
	}
	return step
}

// readEnvironJob reads the Slurm job of the process whose /proc directory is
// dir. A process that cannot be read has none: one gone or not visible (no
// host PID namespace) silently, one the collector may not read (neither
// root nor CAP_SYS_PTRACE) with a warning, once per receiver.
func (s *gpuScraper) readEnvironJob(dir string) slurmJob {
	f, err := os.Open(filepath.Join(dir, "environ"))
	if err == nil {
		defer f.Close()
		return parseEnviron(f)
	}
	if errors.Is(err, fs.ErrPermission) && s.environDenied.CompareAndSwap(false, true) {
		s.logger.Warn("cannot read GPU processes' environments: their slurm.* attributes come from their cgroups (job and step, "+
			"with Slurm's cgroup plugins) or stay empty. Reading another user's /proc/<pid>/environ needs root or CAP_SYS_PTRACE "+
			"(only SLURM_JOB_ID, SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID and SLURM_STEP_ID are kept); set slurm.environ false "+
			"to stop trying, or use slurm.job_mapping_dir",
			zap.Error(err))
	}
	return slurmJob{}
}

// slurmCgroupPattern matches the job and step in a Slurm cgroup path:
// cgroup v1 /slurm/uid_1000/job_4242/step_0/task_0, cgroup v2
// /system.slice/slurmstepd.scope/job_4242/step_0/user/task_0 (step_batch,
// step_extern, step_interactive for the special steps, step_0+1 for a
// heterogeneous step's component). Slurm 26.05's cgroup/v2 names the job's
// directory by its SLUID instead, unless cgroup.conf sets
// CgroupJobIdPaths=yes: then this finds nothing, rather than a wrong job.
var slurmCgroupPattern = regexp.MustCompile(`/job_([0-9]{1,20})/step_([0-9A-Za-z+]{1,24})(?:/|$)`)

// cgroupJob returns the Slurm job and step a /proc/<pid>/cgroup file names.
func cgroupJob(cgroup []byte) slurmJob {
	for line := range bytes.SplitSeq(cgroup, []byte{'\n'}) {
		if m := slurmCgroupPattern.FindSubmatch(line); m != nil {
			return slurmJob{id: string(m[1]), step: string(m[2])}
		}
	}
	return slurmJob{}
}

// --- the job mapping directory -------------------------------------------------

// gpuJobFiles are the job ids the mapping directory gives one GPU: the
// whole GPU's file, and each MIG GPU instance's by instance id.
type gpuJobFiles struct {
	gpu []string
	mig map[int64][]string
}

// jobMapping is one reading of the mapping directory, by NVML index.
type jobMapping map[int]gpuJobFiles

// Bounds on the mapping directory, against a directory that is not one.
const (
	// maxMappingEntries bounds the directory entries looked at: 8 GPUs with
	// 7 MIG instances each are 64 files.
	maxMappingEntries = 1024
	// maxMappingFileBytes bounds one file: 64 job ids of Slurm's 10 digits
	// and a newline are 704 bytes.
	maxMappingFileBytes = 4 << 10
)

// mappingState is what the scraper remembers of the mapping directory
// between scrapes, to log each change of its state once.
type mappingState struct {
	err string // the last reading's problem, "" when it was read
}

// readJobMapping reads slurm.job_mapping_dir for the GPUs the receiver
// reads; nil when none is configured, the series is off, or it cannot be
// read (logged when that starts and when it ends, never an error per
// scrape). Files are named as dcgm-exporter's --hpc-job-mapping-dir has
// them: the GPU's NVML index, or index.gpu_instance_id; other names,
// directories and anything not a regular file are skipped.
func (s *gpuScraper) readJobMapping() jobMapping {
	dir := s.cfg.Slurm.JobMappingDir
	if dir == "" || !s.cfg.Metrics.NvidiaGpuSlurmJob.Enabled && !processesEnabled(&s.cfg.Metrics) {
		return nil
	}
	m, err := readMappingDir(dir, s.gpuIndexes())
	s.noteMapping(dir, err)
	return m
}

func (s *gpuScraper) gpuIndexes() map[int]bool {
	idx := make(map[int]bool, len(s.gpus))
	for _, g := range s.gpus {
		idx[g.index] = true
	}
	return idx
}

// noteMapping logs the mapping directory's state when it changes.
func (s *gpuScraper) noteMapping(dir string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == s.mapping.err {
		return
	}
	s.mapping.err = msg
	switch {
	case err == nil:
		s.logger.Info("reading Slurm jobs from slurm.job_mapping_dir", zap.String("dir", dir))
	case errors.Is(err, fs.ErrNotExist):
		s.logger.Warn("slurm.job_mapping_dir does not exist (yet): its jobs are reported once it does", zap.String("dir", dir))
	default:
		s.logger.Warn("cannot read slurm.job_mapping_dir: its jobs are not reported until it can be read", zap.String("dir", dir), zap.Error(err))
	}
}

// readMappingDir reads the job files of the GPUs with the given indexes.
// A file that cannot be read is left out; the directory that cannot be
// read is the error.
func readMappingDir(dir string, gpus map[int]bool) (jobMapping, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(maxMappingEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	m := jobMapping{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		index, gi, isMIG, ok := mappingFileName(e.Name())
		if !ok || !gpus[index] {
			continue
		}
		jobs, err := readMappingFile(filepath.Join(dir, e.Name()))
		if err != nil || len(jobs) == 0 {
			continue
		}
		f := m[index]
		if isMIG {
			if f.mig == nil {
				f.mig = map[int64][]string{}
			}
			f.mig[gi] = jobs
		} else {
			f.gpu = jobs
		}
		m[index] = f
	}
	return m, nil
}

// mappingFileName parses a mapping file's name: "<index>" or
// "<index>.<gpu instance id>", decimal, as dcgm-exporter's ^\d+(\.\d+)?$.
func mappingFileName(name string) (index int, gi int64, isMIG, ok bool) {
	gpuPart, giPart, isMIG := strings.Cut(name, ".")
	index, ok = decimal(gpuPart)
	if !ok {
		return 0, 0, false, false
	}
	if isMIG {
		i, ok := decimal(giPart)
		if !ok {
			return 0, 0, false, false
		}
		gi = int64(i)
	}
	return index, gi, isMIG, true
}

// decimal parses 1 to 6 ASCII digits: no sign, no spaces, no leading
// zero (dcgm-exporter keys files by name, so "01" is no GPU's).
func decimal(s string) (int, bool) {
	if len(s) == 0 || len(s) > 6 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// readMappingFile reads one mapping file, which must be a regular file: it
// is opened without blocking, so a FIFO left in the directory cannot hang
// the scrape.
func readMappingFile(path string) ([]string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxMappingFileBytes+1))
	if err != nil {
		return nil, err
	}
	return parseMappingFile(b), nil
}

// parseMappingFile returns the job ids of a mapping file: one a line, as
// dcgm-exporter reads them, with surrounding spaces (and a CR) trimmed;
// blank lines, lines that are not a valid id and repeats skipped; at most
// maxSlurmJobsPerGPU. Past maxMappingFileBytes the file is cut at its last
// whole line within them.
func parseMappingFile(b []byte) []string {
	if len(b) > maxMappingFileBytes {
		b = b[:maxMappingFileBytes]
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			b = b[:i]
		} else {
			b = nil
		}
	}
	var jobs []string
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if !validSlurmID(line) || slices.Contains(jobs, string(line)) {
			continue
		}
		jobs = append(jobs, string(line))
		if len(jobs) == maxSlurmJobsPerGPU {
			break
		}
	}
	return jobs
}

// --- the series ----------------------------------------------------------------

// soleJob is the job GPU g's mapping file names when it names exactly one:
// then it is the job of the GPU's processes whose environment says nothing
// (as soleHolder is their pod).
func (st *slurmState) soleJob() slurmJob {
	if len(st.mapped.gpu) != 1 {
		return slurmJob{}
	}
	return slurmJob{id: st.mapped.gpu[0]}
}

// recordSlurmJobs reports the Slurm jobs holding GPU g and its MIG
// instances: those of its processes' environments, then those of its
// mapping files that the environments did not name, at most
// maxSlurmJobsPerGPU series.
func (s *gpuScraper) recordSlurmJobs(g *gpu, ts pcommon.Timestamp) {
	st := &g.slurm
	if !s.cfg.Metrics.NvidiaGpuSlurmJob.Enabled || len(st.jobs) == 0 && len(st.mapped.gpu) == 0 && len(st.mapped.mig) == 0 {
		return
	}
	var done []slurmJob
	record := func(migID string, j slurmJob) bool {
		if len(done) == maxSlurmJobsPerGPU {
			return false
		}
		done = append(done, j)
		g.mb.RecordNvidiaGpuSlurmJobDataPoint(ts, 1, g.id, g.name, migID, j.id, j.arrayJob, j.arrayTask, j.step)
		return true
	}
	for _, j := range st.jobs {
		if !slices.Contains(done, j) && !record("", j) {
			return
		}
	}
	for _, id := range st.mapped.gpu {
		if !slices.ContainsFunc(done, func(j slurmJob) bool { return j.id == id }) && !record("", slurmJob{id: id}) {
			return
		}
	}
	if len(st.mapped.mig) == 0 {
		return
	}
	// A MIG instance's file is reported on its MIG devices, which the MIG
	// reading finds; without it (off, or not yet read) it is not.
	if layout := g.tick.migLayout.Load(); layout != nil {
		for _, inst := range *layout {
			for _, id := range st.mapped.mig[inst.gi] {
				if !record(inst.uuid, slurmJob{id: id}) {
					return
				}
			}
		}
	}
}
