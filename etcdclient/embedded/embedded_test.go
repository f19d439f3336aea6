package embedded

import (
	"testing"

	"github.com/etcdns/etcdns/config"
)

func TestEmbeddedRefusesNonLoopback(t *testing.T) {
	_, _, err := Start(config.Embedded{DataDir: t.TempDir(), ClientURL: "http://0.0.0.0:2379", PeerURL: "http://127.0.0.1:0"}, nil)
	if err == nil {
		t.Fatal("want an error for a non-loopback client URL")
	}
}
