//go:build unix

package store

import (
	"syscall"
	"time"
)

// cpuTime is the process's user and system time so far: a benchmark's
// share of the GC runs on other threads, and ns/op does not see it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
