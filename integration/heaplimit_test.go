//go:build integration

package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdns/etcdns/integration/harness"
)

// TestHeapLimitFromCgroup runs dnsd and the publisher each in a memory
// cgroup of 200 MiB, as a pod with that limit runs, with no GOMEMLIMIT
// given: each must hand its Go runtime nine tenths of the limit, as its
// /metrics shows (go_gc_gomemlimit_bytes).
func TestHeapLimitFromCgroup(t *testing.T) {
	const limit = 200 << 20
	const want = limit * 9 / 10
	root := harness.RepoRoot(t)
	etcd := harness.StartEtcd(t)

	dnsdMetrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	inCgroup(t, memoryCgroup(t, "dnsd", limit), harness.BuildBinary(t, "./cmd/dnsd"), []string{
		"--etcd.endpoints=" + etcd.Endpoint, fmt.Sprintf("--dnsd.listen=127.0.0.1:%d", harness.FreePort(t)),
		"--dnsd.metrics-listen=" + dnsdMetrics,
	}, "http://"+dnsdMetrics)
	pubMetrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	inCgroup(t, memoryCgroup(t, "publisher", limit), harness.BuildBinary(t, "./cmd/publisher"), []string{
		"--etcd.endpoints=" + etcd.Endpoint, "--publisher.source=files:" + filepath.Join(root, "examples"),
		"--cluster.id=local", "--publisher.metrics-listen=" + pubMetrics,
	}, "http://"+pubMetrics)

	for name, base := range map[string]string{"dnsd": "http://" + dnsdMetrics, "publisher": "http://" + pubMetrics} {
		if got := faultMetric(t, base, "go_gc_gomemlimit_bytes"); got != want {
			t.Errorf("%s in a %d-byte cgroup: go_gc_gomemlimit_bytes %.0f, want %d", name, limit, got, want)
		}
	}
}

// inCgroup starts a program inside the cgroup dir: a shell joins it and
// execs the program, which so starts already under the limit.
func inCgroup(t *testing.T, dir, bin string, args []string, metrics string) {
	t.Helper()
	harness.StartProcess(t, "/bin/sh", slices.Concat([]string{
		"-c", `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`, "sh", dir, bin,
	}, args), nil, func() error { return harness.HTTPOK(metrics + "/readyz") })
}

// memoryCgroup makes a memory cgroup limited to limit bytes, on cgroup v2
// or v1, and removes it once the test's processes are gone. It skips the
// test where this process may not make one (not root, no memory
// controller).
func memoryCgroup(t *testing.T, name string, limit int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a memory cgroup needs root")
	}
	parent, file := "/sys/fs/cgroup/memory", "memory.limit_in_bytes" // v1
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		if !slices.Contains(strings.Fields(string(b)), "memory") {
			t.Skip("cgroup v2 without the memory controller")
		}
		parent, file = "/sys/fs/cgroup", "memory.max"
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			t.Skipf("enabling the memory controller: %v", err)
		}
	}
	dir := filepath.Join(parent, fmt.Sprintf("etcdns-test-%s-%d", name, os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("making a memory cgroup: %v", err)
	}
	// Registered before the process starts, so it runs after the process
	// is killed; the kernel lets a cgroup go only once its last task has.
	t.Cleanup(func() {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("removing %s: %v", dir, err)
				}
				return
			}
		}
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(fmt.Sprint(limit)), 0); err != nil {
		t.Fatalf("limiting %s: %v", dir, err)
	}
	return dir
}
