package harness

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU is the user plus system time the process has used so far, all
// threads included, from /proc/<pid>/stat; 0 once it is gone.
func (p *Process) CPU() time.Duration { return ProcCPU(p.Pid()) }

// Memory is the kB fields of /proc/<pid>/status (VmRSS, VmHWM, ...) in
// bytes; empty once it is gone.
func (p *Process) Memory() map[string]int64 { return ProcMemory(p.Pid()) }

// ProcCPU is Process.CPU for any pid.
func ProcCPU(pid int) time.Duration {
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
