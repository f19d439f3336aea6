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
// ignored, as encoding/json does for CoreDNS.
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
// wrong type is an error). CoreDNS fails the whole query when any value
// of the range it read is malformed; dnsd skips that value alone.
func Decode(value []byte) (Service, error) {
	var s Service
	v := bytes.TrimSpace(value)
	if len(v) == 0 || v[0] != '{' {
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

// Tree is one zone's values, sorted by key as etcd sorts them. It is
// never changed once made.
type Tree struct {
	items []Item
}

// Len is the number of values held.
func (t *Tree) Len() int {
	if t == nil {
		return 0
	}
	return len(t.items)
}

// Get returns the value stored at key.
func (t *Tree) Get(key string) (Item, bool) {
	if t == nil {
		return Item{}, false
	}
	i, ok := slices.BinarySearchFunc(t.items, key, func(it Item, k string) int { return strings.Compare(it.Key, k) })
	if !ok {
		return Item{}, false
	}
	return t.items[i], true
}

// Prefix returns the values whose keys start with p, in key order. The
// slice is the tree's own: callers must not change it.
func (t *Tree) Prefix(p string) []Item {
	if t == nil {
		return nil
	}
	lo, _ := slices.BinarySearchFunc(t.items, p, func(it Item, k string) int { return strings.Compare(it.Key, k) })
	hi := lo
	for hi < len(t.items) && strings.HasPrefix(t.items[hi].Key, p) {
		hi++
	}
	return t.items[lo:hi:hi]
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
func (b *Batch) Put(key string, value []byte) error {
	s, err := Decode(value)
	if err != nil {
		b.changes[strings.Clone(key)] = nil
		return err
	}
	b.changes[strings.Clone(key)] = &s
	return nil
}

// Delete removes key.
func (b *Batch) Delete(key string) { b.changes[strings.Clone(key)] = nil }

// Done returns the new tree: one merge of the sorted changes into the
// old items, O(tree + changes log changes). The old tree is untouched.
func (b *Batch) Done() *Tree {
	if len(b.changes) == 0 && b.base != nil {
		return b.base
	}
	keys := make([]string, 0, len(b.changes))
	for k := range b.changes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var old []Item
	if b.base != nil {
		old = b.base.items
	}
	out := make([]Item, 0, len(old)+len(keys))
	i := 0
	for _, k := range keys {
		for i < len(old) && old[i].Key < k {
			out = append(out, old[i])
			i++
		}
		if i < len(old) && old[i].Key == k {
			i++ // replaced or deleted
		}
		if s := b.changes[k]; s != nil {
			out = append(out, Item{Key: k, Service: *s})
		}
	}
	out = append(out, old[i:]...)
	return &Tree{items: slices.Clip(out)}
}
