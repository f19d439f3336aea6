package stubapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/plan"
)

const (
	// maxNameservers keeps a federation's change, deletes of the old and
	// puts of the new, inside one etcd transaction (default 128 ops).
	maxNameservers = 32
	maxTxnOps      = 2*maxNameservers + 1
	maxBody        = 64 << 10
	// maxAttempts bounds the re-reads after a guard failed: someone else
	// writing the same keys that often is a fight, not a race.
	maxAttempts = 5
)

// Leader returns the current leadership term and true while
// this replica leads and may write; a nil term with true writes unfenced
// (tests: the publisher always has a term).
type Leader func() (term *elect.Term, leading bool)

// Config is what a Handler works with.
type Config struct {
	Store *etcdstore.Store
	// Layout's Prefix and Cluster say where the keys go and whose they
	// are; its ReversePrefix and TTL are not used.
	Layout keys.Layout
	Zone   string // the cluster domain, under whose key the stub domains are kept
	Domain string // the federation domain: federation x is the stub domain x.svc.<Domain>
	Leader Leader
	Log    *slog.Logger
}

// Handler serves /federations/<name>.
type Handler struct {
	c   Config
	mux *http.ServeMux
}

// New checks c and returns its handler.
func New(c Config) (*Handler, error) {
	if err := keys.CheckPrefix(c.Layout.Prefix); err != nil {
		return nil, err
	}
	if !keys.IsLabel(c.Layout.Cluster) {
		return nil, fmt.Errorf("cluster id %q: not a lowercase DNS label", c.Layout.Cluster)
	}
	var err error
	if c.Zone, err = keys.CanonicalName(c.Zone); err != nil {
		return nil, fmt.Errorf("zone: %w", err)
	}
	if c.Domain, err = keys.CanonicalName(c.Domain); err != nil {
		return nil, fmt.Errorf("federation domain: %w", err)
	}
	if c.Store == nil || c.Leader == nil {
		return nil, errors.New("a store and a leader test are needed")
	}
	// A federation's change is one transaction, never split: the puts of
	// its new nameservers, the deletes of the old, and the fence.
	if n := c.Store.MaxTxnOps; n > 0 && n < maxTxnOps {
		return nil, fmt.Errorf("publisher.max-txn-ops is %d: the federation endpoint changes up to %d nameservers in one transaction of up to %d operations; raise it (and etcd's --max-txn-ops) to at least that", n, maxNameservers, maxTxnOps)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	h := &Handler{c: c, mux: http.NewServeMux()}
	// Other methods get 405 from the mux, other paths 404.
	h.mux.HandleFunc("POST /federations/{name}", h.post)
	h.mux.HandleFunc("GET /federations/{name}", h.get)
	h.mux.HandleFunc("DELETE /federations/{name}", h.delete)
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Federation is the body of every answer but errors.
type Federation struct {
	Name        string   `json:"name"`
	Domain      string   `json:"domain"`      // the stub domain, fully qualified
	Nameservers []string `json:"nameservers"` // ip:port, sorted
}

type request struct {
	Nameservers []string `json:"nameservers"`
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	name, ok := h.name(w, r)
	if !ok {
		return
	}
	var req request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", maxBody))
			return
		}
		fail(w, http.StatusBadRequest, `body: want {"nameservers": ["<ip>", "<ip>:<port>", ...]}: `+err.Error())
		return
	}
	if dec.More() {
		fail(w, http.StatusBadRequest, "body: one JSON object only")
		return
	}
	nss, err := nameservers(req.Nameservers)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	h.set(w, r, name, nss)
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) {
	if name, ok := h.name(w, r); ok {
		h.set(w, r, name, nil)
	}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	name, ok := h.name(w, r)
	if !ok {
		return
	}
	owned, _, err := h.read(r.Context(), name)
	if err != nil {
		h.c.Log.Warn("federation endpoint: reading etcd failed", "federation", name, "err", err)
		fail(w, http.StatusServiceUnavailable, "reading etcd failed; try again")
		return
	}
	if len(owned) == 0 {
		fail(w, http.StatusNotFound, "federation "+name+" has no nameservers here")
		return
	}
	reply(w, http.StatusOK, h.federation(name, owned))
}

