package procs

import (
	"errors"
	"net"
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
	g, _, sleep := leaveASleep(t, `sleep 60 & echo $! > "$0"`)
	g.Stop()
	for deadline := time.Now().Add(30 * time.Second); running(sleep); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sleep (PID %d) still runs after Stop", sleep)
		}
	}
}

// leaveASleep runs script, a shell that starts a sleep in the background
// and writes its PID to the file $0 names, until it exits; it returns the
// group, the exited shell and the sleep's PID, still running.
func leaveASleep(t *testing.T, script string) (*Group, *Proc, int) {
	t.Helper()
	dir := t.TempDir()
	g, err := NewGroup(dir)
	require.NoError(t, err)
	pidFile := filepath.Join(dir, "sleep.pid")
	p, err := g.Spawn("leader", "/bin/sh", "-c", script, pidFile)
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
	return g, p, sleep
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
	// An ignored signal stays ignored across exec.
	_, p, sleep := leaveASleep(t, `(trap '' TERM; exec sleep 60) & echo $! > "$0"`)
	p.stop(100 * time.Millisecond)
	for deadline := time.Now().Add(30 * time.Second); running(sleep); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sleep (PID %d) still runs after stop", sleep)
		}
	}
}

// Signal never signals group 0 (our own), -1 (every process we may signal)
// or the group we are in: a process without a group of its own is refused.
// Signal 0 only asks, so a wrong answer here signals nothing.
func TestSignalRefusesGroupsNotItsOwn(t *testing.T) {
	for _, pgid := range []int{0, 1, syscall.Getpgrp()} {
		p := &Proc{Name: "x", pgid: pgid}
		assert.Error(t, p.Signal(0), "process group %d", pgid)
	}
	g, err := NewGroup(t.TempDir())
	require.NoError(t, err)
	p, err := g.Spawn("sleep", "sleep", "60")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL); <-p.Done() })
	assert.NoError(t, p.Signal(0), "its own group")
}

// A process that ignores SIGTERM, and what it started, get SIGKILL when
// the grace ends, and stop returns once the process has exited.
func TestStopKillsALeaderThatIgnoresTermAndItsGroup(t *testing.T) {
	dir := t.TempDir()
	g, err := NewGroup(dir)
	require.NoError(t, err)
	pidFile := filepath.Join(dir, "sleep.pid")
	p, err := g.Spawn("leader", "/bin/sh", "-c", `trap '' TERM; sleep 60 & echo $! > "$0.tmp"; mv "$0.tmp" "$0"; wait`, pidFile)
	require.NoError(t, err)
	var b []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, err = os.ReadFile(pidFile); err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err)
	sleep, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(sleep, syscall.SIGKILL); _ = p.Signal(syscall.SIGKILL) })

	p.stop(100 * time.Millisecond)
	select {
	case <-p.Done():
	default:
		t.Fatal("stop returned before the process exited")
	}
	for deadline := time.Now().Add(30 * time.Second); running(sleep); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sleep (PID %d) still runs after stop", sleep)
		}
	}
}

// A group whose only member is a zombie runs nothing: the zombie has
// exited (an init in a container may never reap it). A group with a
// running member runs, whatever its name: /proc/PID/stat's comm may hold
// ") Z 1 1" itself.
func TestGroupRunningCountsAZombieAsExited(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	zombie := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Wait() })
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		state, _, ok := procStat(strconv.Itoa(zombie))
		require.True(t, ok)
		if state == "Z" {
			break
		}
		require.False(t, time.Now().After(deadline), "process %d is not a zombie", zombie)
	}
	assert.False(t, groupRunning(zombie), "a zombie's group")

	dir := t.TempDir()
	sleepBin, err := exec.LookPath("sleep")
	require.NoError(t, err)
	bin, err := os.ReadFile(sleepBin)
	require.NoError(t, err)
	odd := filepath.Join(dir, "x) Z 1 1")
	require.NoError(t, os.WriteFile(odd, bin, 0o755))
	g, err := NewGroup(dir)
	require.NoError(t, err)
	p, err := g.Spawn("odd", odd, "60")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL); <-p.Done() })
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/comm")
		require.NoError(t, err)
		if strings.TrimSpace(string(comm)) == "x) Z 1 1" {
			break
		}
		require.False(t, time.Now().After(deadline), "process %d has not run %s", p.Pid(), odd)
	}
	state, pgrp, ok := procStat(strconv.Itoa(p.Pid()))
	require.True(t, ok)
	assert.NotEqual(t, "Z", state)
	assert.Equal(t, p.Pid(), pgrp)
	assert.True(t, groupRunning(p.Pid()), "a running process's group")
}
