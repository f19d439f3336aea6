//go:build integration

package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestEtcd(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t)
	e.Etcdctl(t, "put", "/harness/key", "value")
	if got := e.Etcdctl(t, "get", "--print-value-only", "/harness/key"); got != "value" {
		t.Fatalf("get = %q, want %q", got, "value")
	}

	e.Restart()
	if got := e.Etcdctl(t, "get", "--print-value-only", "/harness/key"); got != "value" {
		t.Fatalf("after restart get = %q, want %q", got, "value")
	}

	client := e.Client(t) // before Pause: connecting to a paused etcd would time out
	e.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := client.Get(ctx, "/harness/key"); err == nil {
		t.Fatal("get from a paused etcd succeeded")
	}
	e.Resume()
	if got := e.Etcdctl(t, "get", "--print-value-only", "/harness/key"); got != "value" {
		t.Fatalf("after resume get = %q, want %q", got, "value")
	}
}

func TestKubeAPIServer(t *testing.T) {
	t.Parallel()
	k := StartKubeAPIServer(t, StartEtcd(t))
	if _, err := os.Stat(k.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(k.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "harness"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "harness", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestCoreDNSEtcd(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t)
	c := StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	etcd cluster.local {
		path /skydns
		endpoint %s
	}
}
`, e.Endpoint))
	e.Etcdctl(t, "put", "/skydns/local/cluster/svc/default/kubernetes/x", `{"host":"10.96.0.1"}`)

	m := new(dns.Msg)
	m.SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	r, err := dns.Exchange(m, c.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Answer) != 1 {
		t.Fatalf("want one answer, got %v", r)
	}
	if a, ok := r.Answer[0].(*dns.A); !ok || a.A.String() != "10.96.0.1" {
		t.Fatalf("want A 10.96.0.1, got %v", r.Answer[0])
	}
}

func TestStartProcess(t *testing.T) {
	t.Parallel()
	bin := BuildBinary(t, "./integration/harness/testdata/sleeper")
	if again := BuildBinary(t, "./integration/harness/testdata/sleeper"); again != bin {
		t.Fatalf("second build went to %s, want cached %s", again, bin)
	}
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(t))
	p := StartProcess(t, bin, []string{"-addr", addr}, nil, func() error {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err
	})

	p.Pause()
	waitProcState(t, p.Pid(), func(s string) bool { return s == "T" })
	p.Resume()
	waitProcState(t, p.Pid(), func(s string) bool { return s != "T" })

	p.Stop()
	if err := p.Wait(); err != nil {
		t.Fatalf("sleeper did not exit cleanly on SIGTERM: %v", err)
	}
}

// waitProcState waits until the state letter in /proc/<pid>/stat satisfies
// ok; signals are delivered asynchronously.
func waitProcState(t *testing.T, pid int, ok func(string) bool) {
	t.Helper()
	var state string
	for range 100 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The command name before the state is in parentheses and may
		// contain spaces.
		state = strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))[0]
		if ok(state) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d stuck in state %q", pid, state)
}

// Pause returns only once every thread of the process has stopped, so a
// request sent after it cannot be answered.
func TestPauseWaitsForTheStop(t *testing.T) {
	t.Parallel()
	p := StartProcess(t, "/bin/sleep", []string{"60"}, nil, nil)
	if stopped(p.Pid()) {
		t.Fatal("a running process reads as stopped")
	}
	p.Pause()
	if !stopped(p.Pid()) {
		t.Fatal("Pause returned before the process stopped")
	}
	p.Resume()
	deadline := time.Now().Add(2 * time.Second)
	for stopped(p.Pid()) {
		if time.Now().After(deadline) {
			t.Fatal("the process still reads as stopped 2 s after Resume")
		}
		time.Sleep(time.Millisecond)
	}
}
