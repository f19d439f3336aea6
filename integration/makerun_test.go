//go:build integration

package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/etcdns/etcdns/integration/harness"
)

// TestMakeRun is what a new user does first: `make run` builds both
// programs, publishes examples/ and prints answers. It runs twice, because
// the second run must work over the first one's data without cleanup.
func TestMakeRun(t *testing.T) {
	root := harness.RepoRoot(t)
	for run := 1; run <= 2; run++ {
		cmd := exec.Command("make", "run")
		cmd.Dir = root
		cmd.Env = append(cmd.Environ(), "RUN_ONCE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make run #%d: %v\n%s", run, err, out)
		}
		for _, want := range []string{
			`"1.0.1"`,
			"10.96.0.1",
			"10 100 443 kubernetes.default.svc.cluster.local.",
			"fd00:10:96::a14",
			"10 50 5432 db-0.db.apps.svc.cluster.local.",
			"www.example.com.",
			"10.112.0.20",
			"5432 db-0.local.db.apps.svc.clusterset.local.",
			"status: NXDOMAIN",
			"stopped publisher and dnsd",
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("make run #%d printed no %q:\n%s", run, want, out)
			}
		}
	}
}
