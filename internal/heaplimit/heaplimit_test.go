package heaplimit

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// unsetenv clears name for the test and restores it after; t.Setenv can
// only set, and an empty GOMEMLIMIT still counts as one set.
func unsetenv(t *testing.T, name string) {
	t.Setenv(name, "")
	os.Unsetenv(name)
}

func TestSet(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	const mib = 1 << 20
	cases := []struct {
		name     string
		env      map[string]string
		cgroup   func() (uint64, error)
		want     int64
		wantLogs string // a line the log must have
	}{
		{"nine tenths of the container's", nil, memlimit.Limit(1000 * mib), 900 * mib, "GOMEMLIMIT is updated"},
		{"GOMEMLIMIT wins", map[string]string{"GOMEMLIMIT": "64MiB"}, memlimit.Limit(1000 * mib), 64 * mib, "already set"},
		{"AUTOMEMLIMIT sets the ratio", map[string]string{"AUTOMEMLIMIT": "0.5"}, memlimit.Limit(1000 * mib), 500 * mib, ""},
		{"no limit in the cgroup", nil, func() (uint64, error) { return 0, memlimit.ErrNoLimit }, math.MaxInt64, ""},
		{"no cgroups at all", nil, func() (uint64, error) { return 0, memlimit.ErrCgroupsNotSupported }, math.MaxInt64, ""},
		{"not in a memory cgroup", nil, func() (uint64, error) { return 0, memlimit.ErrNoCgroup }, math.MaxInt64, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			unsetenv(t, "GOMEMLIMIT")
			unsetenv(t, "AUTOMEMLIMIT")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			// A process started with GOMEMLIMIT has it in force already.
			start := int64(math.MaxInt64)
			if _, ok := c.env["GOMEMLIMIT"]; ok {
				start = 64 * mib
			}
			debug.SetMemoryLimit(start)
			fromCgroup = c.cgroup
			defer func() { fromCgroup = memlimit.FromCgroup }()
			var logs bytes.Buffer
			got := Set(slog.New(slog.NewTextHandler(&logs, nil)))
			if got != c.want || debug.SetMemoryLimit(-1) != c.want {
				t.Errorf("Set = %d, runtime's limit %d; want %d", got, debug.SetMemoryLimit(-1), c.want)
			}
			if c.wantLogs != "" && !strings.Contains(logs.String(), c.wantLogs) {
				t.Errorf("log %q lacks %q", logs.String(), c.wantLogs)
			}
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Errorf("logged an error: %q", logs.String())
			}
		})
	}
}
