// Package heaplimit gives the Go collector a memory limit below the
// container's, read from the cgroup the process runs in. It is called once,
// first thing in each command, and touches nothing but the runtime's limit.
//
// Go does not read the cgroup's memory limit itself (it reads the CPU quota
// for GOMAXPROCS since 1.25, not memory). The manifests used to hand it the
// container's limit through GOMEMLIMIT, the whole of it; but the limit the
// kernel enforces also counts what the runtime does not manage (the
// binary's pages, the kernel's socket buffers charged to the container), so
// a heap let grow to the whole limit is killed before the collector works
// hard. Nine tenths, automemlimit's default and the Go GC guide's advice
// of 5-10% headroom, leaves that room; and the limit follows the pod's
// resources however they are set (a patched manifest, a VPA), not only
// where an env entry was written beside them.
package heaplimit

import (
	"errors"
	"log/slog"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// fromCgroup is the source of the container's limit; tests replace it.
var fromCgroup = memlimit.FromCgroup

// Set sets the runtime's memory limit to nine tenths of the cgroup's and
// returns the limit in force (math.MaxInt64 for none). GOMEMLIMIT, where
// set, wins; AUTOMEMLIMIT sets another ratio, or "off". A process outside
// any memory cgroup (make run on a laptop) keeps no limit, quietly: that is
// no error. It never fails the program: a limit it cannot read is logged
// and the runtime's left as it was.
func Set(log *slog.Logger) int64 {
	limit, _ := memlimit.Set(memlimit.WithLogger(log), memlimit.WithProvider(func() (uint64, error) {
		n, err := fromCgroup()
		if errors.Is(err, memlimit.ErrCgroupsNotSupported) || errors.Is(err, memlimit.ErrNoCgroup) {
			return 0, memlimit.ErrNoLimit
		}
		return n, err
	}))
	return limit
}
