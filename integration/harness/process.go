package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long Stop waits after SIGTERM before sending SIGKILL.
const stopGrace = 5 * time.Second

// How much of a process log is printed when a test fails. The project's own
// programs get more room than etcd, kube-apiserver and CoreDNS, and long
// lines are cut, so a CI excerpt still shows the failure above the logs; the
// whole log stays at LogPath.
const (
	ownLogTailLines   = 40
	otherLogTailLines = 8
	logLineWidth      = 300
)

// Process is a running program with its own process group, so signals reach
// any children it forks too.
type Process struct {
	Name    string
	Path    string
	Args    []string
	Env     []string
	LogPath string

	t     testing.TB
	ready func() error

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid once done is closed
}

// StartProcess starts the program at path with args and env added to the
// test's environment, then polls readyCheck (if not nil) until it returns
// nil, the process exits, or StartupTimeout passes. Output goes to a log file
// whose tail is printed if the test fails; the process is killed in
// t.Cleanup.
func StartProcess(t testing.TB, path string, args, env []string, readyCheck func() error) *Process {
	t.Helper()
	name := filepath.Base(path)
	p := &Process{
		Name:    name,
		Path:    path,
		Args:    args,
		Env:     env,
		LogPath: filepath.Join(t.TempDir(), name+".log"),
		t:       t,
		ready:   readyCheck,
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			p.dumpLog()
		}
	})
	p.start()
	return p
}

func (p *Process) start() {
	p.t.Helper()
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close() // the child has its own copy
	fmt.Fprintf(log, "==== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.Path, strings.Join(p.Args, " "))

	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Pdeathsig covers what t.Cleanup cannot: the test binary itself being
	// killed (go test -timeout, Ctrl-C). It fires when the starting OS thread
	// exits, which Go only does for a goroutine that exits while locked with
	// runtime.LockOSThread (as netns helpers may): don't start processes
	// from one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("starting %s: %v", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	p.waitReady(done)
}

func (p *Process) waitReady(done chan struct{}) {
	p.t.Helper()
	if p.ready == nil {
		return
	}
	deadline := time.Now().Add(StartupTimeout)
	for {
		err := p.ready()
		if err == nil {
			return
		}
		select {
		case <-done:
			p.t.Fatalf("%s exited during startup: %v (log: %s)", p.Name, p.Wait(), p.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready after %v: %v (log: %s)", p.Name, StartupTimeout, err, p.LogPath)
		}
	}
}

// Pid returns the process id of the current incarnation, 0 if it never
// started.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done is closed when the current incarnation exits.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return closed
	}
	return p.done
}

// Wait waits for the process to exit and returns its exit error.
func (p *Process) Wait() error {
	<-p.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stop sends SIGTERM and, if the process has not exited after 5s, SIGKILL.
// It returns once the process has exited.
func (p *Process) Stop() {
	done := p.Done()
	p.signal(syscall.SIGTERM)
	// A stopped process cannot act on SIGTERM until it is continued.
	p.signal(syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(stopGrace):
		p.Kill()
	}
}

// Kill sends SIGKILL and returns once the process has exited.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
	<-p.Done()
}

// KillAll sends SIGKILL to every process of ps first and only then waits
// for each to exit: a thousand bench frontends killed one after another,
// each waited for, outlasted a 16-core run's deadline (bench/fleet, stop
// 37).
func KillAll(ps []*Process) {
	for _, p := range ps {
		p.signal(syscall.SIGKILL)
	}
	for _, p := range ps {
		<-p.Done()
	}
}

// Pause freezes the process (SIGSTOP), for example to simulate a hung peer.
// It returns once every thread of it has stopped: the signal only asks,
// and on a busy machine a thread can still answer a request sent just
// after it (TestEtcd saw one).
func (p *Process) Pause() {
	p.signal(syscall.SIGSTOP)
	pid := p.Pid()
	for deadline := time.Now().Add(5 * time.Second); pid != 0 && !stopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			// A thread in a long disk wait stops when it returns; the
			// test goes on rather than fail for the disk.
			p.t.Logf("%s: a thread had not stopped 5 s after SIGSTOP", p.Name)
			return
		}
	}
}

// stopped reports whether every thread of pid is stopped, or pid is gone.
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread has exited
		}
		// The state follows the command name, which is in parentheses
		// and may itself hold spaces or parentheses.
		_, rest, ok := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
		if !ok || rest == "" || rest[0] != 'T' && rest[0] != 't' {
			return false
		}
	}
	return true
}

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() { p.signal(syscall.SIGCONT) }

// Restart stops the process and starts it again with the same arguments,
// appending to the same log, and waits for readiness again.
func (p *Process) Restart() {
	p.t.Helper()
	p.Stop()
	p.start()
}

// signal sends sig to the whole process group, which may outlive its leader
// if the leader forked. A group that is already gone is not an error.
func (p *Process) signal(sig syscall.Signal) {
	pid := p.Pid()
	if pid == 0 {
		return
	}
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.t.Errorf("sending %v to %s: %v", sig, p.Name, err)
	}
}

func (p *Process) dumpLog() {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		p.t.Logf("reading %s log: %v", p.Name, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	n := otherLogTailLines
	if p.Name == "dnsd" || p.Name == "publisher" {
		n = ownLogTailLines
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > logLineWidth {
			lines[i] = l[:logLineWidth] + " [...]"
		}
	}
	p.t.Logf("last %d lines of %s:\n%s", len(lines), p.LogPath, strings.Join(lines, "\n"))
}
