package store

import (
	"fmt"
	"io"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What ends a watch stream is counted as the restart reason an operator
// reads in etcdns_dnsd_watch_restarts_total.
func TestStreamEndsAreCountedForWhatTheyAre(t *testing.T) {
	for _, c := range []struct {
		what string
		err  error
		want string
	}{
		{"a watcher canceled for a compacted start", canceled(&pb.WatchResponse{Canceled: true, CompactRevision: 7}, 5), ReasonCompacted},
		{"a watcher a grpc-proxy canceled without a reason", canceled(&pb.WatchResponse{Canceled: true}, 5), ReasonClosed},
		{"a watcher refused by etcd's auth", canceled(&pb.WatchResponse{Created: true, Canceled: true,
			CancelReason: rpctypes.ErrGRPCPermissionDenied.Error()}, 5), ReasonError},
		{"the stream ended by etcd", streamErr(io.EOF), ReasonClosed},
		{"the connection lost", streamErr(status.Error(codes.Unavailable, "connection reset by peer")), ReasonUnreachable},
		{"a member without a leader", streamErr(rpctypes.ErrGRPCNoLeader), ReasonNoLeader},
		{"the stream reset", streamErr(status.Error(codes.Internal, "stream terminated by RST_STREAM")), ReasonError},
	} {
		if got := reasonOf(c.err); got != c.want {
			t.Errorf("%s (%v): counted %q, want %q", c.what, c.err, got, c.want)
		}
	}
	if err := canceled(&pb.WatchResponse{Events: nil}, 5); err != nil {
		t.Errorf("a response of a live watcher: %v", err)
	}
	if err := canceled(&pb.WatchResponse{Canceled: true, CompactRevision: 7}, 5); err == nil || fmt.Sprint(err) != "watch from revision 5, compacted at 7: etcdserver: mvcc: required revision has been compacted" {
		t.Errorf("compacted: %v", err)
	}
}