// set makes nss the nameservers of federation name (none: removes it),
// in guarded, fenced transactions, reading again when a guard failed.
func (h *Handler) set(w http.ResponseWriter, r *http.Request, name string, nss []netip.AddrPort) {
	term, leading := h.c.Leader()
	if !leading {
		w.Header().Set("Retry-After", "1")
		fail(w, http.StatusServiceUnavailable, "this publisher replica does not lead its cluster; ask again, or the leader")
		return
	}
	src := source(name)
	var desired []keys.Record
	for _, ns := range nss {
		rec, err := h.c.Layout.Stub(h.c.Zone, h.domain(name), src, ns)
		if err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		desired = append(desired, rec)
	}
	for attempt := 1; ; attempt++ {
		_, idx, err := h.read(r.Context(), name)
		if err != nil {
			h.c.Log.Warn("federation endpoint: reading etcd failed", "federation", name, "err", err)
			fail(w, http.StatusServiceUnavailable, "reading etcd failed; try again")
			return
		}
		res := plan.Diff(desired, idx.Owned(src), idx.HeldBy(src))
		if len(res.Conflicts) > 0 {
			fail(w, http.StatusConflict, fmt.Sprintf("key %s is held by %q, not this cluster's federation endpoint", res.Conflicts[0].Key, res.Conflicts[0].Owner))
			return
		}
		if len(res.Ops) == 0 {
			h.done(w, name, nss)
			return
		}
		fence, epoch := term.Fence()
		_, err = h.c.Store.Apply(r.Context(), fence, res.Ops)
		switch {
		case errors.Is(err, etcdstore.ErrFenced) && term.Epoch() != epoch && attempt < maxAttempts:
			continue // the publisher moved its fence on (elect.Term.Advance); the term goes on
		case errors.Is(err, etcdstore.ErrFenced) && attempt < maxAttempts && h.c.Store.Advance(r.Context(), term, epoch) == nil:
			continue // an Advance whose answer was lost had moved it: the term goes on
		case err == nil:
			h.c.Log.Info("federation stub domain programmed", "federation", name, "domain", h.domain(name),
				"nameservers", nss, "changes", len(res.Ops), "client", clientName(r))
			h.done(w, name, nss)
			return
		case errors.Is(err, etcdstore.ErrFenced):
			fail(w, http.StatusServiceUnavailable, "leadership lost during the write; nothing was written")
			return
		case !errors.Is(err, etcdstore.ErrConflict):
			// The write may be held somewhere and commit later, over
			// what the client asks next: the fence moves on so that it
			// never does. If that fails too, the answer cannot promise.
			h.c.Log.Warn("federation endpoint: writing etcd failed", "federation", name, "err", err)
			if term == nil || h.c.Store.Advance(r.Context(), term, epoch) != nil {
				fail(w, http.StatusServiceUnavailable, "writing etcd failed; the write may still be applied later; read the federation back before trying again")
				return
			}
			fail(w, http.StatusServiceUnavailable, "writing etcd failed; the write was applied in full or not at all, and that will not change: read the federation back, or try again")
			return
		case attempt == maxAttempts:
			fail(w, http.StatusConflict, "the federation's keys kept changing during the write; nothing was written")
			return
		}
	}
}

// done answers a completed set: the nameservers now held, which are the
// ones asked for, or 204 after a removal.
func (h *Handler) done(w http.ResponseWriter, name string, nss []netip.AddrPort) {
	if len(nss) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	reply(w, http.StatusOK, h.federation(name, nss))
}

