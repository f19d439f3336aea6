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
	cost    int
}

// cache holds upstream answers for their TTL, at most size of them and
// maxBytes of their cost: an answer can be a TCP answer of 64 KiB, and ten
// thousand of those, from any client the allow list lets forward, were
// most of a gigabyte.
type cache struct {
	size     int
	maxBytes int
	maxTTL   uint32

	mu    sync.Mutex
	m     map[key]entry
	bytes int
}

// entryCost is about what an entry holds beside its answer's wire bytes:
// its key, the map slot and the message's structure. A decoded message
// takes about 1.4 times its wire size (a 60 KB TXT answer held 86 KB).
const entryCost = 256

func cost(m *dns.Msg) int { return entryCost + m.Len()*3/2 }

// get returns a copy of the live entry of k, its TTLs lowered to the time
// it has left, or nil.
func (c *cache) get(k key, now time.Time) *dns.Msg {
	c.mu.Lock()
	e, ok := c.m[k]
	if ok && !now.Before(e.expires) {
		c.drop(k, e)
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
	n := cost(m)
	if n > c.maxBytes/16 {
		return // one answer may not take a sixteenth of the cache
	}
	m = m.Copy()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok {
		c.drop(k, old)
	}
	for old, e := range c.m {
		if len(c.m) < c.size && c.bytes+n <= c.maxBytes {
			break
		}
		c.drop(old, e) // map order is random: random victims, no bookkeeping
	}
	c.m[k] = entry{m: m, expires: now.Add(time.Duration(t) * time.Second), cost: n}
	c.bytes += n
}

// drop removes k, whose entry is e; c.mu is held.
func (c *cache) drop(k key, e entry) {
	delete(c.m, k)
	c.bytes -= e.cost
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
