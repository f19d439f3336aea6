package keys

import (
	"encoding/json"
	"testing"
)

var decodeSeeds = []string{
	`{"host":"10.96.0.1","ttl":5,"group":"kubernetes.default.svc.cluster.local","cluster":"c1","source":"service/default/kubernetes"}`,
	`{"host":"web.prod.svc.cluster.local","port":443,"priority":10,"weight":100,"ttl":5}`,
	`{"text":"1.1.0","ttl":5}`,
	` { "host" : "10.0.0.1" , "mail" : false } `,
	`{"host":"a","mail":true}`,
	`{"targetstrip":1,"port":-1,"host":"x"}`,
	`{}`,
	`{"ttl":-0}`,
	`{"ttl":4294967296}`,
	`{"port":01}`,
	`{"port":1.0}`,
	`{"port":1e2}`,
	`{"Host":"10.0.0.1"}`,
	`{"host":"\u0041"}`,
	`{"host":null}`,
	`{"host":"a","host":"b"}`,
	`{"host":"a"} x`,
	`{"host":"é"}`,
	`{"extra":[1,2]}`,
}

// TestDecodeFastAgrees checks the fast path against encoding/json on the
// values it takes and on the ones it must leave to encoding/json.
func TestDecodeFastAgrees(t *testing.T) {
	taken := 0
	for _, s := range decodeSeeds {
		if agreeOrFail(t, []byte(s)) {
			taken++
		}
	}
	if taken < 8 {
		t.Errorf("the fast path took %d of the seeds; the plain ones should all be taken", taken)
	}
}

// FuzzDecodeFast: whatever the bytes, the fast path gives what
// encoding/json gives, or leaves the value to it.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { agreeOrFail(t, b) })
}

func agreeOrFail(t *testing.T, b []byte) bool {
	t.Helper()
	fast, ok := decodeFast(b, false)
	if view, vok := decodeFast(b, true); vok != ok || view != fast {
		t.Fatalf("%q: borrowed %+v %v, copied %+v %v", b, view, vok, fast, ok)
	}
	if !ok {
		return false
	}
	var slow Value
	if err := json.Unmarshal(b, &slow); err != nil {
		t.Fatalf("%q: fast path took it, encoding/json says %v", b, err)
	}
	if fast != slow {
		t.Fatalf("%q: fast path %+v, encoding/json %+v", b, fast, slow)
	}
	return true
}

// FuzzEncodeFast: the fast encoder writes encoding/json's bytes, or leaves
// the value to it.
func FuzzEncodeFast(f *testing.F) {
	f.Add("10.96.0.1", 0, 0, 0, "", false, uint32(5), 0, "kubernetes.default.svc.cluster.local", "c1", "service/default/kubernetes")
	f.Add("web.prod.svc.cluster.local", 443, 10, 100, "", false, uint32(0), 0, "", "", "")
	f.Add("", -1, 0, 0, "a<b>&\"c\u00e9", true, uint32(1<<31), 3, "", "x", "")
	f.Fuzz(func(t *testing.T, host string, port, prio, weight int, text string, mail bool, ttl uint32, strip int, group, cluster, source string) {
		v := Value{Host: host, Port: port, Priority: prio, Weight: weight, Text: text, Mail: mail, TTL: ttl,
			TargetStrip: strip, Group: group, Cluster: cluster, Source: source}
		fast, ok := encodeFast(v)
		if !ok {
			return
		}
		slow, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(fast) != string(slow) {
			t.Fatalf("fast %s\njson %s", fast, slow)
		}
	})
}
