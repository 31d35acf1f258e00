// Package procs runs the child processes of the demo and of the end-to-end
// and browser tests (internal/stack, internal/viewcheck): each in its own
// process group with its log in a work directory, waited for until it
// answers, and stopped newest first. FreePorts finds the ports they listen
// on, for the hardware check (cmd/gpucheck) too.
package procs // import "github.com/gpuviz/gpuviz/internal/procs"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Group is a set of child processes sharing a work directory.
type Group struct {
	dir   string
	procs []*Proc
}

// Proc is one child process.
type Proc struct {
	Name string
	Log  string // its stdout and stderr
	cmd  *exec.Cmd
	pgid int // its process group, its own PID from the start
	done chan struct{}
	err  error
}

// NewGroup returns a group whose processes run in dir (created if needed)
// and log to dir/<name>.log.
func NewGroup(dir string) (*Group, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Group{dir: dir}, nil
}

// Spawn starts bin with args as name.
func (g *Group) Spawn(name, bin string, args ...string) (*Proc, error) {
	return g.SpawnEnv(name, nil, bin, args...)
}

// SpawnEnv starts bin with args as name, with env (KEY=value) added to
// this process's environment.
func (g *Group) SpawnEnv(name string, env []string, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(g.dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = g.dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that stopping it stops whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	g.procs = append(g.procs, p)
	return p, nil
}

// Pid is p's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to p's process group.
func (p *Proc) Signal(sig syscall.Signal) error {
	// Never -0 (our own group) or -1 (every process we may signal), nor
	// the group this process is in.
	if p.pgid <= 1 || p.pgid == syscall.Getpgrp() {
		return fmt.Errorf("%s: process group %d is not its own", p.Name, p.pgid)
	}
	return syscall.Kill(-p.pgid, sig)
}

// Done is closed when p has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Memory is what /proc says of a process's memory, in bytes.
type Memory struct {
	RSS  int64 // VmRSS: resident now
	Peak int64 // VmHWM: the most it was resident
}

// Memory reads p's memory from /proc.
func (p *Proc) Memory() (Memory, error) { return ReadMemory(p.Pid()) }

// ReadMemory reads process pid's memory from /proc/PID/status.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	for line := range strings.SplitSeq(string(b), "\n") {
		var into *int64
		switch f := strings.Fields(line); {
		case len(f) != 3 || f[2] != "kB":
			continue
		case f[0] == "VmRSS:":
			into = &m.RSS
		case f[0] == "VmHWM:":
			into = &m.Peak
		default:
			continue
		}
		kib, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		*into = kib << 10
	}
	return m, nil
}

// Exited reports whether p has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Procs returns the group's processes, oldest first.
func (g *Group) Procs() []*Proc { return g.procs }

// Log returns the path of a process's log.
func (g *Group) Log(name string) string { return filepath.Join(g.dir, name+".log") }

// Exited reports the first process that has stopped by itself, among those
// expected says should still run (all when expected is nil).
func (g *Group) Exited(expected func(*Proc) bool) error {
	for _, p := range g.procs {
		if expected != nil && !expected(p) {
			continue
		}
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited (%v); log: %s", p.Name, err, p.Log)
		}
	}
	return nil
}

// Wait waits for the named process to exit, or the context to end.
func (g *Group) Wait(ctx context.Context, name string) error {
	for _, p := range g.procs {
		if p.Name == name {
			select {
			case <-p.done:
				return p.err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return fmt.Errorf("no process %s", name)
}

// Stop stops every process, newest first: SIGTERM to its group, SIGKILL
// after 10 s if it or anything left in its group still runs. A process
// that has exited is no exception: what it started may still run.
func (g *Group) Stop() {
	for i := len(g.procs) - 1; i >= 0; i-- {
		g.procs[i].stop(10 * time.Second)
	}
}

// stop sends SIGTERM to p's group and waits for p and the rest of the
// group until grace ends, then sends SIGKILL to the group.
func (p *Proc) stop(grace time.Duration) {
	if p.Signal(syscall.SIGTERM) != nil && !p.exited() {
		// Not a group of its own (or gone): the process alone.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(grace)
	select {
	case <-p.done:
	case <-deadline:
		_ = p.Signal(syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
		<-p.done
		return
	}
	for groupRunning(p.pgid) {
		select {
		case <-deadline:
			_ = p.Signal(syscall.SIGKILL)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *Proc) exited() bool {
	done, _ := p.Exited()
	return done
}

// groupRunning reports whether process group pgid has a member that has
// not exited. A zombie has exited: one left by a process that had the
// group's leader as its parent waits for an init to reap it, and an init
// in a container may never do so.
func groupRunning(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		state, group, ok := procStat(e.Name())
		if ok && group == pgid && state != "Z" {
			return true
		}
	}
	return false
}

// procStat reads a process's state and process group from
// /proc/PID/stat: "PID (comm) STATE PPID PGRP ...".
func procStat(pid string) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0], pgrp, err == nil
}

// WaitReady polls ready every 250 ms until it succeeds, p exits or a minute
// (or the context) ends.
func WaitReady(ctx context.Context, p *Proc, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.err)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// HTTPReady is ready when url answers 200.
func HTTPReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// TCPReady is ready when addr accepts a connection.
func TCPReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// FreePorts returns n loopback TCP ports that were free a moment ago and
// that this process has not handed out before. They come from below the
// kernel's ephemeral range: a port the kernel picks for a listener on :0
// or for an outgoing connection (the collectors make many) is never one
// of them, so a child binding one later does not find it taken.
func FreePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := portsBelowEphemeral()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for tried := 0; len(ports) < n; tried++ {
		if tried == hi-lo {
			return nil, fmt.Errorf("no %d free loopback ports in %d-%d", n, lo, hi-1)
		}
		nextPort++
		if nextPort < lo || nextPort >= hi {
			nextPort = lo + os.Getpid()%(hi-lo)
		}
		if handedOut[nextPort] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(nextPort)))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		handedOut[nextPort] = true
		ports = append(ports, nextPort)
	}
	return ports, nil
}

var (
	portsMu   sync.Mutex
	nextPort  int
	handedOut = map[int]bool{}
)

// portsBelowEphemeral is the range FreePorts takes ports from: 10000 up
// to the start of the kernel's ephemeral range (32768 by default).
func portsBelowEphemeral() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if start, err := strconv.Atoi(f[0]); err == nil && start > lo+1000 {
				hi = start
			}
		}
	}
	return lo, hi
}
