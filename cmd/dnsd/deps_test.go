package main

import (
	"os/exec"
	"strings"
	"testing"
)

// dnsd only dials etcd. Linking etcd's server (through etcdclient/embedded,
// which only the publisher may import) made its binary 4.5 MB larger and
// its heap and mapped code at 10k records 2.6 MiB larger (bench/README.md).
func TestDnsdDoesNotLinkEtcdServer(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list dnsd's packages with")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "go.etcd.io/etcd/server/") || pkg == "github.com/etcdns/etcdns/etcdclient/embedded" {
			t.Errorf("dnsd links %s", pkg)
		}
	}
}
