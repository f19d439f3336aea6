package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
)

// CoreDNS is a running CoreDNS server.
type CoreDNS struct {
	*Process
	Addr     string // 127.0.0.1:port, UDP and TCP
	Corefile string // path of the rendered Corefile
}

// StartCoreDNS renders corefile, a text/template in which {{.Port}} is the
// port the harness picked, starts CoreDNS with it and waits until it answers
// a query over UDP. The Corefile should say "bind 127.0.0.1" in its server
// blocks, or CoreDNS listens on every interface.
func StartCoreDNS(t testing.TB, corefile string) *CoreDNS {
	t.Helper()
	bin := Tool(t, "coredns")
	tmpl, err := template.New("Corefile").Option("missingkey=error").Parse(corefile)
	if err != nil {
		t.Fatalf("parsing Corefile template: %v", err)
	}
	port := FreePort(t)
	var rendered strings.Builder
	if err := tmpl.Execute(&rendered, struct{ Port int }{port}); err != nil {
		t.Fatalf("rendering Corefile: %v", err)
	}
	c := &CoreDNS{
		Addr:     fmt.Sprintf("127.0.0.1:%d", port),
		Corefile: filepath.Join(t.TempDir(), "Corefile"),
	}
	if err := os.WriteFile(c.Corefile, []byte(rendered.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Process = StartProcess(t, bin, []string{"-conf", c.Corefile}, nil, func() error {
		return DNSAlive(c.Addr)
	})
	return c
}
