package forward

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

func newStubs(t *testing.T, c StubConfig) *Stubs {
	t.Helper()
	if c.Timeout == 0 {
		c.Timeout = 300 * time.Millisecond
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:1"
	}
	if c.Option == 0 {
		c.Option = 65002
	}
	c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := NewStubs(c, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewStubsChecks(t *testing.T) {
	for _, c := range []StubConfig{
		{Timeout: time.Second, Listen: "127.0.0.1:53", Option: 65000},
		{Timeout: time.Second, Listen: "127.0.0.1:53", Option: 65535},
		{Timeout: 0, Listen: "127.0.0.1:53", Option: 65002},
		{Timeout: time.Second, Listen: "nowhere", Option: 65002},
	} {
		if _, err := NewStubs(c, prometheus.NewRegistry()); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// Every question to a stub domain carries the source-cluster option, even
// without a cluster id, and nothing else of the client's EDNS(0); a dead
// nameserver hands over to the next.
func TestStubForward(t *testing.T) {
	u := startUpstream(t, answerA)
	for _, cluster := range []string{"c1", ""} {
		s := newStubs(t, StubConfig{Cluster: cluster})
		req := query("Web.myfed.svc.federation.", dns.TypeA, 7)
		req.SetEdns0(4096, true)
		req.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"}}
		m := s.Forward(context.Background(), req, []netip.AddrPort{silent(t), u.addr})
		if m.Rcode != dns.RcodeSuccess || m.Id != 7 || len(m.Answer) != 1 || m.Answer[0].Header().Name != "Web.myfed.svc.federation." {
			t.Fatalf("cluster %q: %v", cluster, m)
		}
		got, _ := u.asked()
		opt := got[len(got)-1].IsEdns0()
		if opt == nil || !opt.Do() || len(opt.Option) != 1 {
			t.Fatalf("cluster %q: the nameserver got %v", cluster, opt)
		}
		if l, ok := opt.Option[0].(*dns.EDNS0_LOCAL); !ok || l.Code != 65002 || string(l.Data) != cluster {
			t.Errorf("cluster %q: option %v", cluster, opt.Option[0])
		}
		if !s.Looped(got[len(got)-1]) {
			t.Error("a question dnsd stub-forwarded is not seen as looped")
		}
	}

	s := newStubs(t, StubConfig{})
	if m := s.Forward(context.Background(), query("x.dead.", dns.TypeA, 9), []netip.AddrPort{silent(t)}); m.Rcode != dns.RcodeServerFailure || m.Id != 9 {
		t.Errorf("no nameserver answering: %v", m)
	}
	if got := value(s.results.WithLabelValues("timeout")); got != 1 {
		t.Errorf("timeouts counted %v", got)
	}
	if s.Looped(query("x.", dns.TypeA, 1)) || value(s.loops) != 0 {
		t.Error("a plain question seen as looped")
	}
}

func TestStubUsableSkipsSelf(t *testing.T) {
	s := newStubs(t, StubConfig{Listen: "127.0.0.1:1053"})
	in := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1053"), netip.MustParseAddrPort("10.0.0.1:53"), netip.MustParseAddrPort("127.0.0.1:53")}
	got := s.Usable("myfed.svc.federation", in)
	if len(got) != 2 || got[0].String() != "10.0.0.1:53" || got[1].String() != "127.0.0.1:53" {
		t.Errorf("usable %v", got)
	}
	s.Usable("myfed.svc.federation", []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1053")})
	if n := value(s.selfSkips); n != 2 {
		t.Errorf("self skips %v, want 2", n)
	}
	wild := newStubs(t, StubConfig{Listen: "0.0.0.0:1053"})
	if got := wild.Usable("d", []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:1053")}); len(got) != 0 {
		t.Errorf("dnsd on every address: %v usable", got)
	}
}
