package answer

import "github.com/etcdns/etcdns/server/snap"

// Reads is what an answer was built from: the nodes it looked up, each by
// zone and name and nil where nothing was, and the serial of the zone
// whose SOA it holds. An answer is a function of its question, the
// options and these alone, so in a later snapshot that holds the same
// nodes it stands as it is but for that serial: a cache keeps it across
// changes that do not touch it instead of building it again.
//
// Snapshots share the nodes a change does not touch and copy the ones it
// does, so "the same node" is the same snap.Version, which, unlike the
// node, keeps no old records alive in a cache.
//
// A cache holds a Reads an entry, so it is small: the first read in it
// (most answers read one node), the others behind a pointer, and the
// flags packed beside the SOA's serial.
type Reads struct {
	first nodeRead
	more  *[]nodeRead // the reads after the first; nil: none
	// The zone whose SOA the answer holds, and its serial then.
	soaZone   string
	soaSerial uint32
	soaHeld   bool
	read      bool // first holds a read
	// untracked is set when the answer also read what Reads does not
	// follow (a second zone's serial, the pod index): it stands in no
	// other snapshot.
	untracked bool
}

type nodeRead struct {
	zone, name string
	version    snap.Version
}

// node looks name up in z and notes what it found: by the node's own
// name where there is one, since a cache keeps Reads and the name asked
// is a string of the query's, about 48 bytes an entry kept for nothing.
func (rd *Reads) node(z *snap.Zone, name string) *snap.Node {
	n := z.Node(name)
	if rd != nil {
		if n != nil {
			name = n.Name
		}
		r := nodeRead{z.Name, name, z.Version(n)}
		switch {
		case !rd.read:
			rd.first, rd.read = r, true
		case rd.more == nil:
			rd.more = &[]nodeRead{r}
		default:
			*rd.more = append(*rd.more, r)
		}
	}
	return n
}

// serial reads z's serial for an SOA record and notes it.
func (rd *Reads) serial(z *snap.Zone) uint32 {
	if rd == nil {
		return z.Serial
	}
	switch {
	case !rd.soaHeld:
		rd.soaZone, rd.soaSerial, rd.soaHeld = z.Name, z.Serial, true
	case rd.soaZone != z.Name:
		rd.untracked = true
	}
	return z.Serial
}

// untrack notes a read Reads does not follow.
func (rd *Reads) untrack() {
	if rd != nil {
		rd.untracked = true
	}
}

// Stands reports whether the answer built from rd stands in s as it was
// built, but for the serial of the SOA it holds, if any, which is serial
// in s. A zone s does not serve (the autopath pseudo-zone) holds nothing
// and keeps its serial.
func (rd *Reads) Stands(s *snap.Snapshot) (serial uint32, ok bool) {
	if rd.untracked {
		return 0, false
	}
	if rd.read && !rd.first.stands(s) {
		return 0, false
	}
	if rd.more != nil {
		for _, r := range *rd.more {
			if !r.stands(s) {
				return 0, false
			}
		}
	}
	serial = rd.soaSerial
	if z := zoneNamed(s, rd.soaZone); rd.soaHeld && z != nil {
		serial = z.Serial
	}
	return serial, true
}

// stands reports whether s holds the node r read.
func (r *nodeRead) stands(s *snap.Snapshot) bool {
	z := zoneNamed(s, r.zone)
	if z == nil {
		return r.version == snap.Version{}
	}
	return z.Version(z.Node(r.name)) == r.version
}

// HasSOA reports whether the answer holds an SOA record, whose serial
// Stands gives.
func (rd *Reads) HasSOA() bool { return rd.soaHeld }

// zoneNamed is s's zone called name, or nil.
func zoneNamed(s *snap.Snapshot, name string) *snap.Zone {
	for _, z := range s.Zones {
		if z.Name == name {
			return z
		}
	}
	return nil
}
