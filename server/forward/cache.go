package forward

import (
	"math"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// key is what an upstream's answer depends on; RD is not in it because
// only recursion-desired questions are forwarded.
type key struct {
	name          string // lowercase: 0x20 spellings share an entry
	qtype, qclass uint16
	do, cd        bool
}

type entry struct {
	m       *dns.Msg
	expires time.Time
}

// cache holds upstream answers for their TTL, at most size of them.
type cache struct {
	size   int
	maxTTL uint32

	mu sync.Mutex
	m  map[key]entry
}

// get returns a copy of the live entry of k, its TTLs lowered to the time
// it has left, or nil.
func (c *cache) get(k key, now time.Time) *dns.Msg {
	c.mu.Lock()
	e, ok := c.m[k]
	if ok && !now.Before(e.expires) {
		delete(c.m, k)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	left := uint32((e.expires.Sub(now) + time.Second - 1) / time.Second)
	m := e.m.Copy()
	for _, s := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range s {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl = left
			}
		}
	}
	return m
}

// put keeps a copy of m for k if it may be cached.
func (c *cache) put(k key, m *dns.Msg, now time.Time) {
	t := min(ttl(m), c.maxTTL)
	if t == 0 {
		return
	}
	m = m.Copy()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.size {
		for old := range c.m {
			delete(c.m, old) // map order is random: a random victim, no bookkeeping
			break
		}
	}
	c.m[k] = entry{m: m, expires: now.Add(time.Duration(t) * time.Second)}
}

// ttl is how long m may be cached: its smallest TTL, or for a negative
// answer its SOA's negative TTL (RFC 2308 section 5); 0 when it must not
// be, as errors other than NXDOMAIN and negative answers without SOA.
func ttl(m *dns.Msg) uint32 {
	if m.Truncated || m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError {
		return 0
	}
	if m.Rcode == dns.RcodeNameError || len(m.Answer) == 0 {
		for _, rr := range m.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				return min(soa.Hdr.Ttl, soa.Minttl)
			}
		}
		return 0
	}
	t := uint32(math.MaxUint32)
	for _, s := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range s {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				t = min(t, h.Ttl)
			}
		}
	}
	return t
}
