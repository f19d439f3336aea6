package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Knot is a running Knot DNS server. Its Process is exposed so benchmarks
// can pause it and read its CPU time and memory from /proc.
type Knot struct {
	*Process
	Addr string // 127.0.0.1:port, UDP and TCP
}

// KnotOption changes how StartKnot runs Knot.
type KnotOption func(*knotConfig)

type knotConfig struct {
	workers int    // udp-workers and tcp-workers; 0: Knot's default (one per CPU)
	cpus    string // taskset's CPU list; "": any
}

// KnotWorkers gives Knot n UDP and n TCP workers, as many as the cores it
// is meant to use (Knot's default is one per CPU of the machine).
func KnotWorkers(n int) KnotOption { return func(c *knotConfig) { c.workers = n } }

// KnotCPUs pins Knot to the CPUs of list (taskset -c), as the core-scaling
// bench pins each server to cores of its own.
func KnotCPUs(list string) KnotOption { return func(c *knotConfig) { c.cpus = list } }

// StartKnot serves one zone from a real Knot DNS on a loopback port and
// returns it once it answers. zone is the zone file's body after its
// $ORIGIN line.
func StartKnot(t testing.TB, origin, zone string, opts ...KnotOption) *Knot {
	t.Helper()
	var kc knotConfig
	for _, o := range opts {
		o(&kc)
	}
	bin := SystemTool(t, "knotd")
	dir := t.TempDir()
	port := FreePort(t)
	workers := ""
	if kc.workers > 0 {
		workers = fmt.Sprintf("    udp-workers: %[1]d\n    tcp-workers: %[1]d\n", kc.workers)
	}
	conf := fmt.Sprintf(`server:
    rundir: "%[1]s"
    listen: 127.0.0.1@%[2]d
%[4]sdatabase:
    storage: "%[1]s"
control:
    listen: "%[1]s/knot.sock"
log:
  - target: stderr
    any: info
zone:
  - domain: %[3]s
    storage: "%[1]s"
    file: "zone"
`, dir, port, origin, workers)
	files := map[string]string{"zone": "$ORIGIN " + origin + ".\n" + zone, "knot.conf": conf}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := &Knot{Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	path, args := bin, []string{"-c", filepath.Join(dir, "knot.conf")}
	if kc.cpus != "" {
		path, args = SystemTool(t, "taskset"), append([]string{"-c", kc.cpus, bin}, args...)
	}
	k.Process = StartProcess(t, path, args, nil, func() error { return DNSAlive(k.Addr) })
	return k
}
