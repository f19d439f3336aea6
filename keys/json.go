package keys

import (
	"strconv"
	"unsafe"
)

// decodeFast parses the values publishers write: one flat JSON object
// of our field names, in lowercase, with plain ASCII strings and integers.
// It reports false for anything else (escapes, non-ASCII, null, floats,
// other names or spellings, nested values, duplicates it cannot be sure
// of), and Decode then asks encoding/json, so both always agree: the fast
// path only skips work, never changes a result. At a million values
// encoding/json is most of a cold start; this is a few times faster.
//
// With borrow, the strings share b's memory instead of copying it.
func decodeFast(b []byte, borrow bool) (Value, bool) {
	var v Value
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return v, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return v, skipSpace(b, i+1) == len(b)
	}
	for {
		j, ok := plainString(b, i)
		if !ok {
			return v, false
		}
		name := b[i+1 : j-1]
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return v, false
		}
		i = skipSpace(b, i+1)
		switch string(name) {
		case "host", "text", "group", "cluster", "source":
			j, ok := plainString(b, i)
			if !ok {
				return v, false
			}
			var s string
			if borrow {
				s = unsafe.String(&b[i+1], j-i-2)
			} else {
				s = string(b[i+1 : j-1])
			}
			i = j
			switch string(name) {
			case "host":
				v.Host = s
			case "text":
				v.Text = s
			case "group":
				v.Group = s
			case "cluster":
				v.Cluster = s
			case "source":
				v.Source = s
			}
		case "port", "priority", "weight", "ttl", "targetstrip":
			neg := i < len(b) && b[i] == '-'
			n, j, ok := integer(b, i)
			if !ok {
				return v, false
			}
			i = j
			switch string(name) {
			case "port":
				v.Port = int(n)
			case "priority":
				v.Priority = int(n)
			case "weight":
				v.Weight = int(n)
			case "targetstrip":
				v.TargetStrip = int(n)
			case "ttl":
				if neg || n > 1<<32-1 { // encoding/json refuses even -0 for a uint32
					return v, false
				}
				v.TTL = uint32(n)
			}
		case "mail":
			switch {
			case hasAt(b, i, "true"):
				v.Mail, i = true, i+4
			case hasAt(b, i, "false"):
				v.Mail, i = false, i+5
			default:
				return v, false
			}
		default:
			return v, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return v, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return v, skipSpace(b, i+1) == len(b)
		default:
			return v, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func hasAt(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// plainString checks that a JSON string at i is made only of printable
// ASCII with no escapes, and returns the index after its closing quote.
func plainString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, false
		}
	}
	return 0, false
}

// integer reads a JSON integer at i (no fraction, no exponent, no leading
// zero) that fits in 32 bits, the range every numeric field's check
// accepts from.
func integer(b []byte, i int) (int64, int, bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	start := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	digits := j - start
	switch {
	case digits == 0 || digits > 10:
		return 0, 0, false
	case digits > 1 && b[start] == '0':
		return 0, 0, false
	case j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E'):
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(b[i:j]), 10, 64)
	if err != nil || n < -1<<31 || n > 1<<32-1 {
		return 0, 0, false
	}
	return n, j, true
}

// encodeFast renders v as encoding/json does, when its strings need no
// escaping (printable ASCII without '"', '\', '<', '>' or '&', which
// encoding/json escapes for HTML): the publisher encodes every record of
// a service again on each of its changes. false: ask encoding/json.
func encodeFast(v Value) ([]byte, bool) {
	// The names, quotes and numbers of a typical record take about 80
	// bytes: sized so that the buffer is allocated once (growing it was
	// two thirds of this function's bytes on the publisher's change path).
	b := make([]byte, 0, 96+len(v.Host)+len(v.Text)+len(v.Group)+len(v.Cluster)+len(v.Source))
	b = append(b, '{')
	str := func(name, s string) bool {
		if s == "" {
			return true
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":"`...)
		b = append(b, s...)
		b = append(b, '"')
		return true
	}
	num := func(name string, n int64) {
		if n == 0 {
			return
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, n, 10)
	}
	if !str("host", v.Host) {
		return nil, false
	}
	num("port", int64(v.Port))
	num("priority", int64(v.Priority))
	num("weight", int64(v.Weight))
	if !str("text", v.Text) {
		return nil, false
	}
	if v.Mail {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"mail":true`...)
	}
	num("ttl", int64(v.TTL))
	num("targetstrip", int64(v.TargetStrip))
	if !str("group", v.Group) || !str("cluster", v.Cluster) || !str("source", v.Source) {
		return nil, false
	}
	return append(b, '}'), true
}
