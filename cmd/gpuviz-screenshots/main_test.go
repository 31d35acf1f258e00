package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary is also the tool (role screenshots) and a fake collector
// (role fake) that never answers and runs until stopped.
func TestMain(m *testing.M) {
	switch os.Getenv("GPUVIZ_SCREENSHOTS_TEST_ROLE") {
	case "screenshots":
		main()
		os.Exit(0)
	case "fake":
		select {}
	case "view":
		fakeView()
	}
	os.Exit(m.Run())
}

// start starts the tool with args, its temporary files under a test
// directory.
func start(t *testing.T, args ...string) (*exec.Cmd, *strings.Builder) {
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, args...)
	// Not t.TempDir(): under a long test name Chromium's socket path in
	// TMPDIR passes the 107 bytes a Unix socket's path may have.
	tmp, err := os.MkdirTemp("", "gs")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	cmd.Env = append(os.Environ(), "GPUVIZ_SCREENSHOTS_TEST_ROLE=screenshots", "TMPDIR="+tmp)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	return cmd, &stderr
}

// wait waits up to timeout for cmd and returns its exit status.
func wait(t *testing.T, cmd *exec.Cmd, timeout time.Duration, stderr *strings.Builder) int {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running after %v; stderr:\n%s", timeout, stderr.String())
		return -1
	}
}

// Ctrl-C while the collector comes up (or the page fills) stops the
// collector and the load generator, which run in process groups of their
// own that the terminal's SIGINT does not reach.
func TestInterruptStopsTheCollector(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	collector := filepath.Join(dir, "collector")
	require.NoError(t, os.WriteFile(collector, fmt.Appendf(nil,
		"#!/bin/sh\necho $$ > %s\nGPUVIZ_SCREENSHOTS_TEST_ROLE=fake exec %s\n", pidFile, self), 0o755))
	cmd, stderr := start(t, "--collector", collector, "--loadgen", "/nonexistent", "--chromium", "/nonexistent", "--out", dir)
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, 20*time.Second, 50*time.Millisecond)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	time.Sleep(500 * time.Millisecond) // the tool polls the view
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	code := wait(t, cmd, 30*time.Second, stderr)
	assert.NotEqual(t, 0, code, stderr.String())
	assert.Error(t, syscall.Kill(pid, 0), "the collector (pid %d) still runs after the tool stopped", pid)
}

// A flag outside what the tool can take is refused before anything runs,
// naming the flag: --range 61 drew a 61 s window, --range 0 the page's
// 300 s, --gpus 0 ran 8 GPUs and waited minutes for a page of none.
func TestNonsenseFlagsAreRefused(t *testing.T) {
	for _, c := range []struct{ args []string }{
		{[]string{"--range", "61"}},
		{[]string{"--range", "0"}},
		{[]string{"--gpus", "0"}},
		{[]string{"--gpus", "-1"}},
		{[]string{"--warmup", "-1s"}},
		{[]string{"stray"}},
	} {
		args := append([]string{"--collector", "/nonexistent", "--chromium", "/nonexistent"}, c.args...)
		cmd, stderr := start(t, args...)
		code := wait(t, cmd, 30*time.Second, stderr)
		assert.Equal(t, 2, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr.String(), strings.TrimLeft(c.args[0], "-"), "%v", c.args)
	}
}

// fakePage has what viewcheck.Ready, HoverChart and ClickRequest look for:
// one GPU's six charts with points, heatmap cells, a lane with a request bar
// in phases that shows the details when clicked; %s is a script of its own.
const fakePage = `<!doctype html><html><body>
<div id="status">live</div><div id="summary">1 GPU</div>
<div id="chart-rows"><div class="gpu-row" data-gpu="GPU-0">%s</div></div>
<div id="heatmap" data-cells="4"></div>
<div class="lane" data-gpus="GPU-0"><div class="lane-body" style="position:relative;width:400px;height:20px">
<div class="request-bar" data-trace-id="abc" style="position:absolute;left:10px;width:200px;height:20px;background:#888"
 onclick="document.getElementById('details').hidden = false">
<span class="phase" data-phase="prefill">p</span><span class="phase" data-phase="decode">d</span></div></div></div>
<div id="details" hidden><span data-trace-id="abc">abc</span></div>
<script>%s</script>
</body></html>`

