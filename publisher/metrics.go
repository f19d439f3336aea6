package publisher

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics live on their own registry so that a test or a second publisher
// in one process never collides with the global one.
type Metrics struct {
	Registry *prometheus.Registry

	Events        *prometheus.CounterVec
	Units         prometheus.Gauge
	Owned         prometheus.Gauge
	Written       prometheus.Counter
	Deleted       prometheus.Counter
	Invalid       prometheus.Counter
	Conflicts     prometheus.Counter
	Retries       prometheus.Counter
	Splits        prometheus.Counter
	Txns          *prometheus.CounterVec
	TxnLatency    prometheus.Histogram
	SyncSeconds   prometheus.Gauge
	Leader        prometheus.Gauge
	Programming   prometheus.Histogram
	Malformed     prometheus.Gauge
	EndpointMoves prometheus.Counter
}

func NewMetrics() *Metrics {
	const ns, sub = "etcdns", "publisher"
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "object_events_total", Help: "Object changes seen, by unit kind (service, pod)."}, []string{"kind"}),
		Units: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "objects", Help: "Units (services, pods) known to the source at the last full sync."}),
		Owned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "owned_records", Help: "Records this cluster owns in etcd."}),
		Written: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "records_written_total", Help: "Records created or changed in etcd."}),
		Deleted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "records_deleted_total", Help: "Records deleted from etcd."}),
		Invalid: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "invalid_objects_total", Help: "Objects or parts of objects skipped as invalid (bad IP, bad label)."}),
		Conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "conflicts_total", Help: "Desired records not written because another owner holds the key."}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "guard_retries_total", Help: "Transactions retried after a key changed behind the publisher."}),
		Splits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "split_units_total", Help: "Units too large for one etcd transaction."}),
		Txns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "txns_total", Help: "etcd transactions by result (ok, conflict, fenced, error)."}, []string{"result"}),
		TxnLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "txn_duration_seconds", Help: "Latency of etcd write transactions.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		SyncSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "sync_duration_seconds", Help: "Duration of the last full reconcile."}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "leader", Help: "1 while this replica is the leader and writes."}),
		Programming: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "programming_latency_seconds", Help: "From an object change seen by the source to the etcd commit of its records.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		Malformed: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "foreign_records", Help: "Records in this cluster's ranges that are not its own (other clusters, malformed), at the last load."}),
		EndpointMoves: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "etcd_endpoint_moves_total", Help: "Times the publisher moved its etcd requests to the next endpoint, after one timed out, was unavailable or refused connections."}),
	}
	m.Registry.MustRegister(m.Events, m.Units, m.Owned, m.Written, m.Deleted, m.Invalid, m.Conflicts,
		m.Retries, m.Splits, m.Txns, m.TxnLatency, m.SyncSeconds, m.Leader, m.Programming, m.Malformed, m.EndpointMoves,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
