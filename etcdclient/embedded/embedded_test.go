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

// A port picked for etcd that another process takes before etcd binds it
// (parallel tests racing for ports) makes Start pick again, not fail.
func TestEmbeddedPicksAgainWhenAPickedPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	free := pickPort
	pickPort = func(host string) (string, error) {
		picks++
		if picks == 1 {
			return taken.Addr().String(), nil
		}
		return free(host)
	}
	defer func() { pickPort = free }()
	e, u, err := Start(config.Embedded{DataDir: t.TempDir(), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer e.Close()
	if picks < 3 || strings.HasSuffix(u, taken.Addr().String()) {
		t.Errorf("%d ports picked, client URL %s; want the taken %s given up and two more picked", picks, u, taken.Addr())
	}
}

// A port the configuration names is not Start's to change: taken, it is
// an error at once.
func TestEmbeddedKeepsAGivenPortThatIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	free := pickPort
	pickPort = func(host string) (string, error) {
		picks++
		return free(host)
	}
	defer func() { pickPort = free }()
	_, _, err = Start(config.Embedded{DataDir: t.TempDir(), ClientURL: "http://" + taken.Addr().String(), PeerURL: "http://127.0.0.1:0"}, nil)
	if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) || picks != 1 {
		t.Errorf("Start on a taken client port: %v after %d picks; want its error after 1", err, picks)
	}
}