// read returns the nameservers this cluster's endpoint holds for
// federation name, and the index of every key in the domain's range, for
// Diff.
func (h *Handler) read(ctx context.Context, name string) ([]netip.AddrPort, *plan.Index, error) {
	r, err := keys.StubDomainRange(h.c.Layout.Prefix, h.c.Zone, h.domain(name))
	if err != nil {
		return nil, nil, err
	}
	kvs, _, err := h.c.Store.Load(ctx, []string{r})
	if err != nil {
		return nil, nil, err
	}
	idx, _ := plan.Load(h.c.Layout.Cluster, kvs)
	owned := idx.Owned(source(name))
	var out []netip.AddrPort
	for _, kv := range kvs {
		if _, ok := owned[kv.Key]; !ok {
			continue
		}
		if v, err := keys.Decode(kv.Value); err == nil {
			if ns, err := v.Nameserver(); err == nil {
				out = append(out, ns)
			}
		}
	}
	return out, idx, nil
}

func (h *Handler) federation(name string, nss []netip.AddrPort) Federation {
	f := Federation{Name: name, Domain: h.domain(name) + ".", Nameservers: []string{}}
	for _, ns := range nss {
		f.Nameservers = append(f.Nameservers, ns.String())
	}
	slices.Sort(f.Nameservers)
	f.Nameservers = slices.Compact(f.Nameservers)
	return f
}

func (h *Handler) domain(name string) string { return name + ".svc." + h.c.Domain }

// source is the value's source of a federation's keys: what makes them
// this endpoint's, and never a unit the publisher's reconcile manages.
func source(name string) string { return "federation/" + name }

// name reads and checks the federation name of the path: a Kubernetes
// object name (an RFC 1123 label), since the control plane names
// federations that way, and a label of the stub domain.
func (h *Handler) name(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if !isDNS1123Label(name) {
		fail(w, http.StatusBadRequest, fmt.Sprintf("federation name %q: want a DNS label (lowercase letters, digits and '-', at most 63)", name))
		return "", false
	}
	if _, err := keys.CanonicalName(h.domain(name)); err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	return name, true
}

func isDNS1123Label(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// nameservers reads a request's nameservers: IP addresses, with a port or
// on 53. Host names are refused: dnsd would need a resolver to use them,
// and the stub domain may be the very one that resolves them.
func nameservers(in []string) ([]netip.AddrPort, error) {
	if len(in) == 0 {
		return nil, errors.New(`nameservers: none given; to remove a federation, DELETE it`)
	}
	if len(in) > maxNameservers {
		return nil, fmt.Errorf("nameservers: %d given, at most %d", len(in), maxNameservers)
	}
	var out []netip.AddrPort
	for _, s := range in {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("nameserver %q: want an IP address or ip:port; host names are not taken", s)
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		a := ap.Addr()
		switch {
		case ap.Port() == 0:
			return nil, fmt.Errorf("nameserver %q: port 0", s)
		case a.Zone() != "" || a.IsUnspecified() || a.IsMulticast():
			return nil, fmt.Errorf("nameserver %q: not a unicast address", s)
		}
		ap = netip.AddrPortFrom(a.Unmap(), ap.Port())
		if !slices.Contains(out, ap) {
			out = append(out, ap)
		}
	}
	return out, nil
}

// clientName is who programmed a change, for the log: the subject of the
// client certificate the handshake verified.
func clientName(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	return r.TLS.PeerCertificates[0].Subject.String()
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, msg string) {
	reply(w, code, map[string]string{"error": msg})
}

// TLSConfig is the endpoint's TLS: 1.2 or later, the server certificate
// of certFile and keyFile, and only clients whose certificate the CAs of
// clientCAFile signed.
func TLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate in it", clientCAFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// NewServer is the HTTPS server of h with tc. Refused handshakes go to log
// at info level: a client without a good certificate is worth seeing, but
// every port scanner makes one too.
func NewServer(h http.Handler, tc *tls.Config, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.Default()
	}
	return &http.Server{
		Handler:           h,
		TLSConfig:         tc,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelInfo),
	}
}
