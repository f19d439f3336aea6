package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/answer"
)

type searchKey struct {
	form  answer.Form
	found bool
}

// searchCounters registers the autopath metrics and returns, for each
// form and outcome, the counters one search bumps.
func searchCounters(reg prometheus.Registerer) map[searchKey][]prometheus.Counter {
	searches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdns_dnsd_autopath_searches_total",
		Help: "Queries searched for over a search path (autopath), by form: suffix (ap.k8s.io names), option (EDNS(0) search list), client (the client's pod namespace).",
	}, []string{"form"})
	hits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdns_dnsd_autopath_hits_total",
		Help: "Searches that found a name of the search path, by form; the others are NXDOMAIN.",
	}, []string{"form"})
	reg.MustRegister(searches, hits)
	out := map[searchKey][]prometheus.Counter{}
	for _, f := range answer.Forms {
		s, h := searches.WithLabelValues(string(f)), hits.WithLabelValues(string(f))
		out[searchKey{f, false}] = []prometheus.Counter{s}
		out[searchKey{f, true}] = []prometheus.Counter{s, h}
	}
	return out
}

func (s *Server) countSearch(f answer.Form, found bool) []prometheus.Counter {
	cs := s.searches[searchKey{f, found}]
	for _, c := range cs {
		c.Inc()
	}
	return cs
}

// options are the server's, observing searches into w.searched: a cached
// answer replays the counts of the search that made it, so the metrics
// count searches answered, not searches computed.
func (w *worker) options() *answer.Options {
	if w.opts == nil {
		o := w.s.opts
		o.Autopath.Observe = func(f answer.Form, found bool) {
			w.searched = append(w.searched, w.s.countSearch(f, found)...)
		}
		w.opts = &o
	}
	return w.opts
}
