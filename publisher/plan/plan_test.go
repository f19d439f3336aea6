package plan

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/etcdns/etcdns/keys"
)

var layout = keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1", TTL: 5}

func addr(t *testing.T, name, ip string) keys.Record {
	t.Helper()
	r, err := layout.Address(name, "service/default/a", netip.MustParseAddr(ip))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ptr(t *testing.T, ip, target string) keys.Record {
	t.Helper()
	r, err := layout.PTR(netip.MustParseAddr(ip), "service/default/a", target)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func kinds(ops []Op) []string {
	var out []string
	for _, o := range ops {
		out = append(out, fmt.Sprintf("%s %s %d", o.Kind, o.Key, o.ModRev))
	}
	return out
}

func TestDiff(t *testing.T) {
	a := addr(t, "a.default.svc.cluster.local", "10.0.0.1")
	b := addr(t, "a.default.svc.cluster.local", "10.0.0.2")
	p := ptr(t, "10.0.0.1", "a.default.svc.cluster.local")
	changed := p
	changed.Value.TTL = 30

	tests := []struct {
		name      string
		desired   []keys.Record
		owned     map[string]Entry
		held      map[string]string
		want      []string
		unchanged int
		conflicts int
	}{
		{name: "nothing", want: nil},
		{name: "create", desired: []keys.Record{a, p},
			want: []string{"put " + p.Key + " 0", "put " + a.Key + " 0"}},
		{name: "unchanged is not rewritten", desired: []keys.Record{a},
			owned: map[string]Entry{a.Key: {Sum: SumOf(a.Value.Encode()), ModRev: 7}}, unchanged: 1},
		{name: "changed value overwrites at its revision", desired: []keys.Record{changed},
			owned: map[string]Entry{p.Key: {Sum: SumOf(p.Value.Encode()), ModRev: 9}},
			want:  []string{"put " + p.Key + " 9"}},
		{name: "no longer desired is deleted, after the puts", desired: []keys.Record{b},
			owned: map[string]Entry{a.Key: {Sum: SumOf(a.Value.Encode()), ModRev: 4}},
			want:  []string{"put " + b.Key + " 0", "delete " + a.Key + " 4"}},
		{name: "object gone: everything deleted", desired: nil,
			owned: map[string]Entry{a.Key: {ModRev: 4}, p.Key: {ModRev: 5}},
			want:  []string{"delete " + p.Key + " 5", "delete " + a.Key + " 4"}},
		{name: "held by another owner: not written", desired: []keys.Record{a, p},
			held: map[string]string{p.Key: "c1 service/default/b"},
			want: []string{"put " + a.Key + " 0"}, conflicts: 1},
		{name: "duplicates in desired count once", desired: []keys.Record{a, a},
			want: []string{"put " + a.Key + " 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := func(k string) (string, bool) { o, ok := tt.held[k]; return o, ok }
			r := Diff(tt.desired, tt.owned, held)
			if got := kinds(r.Ops); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ops:\n got %q\nwant %q", got, tt.want)
			}
			if r.Unchanged != tt.unchanged || len(r.Conflicts) != tt.conflicts {
				t.Errorf("unchanged %d conflicts %d, want %d %d", r.Unchanged, len(r.Conflicts), tt.unchanged, tt.conflicts)
			}
		})
	}
}

func TestDiffValuesAreExactBytes(t *testing.T) {
	a := addr(t, "a.default.svc.cluster.local", "10.0.0.1")
	r := Diff([]keys.Record{a}, nil, nil)
	if string(r.Ops[0].Value) != string(a.Value.Encode()) {
		t.Fatalf("value %s, want %s", r.Ops[0].Value, a.Value.Encode())
	}
}

func TestSplit(t *testing.T) {
	var ops []Op
	for i := range 10 {
		ops = append(ops, Op{Kind: Put, Key: fmt.Sprintf("/k/%02d", i), Value: make([]byte, 100)})
	}
	if got := Split(nil, 10, 1<<20); got != nil {
		t.Fatalf("empty: %v", got)
	}
	if got := Split(ops, 128, 1<<20); len(got) != 1 || len(got[0]) != 10 {
		t.Fatalf("fits: %d txns", len(got))
	}
	// One slot per txn is the fence's.
	got := Split(ops, 4, 1<<20)
	if len(got) != 4 || len(got[0]) != 3 || len(got[3]) != 1 {
		t.Fatalf("by ops: %d txns, sizes %d..%d", len(got), len(got[0]), len(got[len(got)-1]))
	}
	got = Split(ops, 128, 1024+3*ops[0].Size())
	if len(got) != 4 {
		t.Fatalf("by bytes: %d txns", len(got))
	}
	var flat []Op
	for _, t := range got {
		flat = append(flat, t...)
	}
	if !reflect.DeepEqual(flat, ops) {
		t.Fatal("split changed the order")
	}
}

func TestIndex(t *testing.T) {
	a := addr(t, "a.default.svc.cluster.local", "10.0.0.1")
	other := a.Value
	other.Cluster = "c2"
	kvs := []KV{
		{Key: a.Key, Value: a.Value.Encode(), ModRev: 3},
		{Key: "/skydns/local/cluster/x/1", Value: other.Encode(), ModRev: 4},
		{Key: "/skydns/local/cluster/x/2", Value: []byte("not json"), ModRev: 5},
		{Key: "/skydns/local/cluster/x/3", Value: []byte(`{"host":"10.0.0.9"}`), ModRev: 6},
	}
	x, st := Load("c1", kvs)
	if st != (LoadStats{Owned: 1, Foreign: 2, Malformed: 1}) {
		t.Fatalf("stats %+v", st)
	}
	if got := x.Sources(); !reflect.DeepEqual(got, []string{"service/default/a"}) {
		t.Fatalf("sources %v", got)
	}
	if e := x.Owned("service/default/a")[a.Key]; e.ModRev != 3 {
		t.Fatalf("owned %+v", e)
	}
	held := x.HeldBy("service/default/b")
	for _, k := range []string{a.Key, "/skydns/local/cluster/x/1", "/skydns/local/cluster/x/2"} {
		if _, ok := held(k); !ok {
			t.Errorf("%s not held", k)
		}
	}
	if _, ok := x.HeldBy("service/default/a")(a.Key); ok {
		t.Error("own key reported held")
	}

	freed := x.Applied("service/default/a", []Op{{Kind: Delete, Key: a.Key}, {Kind: Put, Key: "/k", Value: a.Value.Encode()}}, 10)
	if !reflect.DeepEqual(freed, []string{a.Key}) || x.Owned("service/default/a")["/k"].ModRev != 10 || x.Len() != 1 {
		t.Fatalf("applied: freed %v owned %v", freed, x.Owned("service/default/a"))
	}
	x.Refresh([]KV{{Key: "/k", Value: other.Encode(), ModRev: 11}}, nil, 11)
	if len(x.Sources()) != 0 {
		t.Fatal("a key taken over by another cluster is still ours")
	}
	if _, ok := x.HeldBy("service/default/a")("/k"); !ok {
		t.Fatal("refreshed key not held")
	}
}
