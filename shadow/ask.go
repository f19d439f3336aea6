package shadow

import (
	"context"
	"fmt"
	"time"

	"github.com/miekg/dns"
)

// Ask sends each question to a and b (host:port) and compares the
// responses. A question goes over UDP with a 4096-octet EDNS(0) buffer and
// again over TCP when a response is truncated, so both are compared whole.
// A server that does not answer a question gives a Failed difference.
func Ask(ctx context.Context, a, b string, qs []Question, timeout time.Duration) []Difference {
	var out []Difference
	for _, q := range qs {
		if ctx.Err() != nil {
			break
		}
		ra, erra := exchange(ctx, a, q, timeout)
		rb, errb := exchange(ctx, b, q, timeout)
		switch {
		case erra != nil || errb != nil:
			out = append(out, Difference{Question: q, Class: Failed, Detail: fmt.Sprintf("a: %v; b: %v", erra, errb)})
		default:
			out = append(out, Compare(q, ra, rb)...)
		}
	}
	return out
}

func exchange(ctx context.Context, addr string, q Question, timeout time.Duration) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	m.SetEdns0(4096, false)
	r, _, err := (&dns.Client{Net: "udp", Timeout: timeout}).ExchangeContext(ctx, m, addr)
	if err == nil && r.Truncated {
		r, _, err = (&dns.Client{Net: "tcp", Timeout: timeout}).ExchangeContext(ctx, m, addr)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}
