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

// StartKnot serves one zone from a real Knot DNS on a loopback port and
// returns it once it answers. zone is the zone file's body after its
// $ORIGIN line.
func StartKnot(t testing.TB, origin, zone string) *Knot {
	t.Helper()
	bin := SystemTool(t, "knotd")
	dir := t.TempDir()
	port := FreePort(t)
	conf := fmt.Sprintf(`server:
    rundir: "%[1]s"
    listen: 127.0.0.1@%[2]d
database:
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
`, dir, port, origin)
	files := map[string]string{"zone": "$ORIGIN " + origin + ".\n" + zone, "knot.conf": conf}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := &Knot{Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	k.Process = StartProcess(t, bin, []string{"-c", filepath.Join(dir, "knot.conf")}, nil, func() error { return DNSAlive(k.Addr) })
	return k
}
