package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/etcdns/etcdns/etcdclient"
)

// A watch is one gRPC Watch stream of etcd's own API, with a watcher per
// prefix on it, read by one goroutine that hands each response to the
// store's loop. clientv3's Watcher would put three goroutines of its own
// between gRPC and the loop (its stream's receiver, its dispatcher and a
// goroutine per watcher), and each hand-off readies a goroutine, which on
// a process with an idle P wakes a thread to run it: at two Ps that was
// about one futex wake and one thread switch a change for nothing (bench/
// README.md, stop 35). What clientv3 did besides is done here: the
// watchers are created one at a time, as etcd pairs a created response
// with the oldest create it has not answered; a canceled watcher ends the
// watch with clientv3's error for it (ErrCompacted when its start was
// compacted); and progress requests go on this very stream, so their
// answers prove it. Resuming a failed stream is the store's (see watch),
// on the next endpoint; clientv3 would have resumed it on the same one.

// stream is an open watch stream.
type stream struct {
	ws pb.Watch_WatchClient
	mu sync.Mutex // gRPC allows one sender at a time: the creates and the progress requests
}

// watchCallOpts are clientv3's own call options (a watch response holds
// every event of a revision, which may be far more than gRPC's default
// 4 MiB), and watchCodec.
var watchCallOpts = append(slices.Clip(etcdclient.CallOptions), grpc.ForceCodecV2(watchCodec{}))

// watchCodec encodes and decodes the Watch stream's messages with the
// methods generated for them. gRPC's proto codec reaches those through
// the protobuf runtime's adapter for older generated code: 12% of a
// frontend's CPU for a change at 10k records in a profile of
// bench/changecpu at GOMAXPROCS=1, against 16% for the store's whole
// apply (the bench's figure fell by 0-15 us a change, within its noise).
type watchCodec struct{}

func (watchCodec) Name() string { return "proto" }

func (watchCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*pb.WatchRequest)
	if !ok {
		return nil, fmt.Errorf("watch codec: cannot send %T", v)
	}
	return marshal(r)
}

// Unmarshal may decode gRPC's own buffer in place: the generated code
// copies every byte and string field out of it.
func (watchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*pb.WatchResponse)
	if !ok {
		return fmt.Errorf("watch codec: cannot read into %T", v)
	}
	if len(data) == 1 {
		return r.Unmarshal(data[0].ReadOnlyData())
	}
	return r.Unmarshal(data.Materialize())
}

// openStream opens a stream on c's connection, through its interceptors
// (its auth token, the leader requirement in ctx's metadata), and sends
// the create of the first prefix's watcher. It waits for a connection that
// is ready, as clientv3 does; the stream lives until ctx ends.
func openStream(ctx context.Context, c *clientv3.Client, prefix string, from int64) (*stream, error) {
	ws, err := pb.NewWatchClient(c.ActiveConnection()).Watch(ctx, watchCallOpts...)
	if err != nil {
		return nil, streamErr(err)
	}
	st := &stream{ws: ws}
	if err := st.create(prefix, from); err != nil {
		return nil, err
	}
	return st, nil
}

// create asks for a watcher of every key under prefix from revision from,
// with etcd's periodic progress notifications.
func (st *stream) create(prefix string, from int64) error {
	return st.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)),
		StartRevision: from, ProgressNotify: true,
	}}})
}

// requestProgress asks etcd to report the revision up to which the stream
// has sent every change. etcd 3.5 answers only once every watcher on the
// stream is synced, with watch ID -1; a grpc-proxy never does.
func (st *stream) requestProgress() error {
	return st.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
}

// ordersProgress asks c's member for its version (Status, on the
// stream's own connection) and reports whether its answers to progress
// requests come after every event before them on the stream. etcd before
// 3.4.31 and 3.5.13 could answer while a watcher was still catching up,
// with a revision ahead of events it had yet to send (etcd #15220, fixed
// by #15237 and #17557): a resume point taken from such an answer would
// skip those events. These are the versions the Kubernetes apiserver
// requires before it serves consistent reads from its watch cache on the
// same answers. An error (an etcd that refuses Status) is no. version is
// what the member reported, or the error, for the log.
func ordersProgress(ctx context.Context, c *clientv3.Client) (ordered bool, version string) {
	resp, err := pb.NewMaintenanceClient(c.ActiveConnection()).Status(ctx, &pb.StatusRequest{}, etcdclient.CallOptions...)
	if err != nil {
		return false, err.Error()
	}
	return progressOrdered(resp.Version), resp.Version
}

