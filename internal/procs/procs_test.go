package procs

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ports FreePorts hands out are free, never handed out twice, and
// never ones the kernel would pick for a listener on :0.
func TestFreePortsAreOutsideTheEphemeralRangeAndNotRepeated(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	// A listener on :0 takes a port from the ephemeral range.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	ephemeral := l.Addr().(*net.TCPAddr).Port
	require.GreaterOrEqual(t, ephemeral, hi, "the kernel's pick")

	seen := map[int]bool{}
	for range 3 {
		ports, err := FreePorts(5)
		require.NoError(t, err)
		require.Len(t, ports, 5)
		for _, p := range ports {
			assert.False(t, seen[p], "port %d handed out twice", p)
			seen[p] = true
			assert.True(t, p >= lo && p < hi, "port %d outside %d-%d", p, lo, hi-1)
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if assert.NoError(t, err, "port %d is free", p) {
				l.Close()
			}
		}
	}
}

// Stop stops what a process left running in its group after it exited:
// here a shell that starts a sleep in the background and exits.
func TestStopStopsWhatAnExitedProcessLeftInItsGroup(t *testing.T) {
	dir := t.TempDir()
	g, err := NewGroup(dir)
	require.NoError(t, err)
	pidFile := filepath.Join(dir, "sleep.pid")
	p, err := g.Spawn("leader", "/bin/sh", "-c", `sleep 60 & echo $! > "$0"`, pidFile)
	require.NoError(t, err)
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the shell did not exit")
	}
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	sleep, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(sleep, syscall.SIGKILL) })
	require.True(t, running(sleep), "the sleep runs after the shell exited")

	g.Stop()
	for deadline := time.Now().Add(30 * time.Second); running(sleep); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sleep (PID %d) still runs after Stop", sleep)
		}
	}
}

// running reports whether process pid exists and is not a zombie (an init
// in a container may never reap the orphans it gets).
func running(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, _, ok := procStat(strconv.Itoa(pid))
	return ok && state != "Z"
}

// What ignores SIGTERM in an exited process's group gets SIGKILL when the
// grace ends.
func TestStopKillsWhatIgnoresTermInAnExitedProcessGroup(t *testing.T) {
	dir := t.TempDir()
	g, err := NewGroup(dir)
	require.NoError(t, err)
	pidFile := filepath.Join(dir, "sleep.pid")
	// An ignored signal stays ignored across exec.
	p, err := g.Spawn("leader", "/bin/sh", "-c", `(trap '' TERM; exec sleep 60) & echo $! > "$0"`, pidFile)
	require.NoError(t, err)
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the shell did not exit")
	}
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	sleep, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(sleep, syscall.SIGKILL) })
	require.True(t, running(sleep), "the sleep runs after the shell exited")

	p.stop(100 * time.Millisecond)
	for deadline := time.Now().Add(30 * time.Second); running(sleep); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sleep (PID %d) still runs after stop", sleep)
		}
	}
}
