package embedded

import (
	"net"
	"strings"
	"testing"

	"github.com/etcdns/etcdns/config"
)

func TestEmbeddedRefusesNonLoopback(t *testing.T) {
	_, _, err := Start(config.Embedded{DataDir: t.TempDir(), ClientURL: "http://0.0.0.0:2379", PeerURL: "http://127.0.0.1:0"}, nil)
	if err == nil {
		t.Fatal("want an error for a non-loopback client URL")
	}
}

// takenPort returns an address a listener holds until the test ends.
func takenPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// countPicks counts the ports Start picks until the test ends; the first
// is first where that is not "".
func countPicks(t *testing.T, first string) *int {
	picks := 0
	free := pickPort
	pickPort = func(host string) (string, error) {
		picks++
		if picks == 1 && first != "" {
			return first, nil
		}
		return free(host)
	}
	t.Cleanup(func() { pickPort = free })
	return &picks
}

// A port picked for etcd that another process takes before etcd binds it
// (parallel tests racing for ports) makes Start pick again, not fail.
func TestEmbeddedPicksAgainWhenAPickedPortIsTaken(t *testing.T) {
	taken := takenPort(t)
	picks := countPicks(t, taken)
	e, u, err := Start(config.Embedded{DataDir: t.TempDir(), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer e.Close()
	if *picks < 3 || strings.HasSuffix(u, taken) {
		t.Errorf("%d ports picked, client URL %s; want the taken %s given up and two more picked", *picks, u, taken)
	}
}

// A port the configuration names is not Start's to change: taken, it is
// an error at once.
func TestEmbeddedKeepsAGivenPortThatIsTaken(t *testing.T) {
	taken := takenPort(t)
	picks := countPicks(t, "")
	_, _, err := Start(config.Embedded{DataDir: t.TempDir(), ClientURL: "http://" + taken, PeerURL: "http://127.0.0.1:0"}, nil)
	if err == nil || !strings.Contains(err.Error(), taken) || *picks != 1 {
		t.Errorf("Start on a taken client port: %v after %d picks; want its error after 1", err, *picks)
	}
}