// progressOrdered is ordersProgress's rule for an etcd version: 3.4.31 on
// in 3.4, 3.5.13 on in 3.5, and every release from 3.6.
func progressOrdered(version string) bool {
	if strings.Contains(version, "-") {
		return false // a pre-release: etcd's main branch called itself 3.6.0-alpha.0 before the fixes
	}
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return false
	}
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return false
		}
		v[i] = n
	}
	switch {
	case v[0] != 3:
		return v[0] > 3
	case v[1] == 4:
		return v[2] >= 31
	case v[1] == 5:
		return v[2] >= 13
	}
	return v[1] > 5
}

// send sends req. gRPC's Send reports a stream that has ended as io.EOF,
// and the reason only to Recv: that is left to the receiving goroutine,
// which then counts the restart for what it was (no leader, unreachable).
func (st *stream) send(req *pb.WatchRequest) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.ws.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return streamErr(err)
	}
	return nil
}

// receive reads the stream until it fails or ctx ends, handing out each
// response, with the index in prefixes of the watcher it is for (-1: the
// stream's, an answer to a progress request), and the error that ended it
// last. The watchers of prefixes[1:] are created in turn, each once the
// previous one's created response came. Only the last created response is
// handed out, and created is called before it: the store asks for
// progress only from then on, since etcd answers for the watchers it has,
// and an answer before the last was created would vouch for prefixes whose
// events have not come yet. from is the revision the watchers start at.
func (st *stream) receive(ctx context.Context, prefixes []string, from int64, out chan<- result, created func()) {
	next := 1
	watchers := map[int64]int{} // watch ID -> prefix, from the created responses, which come in order
	for {
		resp, err := st.ws.Recv()
		r := result{resp: resp, err: streamErr(err), prefix: -1}
		if err == nil {
			r.err = canceled(resp, from)
			if resp.Created {
				watchers[resp.WatchId] = len(watchers)
			} else if i, ok := watchers[resp.WatchId]; ok {
				r.prefix = i
			}
		}
		if r.err == nil && resp.Created {
			if next < len(prefixes) {
				r.err = st.create(prefixes[next], from)
				next++
				if r.err == nil {
					continue
				}
			} else {
				created()
			}
		}
		select {
		case out <- r:
		case <-ctx.Done():
			return
		}
		if r.err != nil {
			return
		}
	}
}

// canceled is why etcd canceled a watcher, as clientv3 reports it: a start
// revision compacted away, or the reason etcd gave (a permission refused).
// A grpc-proxy whose own watch ended cancels ours with no reason: the
// stream is closed, as clientv3 closed the watcher's channel.
func canceled(resp *pb.WatchResponse, from int64) error {
	switch {
	case resp.CompactRevision != 0:
		return fmt.Errorf("watch from revision %d, compacted at %d: %w", from, resp.CompactRevision, rpctypes.ErrCompacted)
	case !resp.Canceled:
		return nil
	case resp.CancelReason != "":
		return rpctypes.Error(status.Error(codes.FailedPrecondition, resp.CancelReason))
	}
	return errWatchClosed
}

// streamErr is err as clientv3 returns etcd's errors. io.EOF, the server
// ending the stream without one, is errWatchClosed; gRPC's Unavailable
// that is not etcd's own (its "no leader" is one) is the connection lost,
// errUnreachable: clientv3 would have reopened the stream on the same
// endpoint, and the store moves to the next.
func streamErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		return errWatchClosed
	}
	e := rpctypes.Error(err)
	if _, etcd := e.(rpctypes.EtcdError); !etcd && status.Code(err) == codes.Unavailable {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	return e
}
