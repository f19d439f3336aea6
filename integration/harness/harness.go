package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StartupTimeout bounds how long a Start function waits for readiness.
var StartupTimeout = time.Minute

var repoRoot = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod found above the working directory")
		}
		dir = parent
	}
})

// RepoRoot returns the directory holding go.mod, found by walking up from
// the working directory (go test runs in the package directory).
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Tool returns the path of a binary installed by hack/tools.sh. A directory
// named by ETCDNS_TOOLS_DIR is looked in first, so a test can run against a
// binary built elsewhere (a new etcd release being tried) without replacing
// the installed one that other tests use.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv("ETCDNS_TOOLS_DIR"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p := filepath.Join(RepoRoot(t), ".cache", "tools", "bin", name)
	if _, err := os.Stat(p); err != nil {
		missing(t, fmt.Sprintf("%s not found at %s: run hack/tools.sh", name, p))
	}
	return p
}

// SystemTool returns the path of a binary installed by the system package
// manager (dnsperf, dig, kdig, knotd), also looking in the sbin directories
// that are often missing from PATH.
func SystemTool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	missing(t, fmt.Sprintf("%s not found on PATH: run hack/tools.sh as root", name))
	return ""
}

func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("ETCDNS_ALLOW_SKIP") == "1" {
		t.Skip(msg)
	}
	t.Fatal(msg + " (or set ETCDNS_ALLOW_SKIP=1 to skip)")
}

var (
	portsMu sync.Mutex
	// Ports handed out by this test binary. The kernel may hand a port back
	// once its listener is closed, so parallel tests could collide without it.
	usedPorts = map[int]bool{}
)

// FreePort returns a port on 127.0.0.1 that is free for both TCP and UDP,
// because DNS servers bind both on the same number.
//
// It is drawn below the kernel's ephemeral range, not from it: a process
// the tests restart on its port (an etcd member stopped and started again)
// would otherwise find it taken by some client's outgoing connection, which
// the kernel gives any free port of that range, and fail with "address
// already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := portsBelowEphemeral()
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if usedPorts[port] {
			continue
		}
		tcp, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		udp, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		tcp.Close()
		if err != nil {
			continue
		}
		udp.Close()
		usedPorts[port] = true
		return port
	}
	t.Fatal("no port free for both TCP and UDP after 1000 attempts")
	return 0
}

// portsBelowEphemeral is the range FreePort draws from: from 10000 up to
// the start of net.ipv4.ip_local_port_range (32768 by default).
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

type buildResult struct {
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]func() buildResult{}
)

// BuildBinary builds a package of this module (for example "./cmd/dnsd")
// once per test binary run and returns the path of the executable. Where
// ETCDNS_BIN_DIR is set, the binary of that name in it is used instead and
// nothing is built: a bench compiled here can then run on a machine that
// has no Go (bench/remote.sh).
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	if dir := os.Getenv("ETCDNS_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, path.Base(pkg))
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("ETCDNS_BIN_DIR: %v", err)
		}
		return p
	}
	root := RepoRoot(t)
	buildsMu.Lock()
	build, ok := builds[pkg]
	if !ok {
		build = sync.OnceValue(func() buildResult { return goBuild(root, pkg) })
		builds[pkg] = build
	}
	buildsMu.Unlock()
	res := build()
	if res.err != nil {
		t.Fatalf("building %s: %v", pkg, res.err)
	}
	return res.path
}

func goBuild(root, pkg string) buildResult {
	dir, err := binDir()
	if err != nil {
		return buildResult{err: err}
	}
	// A directory per package: two packages may share a base name.
	dir, err = os.MkdirTemp(dir, "")
	if err != nil {
		return buildResult{err: err}
	}
	out := filepath.Join(dir, path.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	// Static, as deploy/docker builds the images: no libc mapped beside
	// the binary, and Go's own resolver, in what the tests and benches run.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return buildResult{err: fmt.Errorf("%v\n%s", err, b)}
	}
	return buildResult{path: out}
}

// binDir outlives single tests (t.TempDir would not), so it is keyed by pid
// and directories of test binaries that have exited are removed here.
var binDir = sync.OnceValues(func() (string, error) {
	base := filepath.Join(os.TempDir(), "etcdns-harness-bin")
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
	dir := filepath.Join(base, strconv.Itoa(os.Getpid()))
	return dir, os.MkdirAll(dir, 0o755)
})
