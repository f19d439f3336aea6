package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CPU is the time the process has run on a CPU so far, all threads
// included; 0 once it is gone.
func (p *Process) CPU() time.Duration { return ProcCPU(p.Pid()) }

// Memory is the kB fields of /proc/<pid>/status (VmRSS, VmHWM, ...) in
// bytes; empty once it is gone.
func (p *Process) Memory() map[string]int64 { return ProcMemory(p.Pid()) }

// ProcCPU is Process.CPU for any pid. It reads the process's CPU-time
// clock, which Linux keeps in nanoseconds and lets any process read:
// /proc/<pid>/stat counts in ticks of 10 ms, which left a bench's idle
// figure over five seconds at 0, 2 or 4 ms/s and nothing between. The
// ticks are the fallback where the clock cannot be read.
func ProcCPU(pid int) time.Duration {
	var ts unix.Timespec
	// clock_getcpuclockid(3): the process clock of pid, CPUCLOCK_SCHED.
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err == nil {
		return time.Duration(ts.Nano())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields count from its
	// ")": utime and stime are fields 14 and 15, in USER_HZ (100 on every
	// Linux ABI).
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// ProcSwitches is the context switches, voluntary and not, of all the
// process's threads so far: a goroutine handing work to a parked one wakes
// a thread, and each wake-up is a switch (dear on a virtual machine).
func ProcSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that has just exited
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
	}
	return n
}

// ProcMemory is Process.Memory for any pid.
func ProcMemory(pid int) map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if ok && len(fields) == 2 && fields[1] == "kB" {
			if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				out[k] = n << 10
			}
		}
	}
	return out
}
