package skydns

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
)

// Service is one decoded value, with the fields CoreDNS's msg.Service
// reads. Unknown fields (external-dns's owner, etcdns's cluster) are
// ignored, as encoding/json does for CoreDNS. It is not keys.Value on
// purpose, though the fields match: keys.Value is etcdns's own contract and
// refuses what etcdns never writes (host and text together, unknown types),
// while a SkyDNS zone must take whatever CoreDNS takes, quirks included.
type Service struct {
	Host        string `json:"host,omitempty"`
	Port        int    `json:"port,omitempty"`
	Priority    int    `json:"priority,omitempty"`
	Weight      int    `json:"weight,omitempty"`
	Text        string `json:"text,omitempty"`
	Mail        bool   `json:"mail,omitempty"`
	TTL         uint32 `json:"ttl,omitempty"`
	TargetStrip int    `json:"targetstrip,omitempty"`
	Group       string `json:"group,omitempty"`
}

// Decode reads a value the way CoreDNS does (encoding/json into its
// msg.Service, so field names match case-insensitively and a field of the
// wrong type is an error, while JSON's null is an empty value). CoreDNS
// fails the whole query when any value of the range it read is malformed;
// dnsd skips that value alone.
func Decode(value []byte) (Service, error) {
	var s Service
	v := bytes.TrimSpace(value)
	if len(v) == 0 || v[0] != '{' && !bytes.Equal(v, []byte("null")) {
		return s, errors.New("value is not a JSON object")
	}
	if err := json.Unmarshal(v, &s); err != nil {
		return Service{}, err
	}
	return s, nil
}

// Item is one stored key and its decoded value.
type Item struct {
	Key string
	Service
}

// Tree is one zone's values, sorted by key as etcd sorts them, in chunks
// of about chunkSize: a change copies the chunks it touches and the list
// of chunks, not the zone. It is never changed once made.
type Tree struct {
	chunks [][]Item // each sorted and non-empty; every key of one before every key of the next
	n      int
}

// chunkSize is the length chunks are cut to; a chunk grows to twice it
// before it is cut again.
const chunkSize = 128

// Len is the number of values held.
func (t *Tree) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// chunkFor is the index of the chunk key belongs in: the first whose last
// key is not below it, or the last chunk.
func (t *Tree) chunkFor(key string) int {
	i, _ := slices.BinarySearchFunc(t.chunks, key, func(c []Item, k string) int { return strings.Compare(c[len(c)-1].Key, k) })
	return min(i, len(t.chunks)-1)
}

func search(items []Item, key string) (int, bool) {
	return slices.BinarySearchFunc(items, key, func(it Item, k string) int { return strings.Compare(it.Key, k) })
}

// Get returns the value stored at key.
func (t *Tree) Get(key string) (Item, bool) {
	if t.Len() == 0 {
		return Item{}, false
	}
	c := t.chunks[t.chunkFor(key)]
	i, ok := search(c, key)
	if !ok {
		return Item{}, false
	}
	return c[i], true
}

// Prefix returns the values whose keys start with p, in key order. The
// slice may be the tree's own: callers must not change it.
func (t *Tree) Prefix(p string) []Item {
	if t.Len() == 0 {
		return nil
	}
	ci := t.chunkFor(p)
	c := t.chunks[ci]
	lo, _ := search(c, p)
	hi := lo
	for hi < len(c) && strings.HasPrefix(c[hi].Key, p) {
		hi++
	}
	if hi < len(c) || ci == len(t.chunks)-1 || !strings.HasPrefix(t.chunks[ci+1][0].Key, p) {
		return c[lo:hi:hi] // within one chunk: no copy
	}
	out := slices.Clone(c[lo:hi])
	for _, c := range t.chunks[ci+1:] {
		for _, it := range c {
			if !strings.HasPrefix(it.Key, p) {
				return out
			}
			out = append(out, it)
		}
	}
	return out
}

// Batch collects changes to a tree; Done applies them all at once.
type Batch struct {
	base    *Tree
	changes map[string]*Service // nil: deleted
}

// Edit starts a batch on t (nil: an empty tree).
func (t *Tree) Edit() *Batch { return &Batch{base: t, changes: map[string]*Service{}} }

// Put decodes value and stores it at key. A malformed value deletes what
// the key held, so a broken write never leaves the old record served, and
// is returned as the error.
func (b *Batch) Put(key string, value []byte) error { return b.put(key, value, false) }

