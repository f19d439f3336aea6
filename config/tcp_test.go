package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// dnsd's DNS-over-TCP bounds (issue 9 item 7): defaults from config.yaml,
// settable by flag and environment, and a bad value stops dnsd with an
// error naming the key.
func TestTCPSettings(t *testing.T) {
	c, err := load(t, nil, "etcd", "cluster", "dnsd")
	if err != nil {
		t.Fatal(err)
	}
	if c.Dnsd.TCPIdleTimeout != 10*time.Second || c.Dnsd.TCPMaxConnections != 1024 {
		t.Errorf("defaults: idle %s, max %d; want 10s, 1024", c.Dnsd.TCPIdleTimeout, c.Dnsd.TCPMaxConnections)
	}
	t.Setenv("ETCDNS_DNSD_TCP_MAX_CONNECTIONS", "16")
	c, err = load(t, []string{"--dnsd.tcp-idle-timeout", "1500ms"}, "etcd", "cluster", "dnsd")
	if err != nil {
		t.Fatal(err)
	}
	if c.Dnsd.TCPIdleTimeout != 1500*time.Millisecond || c.Dnsd.TCPMaxConnections != 16 {
		t.Errorf("set: idle %s, max %d; want 1.5s, 16", c.Dnsd.TCPIdleTimeout, c.Dnsd.TCPMaxConnections)
	}
	os.Unsetenv("ETCDNS_DNSD_TCP_MAX_CONNECTIONS") // set empty, it would be an error of its own
	for _, tc := range []struct{ args []string }{
		{[]string{"--dnsd.tcp-idle-timeout", "0s"}},
		{[]string{"--dnsd.tcp-idle-timeout", "-1s"}},
		{[]string{"--dnsd.tcp-idle-timeout", "soon"}},
		{[]string{"--dnsd.tcp-max-connections", "0"}},
		{[]string{"--dnsd.tcp-max-connections", "-5"}},
		{[]string{"--dnsd.tcp-max-connections", "lots"}},
	} {
		key := strings.TrimPrefix(tc.args[0], "--")
		if _, err := load(t, tc.args, "etcd", "cluster", "dnsd"); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%v: error %v; want one naming %s", tc.args, err, key)
		}
	}
}
