//go:build bench

package dnsdbench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

// churnRates are the etcd changes a second under which the servers that
// read etcd are loaded again: none, a quiet cluster, a busy one.
var churnRates = []int{0, 10, 100}

// churn measures max throughput on m for each of servers (those that read
// dnsd's etcd) while a writer changes one service's address rate times a
// second, each change a transaction of its own, as a rollout does: dnsd
// publishes a snapshot per change; CoreDNS's cache keeps answers for their
// TTL whatever etcd says. Each round runs every rate against every server
// back to back. It returns a table of each server's median QPS per rate
// and its ratio to its own QPS with no changes (pairedRatio over rounds).
func churn(t *testing.T, cli *clientv3.Client, b kube.Builder, dnsperf string, st *stage, servers []*server, m *mix, clients, duration, rounds int) (header []string, rows [][]string) {
	qps := map[*server][][]float64{} // by rate, then round
	for _, s := range servers {
		qps[s] = make([][]float64, len(churnRates))
	}
	for round := range rounds {
		for i, rate := range churnRates {
			for _, s := range servers {
				st.alone(t, s)
				stop := changeEvery(t, cli, b, rate)
				qps[s][i] = append(qps[s][i], load(t, dnsperf, s.addr, m, clients, duration, false).qps)
				stop()
				fmt.Printf("  round %d  %4d changes/s  %-24s %9.0f qps\n", round+1, rate, s.name, qps[s][i][round])
			}
		}
	}
	st.all()
	header = []string{"changes/s"}
	for _, s := range servers {
		header = append(header, s.name+" QPS", s.name+" vs no changes")
	}
	for i, rate := range churnRates {
		row := []string{strconv.Itoa(rate)}
		for _, s := range servers {
			row = append(row, fmt.Sprintf("%.0f", median(qps[s][i])), fmt.Sprintf("%.2fx", pairedRatio(qps[s][i], qps[s][0])))
		}
		rows = append(rows, row)
	}
	return header, rows
}

// changeEvery changes the address of churn.bench rate times a second until
// the returned stop is called, which returns once the writer has stopped.
func changeEvery(t *testing.T, cli *clientv3.Client, b kube.Builder, rate int) (stop func()) {
	if rate == 0 {
		return func() {}
	}
	// A change in flight when stop comes is let finish: cancelling it
	// would only make the etcd client log a warning.
	quit := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		var prev []keys.Record
		for i := 0; ; i++ {
			select {
			case <-quit:
				done <- nil
				return
			case <-tick.C:
			}
			recs, del, err := readdress(b, "bench", "churn", fmt.Sprintf("10.98.%d.%d", i/250%250, i%250+1), prev)
			if err == nil {
				_, err = cli.Txn(context.Background()).Then(changeOps(recs, del)...).Commit()
			}
			if err != nil {
				done <- err
				return
			}
			prev = recs
		}
	}()
	return func() {
		close(quit)
		if err := <-done; err != nil {
			t.Fatalf("changing churn.bench: %v", err)
		}
	}
}
