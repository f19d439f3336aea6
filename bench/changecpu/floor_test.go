//go:build bench

package changecpu

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/integration/harness"
)

// TestWatchFloor is the floor under TestChangeCPU's figure: what a Go
// process pays for a changed key with nothing but the watch, dialled as
// dnsd dials (etcdclient). Each watcher is a child process that only
// counts events: through clientv3's watcher, as dnsd reads them, and
// straight from etcd's gRPC Watch stream, with no goroutine of clientv3's
// between the connection and the reader, and that stream read as dnsd
// reads its connection (etcdclient.WatchReads, with dnsd.watch-coalesce's
// default window, 50 ms), each at GOMAXPROCS 1 and 2. The changes are RATE a
// second, CHANGES in all, each its own put.
//
//	go test -tags bench -run '^TestWatchFloor$' -v ./bench/changecpu/
func TestWatchFloor(t *testing.T) {
	rate, changes, rounds := env("RATE", 100), env("CHANGES", 1500), env("ROUNDS", 2)
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	fmt.Printf("Machine: %d x %s, Go %s; %d changes at %d a second, each its own put, %d rounds alternated\n\n",
		runtime.NumCPU(), cpuModel(), runtime.Version(), changes, rate, rounds)
	fmt.Println("| watcher | GOMAXPROCS | round | process CPU a change |")
	fmt.Println("|---|---|---|---|")
	for round := 1; round <= rounds; round++ {
		for _, mode := range []string{"clientv3", "grpc", "grpc+window"} {
			for _, procs := range []string{"1", "2"} {
				cmd := exec.Command(os.Args[0], "-test.run=^TestWatchFloorChild$")
				cmd.Env = append(os.Environ(), "WATCHFLOOR_MODE="+mode, "WATCHFLOOR_ENDPOINT="+etcd.Endpoint,
					"WATCHFLOOR_CHANGES="+strconv.Itoa(changes), "GOMAXPROCS="+procs)
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				lines := bufio.NewScanner(out)
				if !lines.Scan() || lines.Text() != "watching" {
					t.Fatalf("%s: the watcher did not start: %q", mode, lines.Text())
				}
				tick := time.NewTicker(time.Second / time.Duration(rate))
				for i := range changes {
					<-tick.C
					if _, err := cli.Put(context.Background(), fmt.Sprintf("/floor/%d", i%100), `{"host":"10.0.0.1"}`); err != nil {
						t.Fatal(err)
					}
				}
				tick.Stop()
				if !lines.Scan() {
					t.Fatalf("%s: the watcher said nothing after the changes", mode)
				}
				if err := cmd.Wait(); err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				fmt.Printf("| %s | %s | %d | %s us |\n", mode, procs, round, lines.Text())
			}
		}
	}
}

// TestWatchFloorChild is TestWatchFloor's watcher: it prints "watching"
// once etcd has created its watch, then, after WATCHFLOOR_CHANGES events,
// its own CPU time since then per event in microseconds.
func TestWatchFloorChild(t *testing.T) {
	mode := os.Getenv("WATCHFLOOR_MODE")
	if mode == "" {
		t.Skip("run by TestWatchFloor")
	}
	want, _ := strconv.Atoi(os.Getenv("WATCHFLOOR_CHANGES"))
	ctx := context.Background()
	c := config.Etcd{Endpoints: []string{os.Getenv("WATCHFLOOR_ENDPOINT")}}
	var cli *clientv3.Client
	var err error
	if mode == "grpc+window" {
		var clis []*clientv3.Client
		clis, _, err = etcdclient.DialEach(ctx, c, etcdclient.WatchReads(c, 50*time.Millisecond, nil))
		if err == nil {
			cli = clis[0]
		}
	} else {
		cli, err = etcdclient.Dial(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx = clientv3.WithRequireLeader(ctx)
	var began time.Duration
	got := 0
	// seen counts one response's events, and says when the last came.
	seen := func(created bool, events int) bool {
		if created {
			began = processCPU()
			fmt.Println("watching")
			return false
		}
		got += events
		return got >= want
	}
	switch mode {
	case "clientv3":
		wch := cli.Watch(ctx, "/floor/", clientv3.WithPrefix(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
		for resp := range wch {
			if seen(resp.Created, len(resp.Events)) {
				break
			}
		}
	case "grpc", "grpc+window":
		wc, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		create := &pb.WatchCreateRequest{Key: []byte("/floor/"), RangeEnd: []byte(clientv3.GetPrefixRangeEnd("/floor/")), ProgressNotify: true}
		if err := wc.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := wc.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if seen(resp.Created, len(resp.Events)) {
				break
			}
		}
	default:
		t.Fatalf("WATCHFLOOR_MODE %q", mode)
	}
	fmt.Printf("%.0f\n", float64((processCPU()-began).Microseconds())/float64(got))
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
