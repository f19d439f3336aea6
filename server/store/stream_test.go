package store

import (
	"context"
	"fmt"
	"io"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdns/etcdns/etcdclient"
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

// A watcher refused for its login token is one a new login mends, and the
// store asks the same endpoint again; one refused its prefix is not.
func TestWatchRefusedForItsToken(t *testing.T) {
	for _, c := range []struct {
		reason string
		want   bool
	}{
		{rpctypes.ErrGRPCInvalidAuthToken.Error(), true},
		{rpctypes.ErrGRPCAuthOldRevision.Error(), true},
		{rpctypes.ErrGRPCUserEmpty.Error(), true},
		{rpctypes.ErrGRPCPermissionDenied.Error(), false},
	} {
		err := canceled(&pb.WatchResponse{Created: true, Canceled: true, CancelReason: c.reason}, 5)
		if got := etcdclient.RefusedToken(err); got != c.want {
			t.Errorf("a watcher canceled with %q: a refused token %v, want %v", c.reason, got, c.want)
		}
	}
}

// scripted is a Watch stream that returns responses from a script and
// takes every request.
type scripted struct {
	grpc.ClientStream
	script []*pb.WatchResponse
}

func (s *scripted) Send(*pb.WatchRequest) error { return nil }

func (s *scripted) Recv() (*pb.WatchResponse, error) {
	if len(s.script) == 0 {
		return nil, context.Canceled
	}
	r := s.script[0]
	s.script = s.script[1:]
	return r, nil
}

// receive tells each response's watcher by the watch ID its created
// response gave, in the order the creates were sent, whatever the IDs are:
// through a grpc-proxy they are the proxy's.
func TestReceiveTellsTheWatcherOfEachResponse(t *testing.T) {
	event := func(id int64, key string) *pb.WatchResponse {
		return &pb.WatchResponse{WatchId: id, Events: []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: 9}}}}
	}
	st := &stream{ws: &scripted{script: []*pb.WatchResponse{
		{WatchId: 7, Created: true},
		event(7, "/a/x"),
		{WatchId: 3, Created: true},
		event(3, "/b/x"),
		event(7, "/a/y"),
		{WatchId: 3, Header: &pb.ResponseHeader{Revision: 12}},  // a notification
		{WatchId: -1, Header: &pb.ResponseHeader{Revision: 12}}, // an answer
	}}}
	out := make(chan result, 16)
	st.receive(context.Background(), []string{"/a/", "/b/"}, 5, out, func() {})
	var got []int
	for len(out) > 0 {
		if r := <-out; r.err == nil {
			got = append(got, r.prefix)
		}
	}
	want := []int{0, -1, 1, 0, 1, -1} // the last created response is handed on, for no prefix
	if len(got) != len(want) {
		t.Fatalf("prefixes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("prefixes %v, want %v", got, want)
		}
	}
}
