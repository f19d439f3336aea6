package snap

// A Mark stands for one snapshot without keeping it alive. The store
// replaces its snapshot with every change and with every packing of the
// tables; whatever still held the old one (the answer cache's view, until
// the next query came) kept all it no longer shares with the new one:
// after a burst at a million records, the scattered tables that packing
// was for. A Mark keeps a few bytes instead, and still tells its snapshot
// from every other, since it holds what its identity is made of.
type Mark struct {
	id    *ident
	Rev   int64
	stubs []stubsVersion // by zone
}

// ident is one snapshot's identity; not zero-sized, so that no two share
// an address.
type ident struct{ _ byte }

// stubsVersion tells one zone's stub domains from any others: a zone's
// stubs change only in a batch that copies them.
type stubsVersion struct {
	line  *lineage
	batch uint32
}

// Mark returns s's Mark.
func (s *Snapshot) Mark() Mark {
	m := Mark{id: s.ident(), Rev: s.Rev, stubs: make([]stubsVersion, len(s.Zones))}
	for i, z := range s.Zones {
		m.stubs[i] = stubsVersion{z.line, z.stubsBatch}
	}
	return m
}

func (s *Snapshot) ident() *ident {
	if id := s.id.Load(); id != nil {
		return id
	}
	s.id.CompareAndSwap(nil, new(ident))
	return s.id.Load()
}

// Of reports whether m is s's Mark. A snapshot no Mark was made of has
// no identity yet, and is no Mark's.
func (m Mark) Of(s *Snapshot) bool { return m.id != nil && m.id == s.id.Load() }

// SameStubs reports whether m's snapshot and s hold the same stub
// domains: each zone of one derives from the other's by batches that
// left its stub domains alone.
func (m Mark) SameStubs(s *Snapshot) bool {
	if len(m.stubs) != len(s.Zones) {
		return false
	}
	for i, z := range s.Zones {
		if m.stubs[i] != (stubsVersion{z.line, z.stubsBatch}) {
			return false
		}
	}
	return true
}
