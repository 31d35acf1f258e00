package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	}
	os.Exit(m.Run())
}

// start starts the tool with args, its temporary files under a test
// directory.
func start(t *testing.T, args ...string) (*exec.Cmd, *strings.Builder) {
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), "GPUVIZ_SCREENSHOTS_TEST_ROLE=screenshots", "TMPDIR="+t.TempDir())
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