// LeaseTTL is the TTL of a value without one at a key with an etcd lease.
// The lease goes, and the key with it, when its writer stops renewing it;
// the time left, which CoreDNS's etcd plugin gives from 1.12.4 (30 s at
// least), would cost dnsd a request to etcd for each lease. Its least
// keeps a resolver's copy no older than that after the key goes, where
// the zone's TTL (300, CoreDNS's default) would keep it five minutes.
const LeaseTTL = 30

// PutLeased is Put of a key with an etcd lease: a value without a TTL
// gets LeaseTTL.
func (b *Batch) PutLeased(key string, value []byte) error { return b.put(key, value, true) }

func (b *Batch) put(key string, value []byte, leased bool) error {
	s, err := Decode(value)
	if err != nil {
		b.set(key, nil)
		return err
	}
	if leased && s.TTL == 0 {
		s.TTL = LeaseTTL
	}
	b.set(key, &s)
	return nil
}

// Delete removes key.
func (b *Batch) Delete(key string) { b.set(key, nil) }

// set makes s (nil: nothing) the value of key. What the tree holds already
// is no change: a writer that puts every value again (a resync) leaves the
// tree, and the snapshot's answer cache, as they were.
func (b *Batch) set(key string, s *Service) {
	if _, pending := b.changes[key]; !pending {
		it, held := b.base.Get(key)
		if held && s != nil && it.Service == *s || !held && s == nil {
			return
		}
	}
	b.changes[strings.Clone(key)] = s
}

// Changed reports whether the batch holds a change.
func (b *Batch) Changed() bool { return len(b.changes) > 0 }

// Done returns the new tree. Each chunk a change falls in is merged with
// its sorted changes into a new chunk (cut when it grows past twice
// chunkSize, dropped when emptied); the others are shared with the old
// tree, which is untouched. O(chunks + changes log changes).
func (b *Batch) Done() *Tree {
	if len(b.changes) == 0 && b.base != nil {
		return b.base
	}
	keys := make([]string, 0, len(b.changes))
	for k := range b.changes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	old := b.base
	if old == nil {
		old = &Tree{}
	}
	out := &Tree{chunks: make([][]Item, 0, len(old.chunks)+1)}
	next := 0 // the first old chunk not yet in out
	for len(keys) > 0 {
		ci := 0
		if len(old.chunks) > 0 {
			ci = old.chunkFor(keys[0])
		}
		out.chunks = append(out.chunks, old.chunks[next:ci]...)
		var items []Item
		if ci < len(old.chunks) {
			items = old.chunks[ci]
		}
		// The changes that fall in this chunk: up to its last key, or
		// all that are left for the last chunk.
		n := len(keys)
		if ci < len(old.chunks)-1 {
			last := items[len(items)-1].Key
			n, _ = slices.BinarySearch(keys, last)
			if n < len(keys) && keys[n] == last {
				n++
			}
		}
		out.chunks = appendCut(out.chunks, merge(items, keys[:n], b.changes))
		keys = keys[n:]
		next = ci + 1
	}
	if next < len(old.chunks) {
		out.chunks = append(out.chunks, old.chunks[next:]...)
	}
	for _, c := range out.chunks {
		out.n += len(c)
	}
	return out
}

// merge returns items with the sorted changes at keys applied, as a new
// slice.
func merge(items []Item, keys []string, changes map[string]*Service) []Item {
	out := make([]Item, 0, len(items)+len(keys))
	i := 0
	for _, k := range keys {
		for i < len(items) && items[i].Key < k {
			out = append(out, items[i])
			i++
		}
		if i < len(items) && items[i].Key == k {
			i++ // replaced or deleted
		}
		if s := changes[k]; s != nil {
			out = append(out, Item{Key: k, Service: *s})
		}
	}
	return append(out, items[i:]...)
}

// appendCut appends c to chunks, cut into chunkSize pieces when it is
// longer than twice that, nothing when it is empty.
func appendCut(chunks [][]Item, c []Item) [][]Item {
	for len(c) > 2*chunkSize {
		chunks = append(chunks, slices.Clip(c[:chunkSize]))
		c = c[chunkSize:]
	}
	if len(c) > 0 {
		chunks = append(chunks, slices.Clip(c))
	}
	return chunks
}
