package etcdclient

import "testing"

func TestWatchReadsTarget(t *testing.T) {
	for addr, want := range map[string][2]string{
		"127.0.0.1:2379":        {"tcp", "127.0.0.1:2379"},
		"[::1]:2379":            {"tcp", "[::1]:2379"},
		"unix:///run/etcd.sock": {"unix", "/run/etcd.sock"},
		"unix:etcd.sock":        {"unix", "etcd.sock"},
	} {
		if n, a := target(addr); n != want[0] || a != want[1] {
			t.Errorf("target(%q) = %s %s; want %s %s", addr, n, a, want[0], want[1])
		}
	}
}