// fakeView is a collector whose gpuviz_view serves one GPU's fakePage on
// the endpoint of its --config; with GPUVIZ_SCREENSHOTS_TEST_CONSOLE set the
// page logs that as a console error.
func fakeView() {
	conf, err := os.ReadFile(os.Args[len(os.Args)-1])
	if err != nil {
		panic(err)
	}
	m := regexp.MustCompile(`gpuviz_view:\s*endpoint: (\S+)`).FindSubmatch(conf)
	if m == nil {
		panic("no gpuviz_view endpoint in " + string(conf))
	}
	var charts strings.Builder
	for _, c := range []string{"util", "memory", "power", "temperature", "clock", "io"} {
		fmt.Fprintf(&charts, `<div class="chart" data-chart="%s" data-points="5"><canvas></canvas>`+
			`<div class="u-over" style="width:300px;height:40px"></div></div>`, c)
	}
	script := ""
	if msg := os.Getenv("GPUVIZ_SCREENSHOTS_TEST_CONSOLE"); msg != "" {
		script = fmt.Sprintf("console.error(%q)", msg)
	}
	page := fmt.Sprintf(fakePage, charts.String(), script)
	http.HandleFunc("/api/v1/sources", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"sources": [{"id": "fake", "simulated": true, "gpus": 1}]}`)
	})
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) })
	panic(http.ListenAndServe(string(m[1]), nil))
}

// screenshots runs the tool against fakeView (the page logging consoleError
// unless it is empty) with out holding the pictures of an earlier run, and
// returns its exit status, stderr and the work directories it left in its
// TMPDIR. loadgenScript is the fake load generator, or "" for one
// that runs until stopped.
func screenshots(t *testing.T, out, consoleError, loadgenScript string) (int, string, []string) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		// .ci/run installs it (make chromium) before make test: under CI
		// its absence fails rather than skipping the browser silently.
		const why = "no Chromium at /usr/bin/chromium (make chromium installs it)"
		if os.Getenv("CI") != "" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	collector := filepath.Join(dir, "collector")
	require.NoError(t, os.WriteFile(collector, fmt.Appendf(nil,
		"#!/bin/sh\nGPUVIZ_SCREENSHOTS_TEST_ROLE=view GPUVIZ_SCREENSHOTS_TEST_CONSOLE=%q exec %s \"$@\"\n", consoleError, self), 0o755))
	if loadgenScript == "" {
		loadgenScript = fakeLoadgen(t, "")
	}
	loadgen := filepath.Join(dir, "loadgen")
	require.NoError(t, os.WriteFile(loadgen, []byte(loadgenScript), 0o755))
	cmd, stderr := start(t, "--collector", collector, "--loadgen", loadgen, "--out", out, "--gpus", "1", "--warmup", "0s")
	code := wait(t, cmd, 3*time.Minute, stderr)
	tmp := ""
	for _, kv := range cmd.Env { // start's TMPDIR is the last
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok {
			tmp = v
		}
	}
	work, err := filepath.Glob(filepath.Join(tmp, "gpuviz-screenshots-*"))
	require.NoError(t, err)
	return code, stderr.String(), work
}

// fakeLoadgen is a load generator's script that runs until stopped, first
// writing its PID to pidFile unless that is "".
func fakeLoadgen(t *testing.T, pidFile string) string {
	self, err := os.Executable()
	require.NoError(t, err)
	script := "#!/bin/sh\n"
	if pidFile != "" {
		script += "echo $$ > " + pidFile + "\n"
	}
	return script + "GPUVIZ_SCREENSHOTS_TEST_ROLE=fake exec " + self + "\n"
}

// A page that logged an error fails the run before anything is written:
// the pictures of the last good run stay as they were (they were
// overwritten, and then the run exited 1), and the work directory with the
// logs is kept for the errors.
func TestAPageThatLoggedAnErrorLeavesThePictures(t *testing.T) {
	out := t.TempDir()
	old := map[string][]byte{"view.png": []byte("the committed view"), "view-requests.png": []byte("the committed requests")}
	for name, b := range old {
		require.NoError(t, os.WriteFile(filepath.Join(out, name), b, 0o644))
	}
	code, stderr, work := screenshots(t, out, "the view broke", "")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "the page logged errors")
	assert.Contains(t, stderr, "the view broke")
	for name, b := range old {
		got, err := os.ReadFile(filepath.Join(out, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(b, got), "%s was overwritten by a failed run (%d bytes now)", name, len(got))
	}
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Len(t, entries, len(old), "a temporary file left in %s", out)
	require.Len(t, work, 1, "the work directory was not kept after a failure")
	assert.Contains(t, stderr, work[0], "the error does not say where the logs are")
	assert.FileExists(t, filepath.Join(work[0], "collector.log"))
}

// A run that passes writes both pictures in place of the old ones, leaves
// no temporary file beside them, stops the load generator and the
// collector, and removes its work directory.
func TestAGoodRunWritesThePicturesAndRemovesItsWorkDirectory(t *testing.T) {
	out := t.TempDir()
	for _, name := range []string{"view.png", "view-requests.png"} {
		require.NoError(t, os.WriteFile(filepath.Join(out, name), []byte("old"), 0o644))
	}
	pidFile := filepath.Join(t.TempDir(), "loadgen.pid")
	code, stderr, work := screenshots(t, out, "", fakeLoadgen(t, pidFile))
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	assert.Error(t, syscall.Kill(pid, 0), "the load generator (pid %d) still runs after the tool ended", pid)
	for _, name := range []string{"view.png", "view-requests.png"} {
		got, err := os.ReadFile(filepath.Join(out, name))
		require.NoError(t, err)
		assert.True(t, bytes.HasPrefix(got, []byte("\x89PNG")), "%s is not a PNG", name)
		fi, err := os.Stat(filepath.Join(out, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), name)
	}
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "a temporary file left in %s", out)
	assert.Empty(t, work, "the work directory was kept after a good run")
}

// A load generator that stopped by itself is reported with its log, and
// the work directory that holds the log is kept, though the pictures were
// taken.
func TestAStackProcessThatExitedKeepsItsLog(t *testing.T) {
	out := t.TempDir()
	code, stderr, work := screenshots(t, out, "", "#!/bin/sh\necho the load generator broke\nexit 3\n")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "loadgen exited")
	require.Len(t, work, 1, "the work directory was not kept after a process exited")
	log := filepath.Join(work[0], "loadgen.log")
	assert.Contains(t, stderr, log)
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Contains(t, string(b), "the load generator broke")
}

// A picture that cannot be put in place fails the write, and the pictures
// written beside it are not left as temporary files in the directory.
func TestWriteFilesLeavesNoTemporaryFileWhenOneFails(t *testing.T) {
	out := t.TempDir()
	// A directory, not empty, where view.png goes: the rename fails.
	require.NoError(t, os.MkdirAll(filepath.Join(out, "view.png", "x"), 0o755))
	err := writeFiles(out, map[string][]byte{"view.png": []byte("view"), "view-requests.png": []byte("requests")})
	require.Error(t, err)
	tmps, err := filepath.Glob(filepath.Join(out, ".*"))
	require.NoError(t, err)
	assert.Empty(t, tmps, "temporary files left in %s", out)
}
