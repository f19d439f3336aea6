//go:build linux

package server

import "testing"

func TestWildcard(t *testing.T) {
	for addr, want := range map[string]bool{
		":53": true, "0.0.0.0:53": true, "[::]:53": true, "[::]:0": true,
		"127.0.0.1:53": false, "[::1]:53": false, "10.0.0.1:0": false, "nope": false,
	} {
		if wildcard(addr) != want {
			t.Errorf("wildcard(%q) = %v", addr, !want)
		}
	}
}
