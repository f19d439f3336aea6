package snap

import "testing"

// A Mark tells its snapshot from any other, a packed copy of the same
// revision included, and whether another holds the same stub domains: a
// record batch leaves them, a stub batch does not.
func TestMark(t *testing.T) {
	s, errs := Build([]Config{cfg}, 3, []KV{
		{"/skydns/local/cluster/dns/stub/federation/svc/myfed/ns1", []byte(`{"host":"10.0.0.1"}`)},
		{"/skydns/local/cluster/svc/ns/a/x", []byte(`{"host":"10.1.0.1"}`)},
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	m := s.Mark()
	same := &Snapshot{Rev: s.Rev, Zones: s.Zones}
	if !m.Of(s) || m.Of(same) || m.Rev != 3 || (Mark{}).Of(s) {
		t.Fatalf("Of: own %v, a copy of the same revision %v, Rev %d, zero Mark %v; want true, false, 3, false", m.Of(s), m.Of(same), m.Rev, (Mark{}).Of(s))
	}

	b := s.Zones[0].Edit()
	owner, e, err := s.Zones[0].Parse("/skydns/local/cluster/svc/ns/b/x", []byte(`{"host":"10.1.0.2"}`))
	if err != nil {
		t.Fatal(err)
	}
	b.Put(owner, e)
	records := NewSnapshot(4, []*Zone{b.Done(4)})
	b = records.Zones[0].Edit()
	if _, err := b.PutStub("/skydns/local/cluster/dns/stub/federation/svc/myfed/ns2", []byte(`{"host":"10.0.0.2"}`)); err != nil {
		t.Fatal(err)
	}
	stubs := NewSnapshot(5, []*Zone{b.Done(5)})
	if !m.SameStubs(same) || !m.SameStubs(records) || m.SameStubs(stubs) || records.Mark().SameStubs(stubs) {
		t.Errorf("SameStubs: same %v, after a record batch %v, after a stub batch %v (and from the record batch %v); want true, true, false, false",
			m.SameStubs(same), m.SameStubs(records), m.SameStubs(stubs), records.Mark().SameStubs(stubs))
	}
}
