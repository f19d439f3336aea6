package plan

import (
	"sort"

	"github.com/etcdns/etcdns/keys"
)

// Index is what this cluster owns in etcd, by source (the unit), plus who
// holds every other key seen in the same ranges, so that Diff does not try
// to create a key someone else already holds. It is not safe for concurrent
// use; the publisher guards it.
type Index struct {
	cluster  string
	bySource map[string]map[string]Entry
	owner    map[string]string // key -> source, for keys we own
	foreign  map[string]string // key -> "cluster source", for keys we do not
}

// LoadStats counts what Load met besides our own records.
type LoadStats struct {
	Owned     int
	Foreign   int // valid values of another cluster, or with no cluster
	Malformed int // values that are not records; never touched
}

// KV is one key and value as read from etcd.
type KV struct {
	Key    string
	Value  []byte
	ModRev int64
}

// NewIndex returns an empty index for cluster.
func NewIndex(cluster string) *Index {
	return &Index{
		cluster:  cluster,
		bySource: map[string]map[string]Entry{},
		owner:    map[string]string{},
		foreign:  map[string]string{},
	}
}

// Load builds the index from one consistent read of the ranges this cluster
// writes. A record is ours iff its value names our cluster and a source;
// everything else is remembered only as held by someone else.
func Load(cluster string, kvs []KV) (*Index, LoadStats) {
	x := NewIndex(cluster)
	var st LoadStats
	for _, kv := range kvs {
		v, err := keys.Decode(kv.Value)
		switch {
		case err != nil:
			st.Malformed++
			x.foreign[kv.Key] = "malformed"
		case v.Cluster != cluster || v.Source == "":
			st.Foreign++
			x.foreign[kv.Key] = v.Cluster + " " + v.Source
		default:
			st.Owned++
			x.set(v.Source, kv.Key, Entry{Sum: SumOf(kv.Value), ModRev: kv.ModRev})
		}
	}
	return x, st
}

func (x *Index) set(source, key string, e Entry) {
	m := x.bySource[source]
	if m == nil {
		m = map[string]Entry{}
		x.bySource[source] = m
	}
	m[key] = e
	x.owner[key] = source
	delete(x.foreign, key)
}

// Owned returns a copy of the entries of one source.
func (x *Index) Owned(source string) map[string]Entry {
	m := x.bySource[source]
	out := make(map[string]Entry, len(m))
	for k, e := range m {
		out[k] = e
	}
	return out
}

// Sources lists every source that owns at least one key, sorted.
func (x *Index) Sources() []string {
	out := make([]string, 0, len(x.bySource))
	for s := range x.bySource {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Len is the number of keys this cluster owns.
func (x *Index) Len() int { return len(x.owner) }

// HeldBy reports who other than source holds key. It is Diff's Holder.
func (x *Index) HeldBy(source string) Holder {
	return func(key string) (string, bool) {
		if s, ok := x.owner[key]; ok && s != source {
			return x.cluster + " " + s, true
		}
		if o, ok := x.foreign[key]; ok {
			return o, true
		}
		return "", false
	}
}

// Applied records a committed transaction: puts now hold their value at rev,
// deletes are gone. It returns the keys that were freed, so that units
// waiting for them can be retried.
func (x *Index) Applied(source string, ops []Op, rev int64) (freed []string) {
	for _, o := range ops {
		if o.Kind == Put {
			x.set(source, o.Key, Entry{Sum: SumOf(o.Value), ModRev: rev})
			continue
		}
		x.remove(o.Key)
		freed = append(freed, o.Key)
	}
	return freed
}

func (x *Index) remove(key string) {
	if s, ok := x.owner[key]; ok {
		m := x.bySource[s]
		delete(m, key)
		if len(m) == 0 {
			delete(x.bySource, s)
		}
		delete(x.owner, key)
	}
	delete(x.foreign, key)
}

// Refresh replaces what the index knows about keys with a fresh read, after
// a guard failed: present holds the keys that exist now, absent are gone.
func (x *Index) Refresh(present []KV, absent []string) {
	for _, k := range absent {
		x.remove(k)
	}
	for _, kv := range present {
		x.remove(kv.Key)
		v, err := keys.Decode(kv.Value)
		switch {
		case err != nil:
			x.foreign[kv.Key] = "malformed"
		case v.Cluster != x.cluster || v.Source == "":
			x.foreign[kv.Key] = v.Cluster + " " + v.Source
		default:
			x.set(v.Source, kv.Key, Entry{Sum: SumOf(kv.Value), ModRev: kv.ModRev})
		}
	}
}
