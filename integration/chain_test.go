//go:build integration

package integration

import (
	"fmt"
	"testing"

	"github.com/etcdns/etcdns/integration/harness"
)

// startChain starts what a cluster runs: the built publisher watching api
// and writing into etcd as cluster id, and the built dnsd serving from the
// same etcd. It returns dnsd's DNS address once both report ready.
func startChain(tb testing.TB, etcd *harness.Etcd, api *harness.KubeAPIServer, id string, publisherArgs ...string) string {
	tb.Helper()
	pubMetrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(tb))
	harness.StartProcess(tb, harness.BuildBinary(tb, "./cmd/publisher"), append([]string{
		"--etcd.endpoints", etcd.Endpoint, "--publisher.kubeconfig", api.Kubeconfig,
		"--cluster.id", id, "--publisher.metrics-listen", pubMetrics,
	}, publisherArgs...), nil, func() error { return harness.HTTPOK("http://" + pubMetrics + "/readyz") })

	dnsAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(tb))
	dnsdMetrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(tb))
	harness.StartProcess(tb, harness.BuildBinary(tb, "./cmd/dnsd"), []string{
		"--etcd.endpoints", etcd.Endpoint, "--dnsd.listen", dnsAddr, "--dnsd.metrics-listen", dnsdMetrics,
	}, nil, func() error { return harness.HTTPOK("http://" + dnsdMetrics + "/readyz") })
	return dnsAddr
}
