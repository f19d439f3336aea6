// Package harness starts and stops real processes for integration tests:
// etcd, kube-apiserver, CoreDNS and this module's own binaries.
//
// It holds no product logic. Everything listens on 127.0.0.1 on ports the
// harness picks, logs go to files in t.TempDir (the tail is printed when a
// test fails), and every process group is killed in t.Cleanup.
//
// Third-party binaries come from <repo root>/.cache/tools/bin, installed by
// hack/tools.sh. A missing binary fails the test, so CI cannot pass by
// skipping; set ETCDNS_ALLOW_SKIP=1 to skip instead. A directory named by
// ETCDNS_TOOLS_DIR is looked in first, to try binaries built elsewhere (a new
// etcd release) without replacing the installed ones. Besides the pinned etcd,
// the newer etcd releases are installed as etcd-<minor> ("etcd-3.6"):
// WithEtcdTool starts etcd from one, and Etcd.Upgrade moves a member to one.
// This module's own binaries are built with go build, once per test binary,
// unless ETCDNS_BIN_DIR names a directory that already holds them.
//
// The package is Linux-only: it relies on process groups and the parent
// death signal so that no process outlives the test binary.
package harness
