package store

import (
	"math/big"
	"strings"
)

// stops chooses where each page of a load stops. etcd 3.5 counts every
// key from a limited read's start to the end of its range
// (etcd-io/etcd#11057): read 50,000 keys at a time, a million-key zone
// made it visit ten million, and a page that stops short of the zone's
// end is counted only to its stop. A frontend has no names to stop at
// before it has read the keys, so it extrapolates: a key's bytes after the
// zone's prefix are a number, and each stop lies as far past the last key
// read as the last full page's keys spread over. A stop that came too
// soon (a page less than half full) stretches that stride by what the
// page lacked, and an empty page by gapStretch; the read with at most a
// page left goes to the end. The pages cover the range exactly whatever
// the estimate, which only changes where they are cut
// (TestStopsCoverTheRange).
type stops struct {
	prefix, end string
	page        int
	stride      *big.Int // nil: read to the end
	stop        string   // of the read in progress
	// left is about how many keys are still to be read, known once a
	// read has gone to the end (etcd's count is then every key from its
	// start on); -1 before. It only chooses where reads stop: the load
	// ends on etcd's word that a read to the end had no more.
	left int64
}

// keyDigits is how many bytes of a key, after the prefix, its number
// holds: keys that share more than that cannot be told apart by a stop,
// which costs nothing while fewer than a page of them do.
const keyDigits = 64

// maxStretch bounds how much one short page stretches the stride, so that
// one empty stretch of the key space does not send the next stop past a
// dense one.
const maxStretch = 64

// gapStretch is how much a read that found no key stretches the stride.
// An empty read costs etcd a request and no counting, so a wide gap is
// crossed in a few of them; a stride that overshoots it into dense keys
// costs etcd a count of every key it spans.
const gapStretch = 4

func newStops(prefix, end string, page int64) *stops {
	return &stops{prefix: prefix, end: end, page: int(page), stop: end, left: -1}
}

// next returns where the read after one from start that got n keys, the
// middle one mid and the last last, starts and stops, and false when the
// range is read. more and count are etcd's: keys were left before the
// read's stop, and how many keys lay from start to the stop.
func (s *stops) next(start, mid, last string, n int, more bool, count int64) (string, string, bool) {
	if s.stop == s.end {
		s.left = count
	}
	if s.left >= 0 {
		s.left -= int64(n)
	}
	next, stop, ok := s.step(start, mid, last, n, more)
	if ok && s.left >= 0 && s.left <= int64(s.page) {
		// At most a page left: one read to the end counts no more than
		// it returns, where stops would cross the gaps after the last
		// key one empty read at a time (the end of a million-key zone
		// took 36).
		stop, s.stop = s.end, s.end
	}
	return next, stop, ok
}

func (s *stops) step(start, mid, last string, n int, more bool) (string, string, bool) {
	if more {
		// A full page: the next should span as much key space as its keys
		// did, measured over its second half, twice. Not from its start:
		// the first read starts at the zone's prefix, and the first keys
		// may be a few far from the rest (a zone's dns-version key below
		// its svc/ tree); a stride measured from them sent the second
		// read's stop near the zone's end.
		span := new(big.Int).Sub(s.num(last), s.num(start))
		if n >= 4 {
			span.Sub(s.num(last), s.num(mid)).Lsh(span, 1)
		}
		if span.Sign() > 0 {
			s.stride = span
		} else if s.stride != nil {
			s.stride.Rsh(s.stride, 1)
		}
		return s.after(last + "\x00")
	}
	if s.stop == s.end {
		return "", "", false
	}
	switch {
	case n == 0:
		// A gap in the key space, of no known width: widen step by step.
		// One stretch to cross it sent a million-key load's next stops
		// past half a million keys, each counted for nothing.
		s.stride.Mul(s.stride, big.NewInt(gapStretch))
	case n < s.page/2:
		// Too near: stretch the stride by what the page lacked.
		s.stride.Mul(s.stride, big.NewInt(int64(max(2, min(s.page/n, maxStretch)))))
	}
	return s.after(s.stop)
}

// after returns start and the stop a stride past it.
func (s *stops) after(start string) (string, string, bool) {
	s.stop = s.end
	if s.stride != nil && s.stride.Sign() > 0 {
		next := new(big.Int).Add(s.num(start), s.stride)
		if next.BitLen() <= 8*keyDigits {
			if k := s.prefix + string(next.FillBytes(make([]byte, keyDigits))); k > start {
				s.stop = k
			}
		}
	}
	return start, s.stop, true
}

// num is key's number: its first keyDigits bytes after the prefix, big
// endian, padded with zeros.
func (s *stops) num(key string) *big.Int {
	rest, _ := strings.CutPrefix(key, s.prefix)
	b := make([]byte, keyDigits)
	copy(b, rest)
	return new(big.Int).SetBytes(b)
}
