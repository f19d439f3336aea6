package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
	"github.com/etcdns/etcdns/server/store"
)

// Ops are what the operations endpoints read.
type Ops struct {
	Gatherer  prometheus.Gatherer
	Ready     <-chan struct{}
	Snapshot  func() *snap.Snapshot
	Malformed func(owner string) []store.Malformed
	Skipped   func() []store.Malformed // every skipped key
}

// Handler serves /metrics, /healthz, /readyz and /debug/records.
func (o Ops) Handler() http.Handler {
	mux := http.NewServeMux()
	// Uncompressed: a gzip writer is about 800 KB of heap (compress/flate's
	// tables), made again for a scrape whenever a collection has emptied
	// promhttp's pool, and kept live while pooled; that is more garbage than
	// a hundred record changes, and a megabyte of a node-local frontend's
	// RSS, to save 16 KB of a 20 KB page.
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-o.Ready:
			fmt.Fprintln(w, "ok")
		default:
			http.Error(w, "first load of the zones from etcd not complete", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /debug/records", o.records)
	// Profiles, for the performance work the benchmark drives; the
	// operations address is loopback unless configured otherwise.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

// records prints what dnsd holds for one name: the stub domain it is in,
// its keys and values, the type each was given, the records served, and
// the keys skipped there.
//
// Without a name it lists every key skipped for its value: what an
// operator alerted by etcdns_dnsd_malformed_values_total looks for.
func (o Ops) records(w http.ResponseWriter, r *http.Request) {
	if !r.URL.Query().Has("name") && o.Skipped != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		skipped := o.Skipped()
		fmt.Fprintf(w, "%d keys skipped for their values; ?name=<fqdn> shows what is held for a name\n", len(skipped))
		for _, m := range skipped {
			fmt.Fprintf(w, "skipped %s %s: %s\n", m.Key, m.Value, m.Err)
		}
		return
	}
	name, err := keys.CanonicalName(r.URL.Query().Get("name"))
	if err != nil {
		http.Error(w, "want ?name=<fqdn>: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	sn := o.Snapshot()
	if sn == nil {
		http.Error(w, "nothing loaded yet", http.StatusServiceUnavailable)
		return
	}
	if st := sn.Stub(name); st != nil {
		fmt.Fprintf(w, "%s: in stub domain %s, answered by its nameservers\n", name, st.Domain)
		for _, ns := range st.Servers {
			fmt.Fprintf(w, "stub %s %s\n", ns.Key, ns.Addr)
		}
	}
	z := sn.Zone(name)
	if z == nil {
		fmt.Fprintf(w, "%s: in no served zone\n", name)
		o.malformed(w, name) // a stub domain's broken nameservers
		return
	}
	fmt.Fprintf(w, "name %s\nzone %s (etcd range %s, serial %d, snapshot revision %d)\n", name, z.Name, z.Range, z.Serial, sn.Rev)
	n := z.Node(name)
	switch {
	case n == nil:
		fmt.Fprintln(w, "nothing held at or below this name")
	case len(n.Entries()) == 0:
		fmt.Fprintln(w, "empty non-terminal: names below it hold records")
	}
	if n != nil {
		es := n.Entries()
		for i := range es {
			e := &es[i]
			fmt.Fprintf(w, "key %s %s %s\n", z.Key(n.Name, e), typeLabel(e.Type()), e.Value().Encode())
		}
		for _, set := range n.Sets() {
			for _, rr := range set.RRs {
				fmt.Fprintf(w, "rr %s\n", strings.ReplaceAll(rr.String(), "\t", " "))
			}
		}
	}
	o.malformed(w, name)
}

func (o Ops) malformed(w io.Writer, name string) {
	if o.Malformed != nil {
		for _, m := range o.Malformed(name) {
			fmt.Fprintf(w, "skipped %s %s: %s\n", m.Key, m.Value, m.Err)
		}
	}
}
