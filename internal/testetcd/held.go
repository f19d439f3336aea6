package testetcd

import (
	"context"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Held plays a frozen member that holds a transaction: once armed, the
// next transaction that match accepts is not sent, its caller is told the
// member is unavailable, and it goes to etcd only when the test calls
// Release. Use Intercept as the interceptor of a client (Intercepted).
type Held struct {
	match   func(*pb.TxnRequest) bool
	armed   atomic.Bool
	release chan struct{}
	done    chan bool
}

// NewHeld holds the transactions match accepts, once armed.
func NewHeld(match func(*pb.TxnRequest) bool) *Held {
	return &Held{match: match, release: make(chan struct{}), done: make(chan bool, 1)}
}

// Arm holds the next transaction match accepts.
func (h *Held) Arm() { h.armed.Store(true) }

// Holding is whether a transaction was taken since Arm.
func (h *Held) Holding() bool { return !h.armed.Load() }

// Release sends the held transaction to etcd and reports whether it
// committed: it was sent, answered, and its compares held.
func (h *Held) Release() bool {
	close(h.release)
	return <-h.done
}

// Intercept is a grpc.UnaryClientInterceptor. The error it returns is
// Unavailable, not DeadlineExceeded, which clientv3 would retry at once
// while the caller's context lives, as a frozen member's timeout is not.
func (h *Held) Intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	txn, ok := req.(*pb.TxnRequest)
	if !ok || !h.match(txn) || !h.armed.CompareAndSwap(true, false) {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	go func() {
		<-h.release
		resp := &pb.TxnResponse{}
		err := invoke(context.Background(), method, req, resp, cc, opts...)
		h.done <- err == nil && resp.Succeeded
	}()
	return status.Error(codes.Unavailable, "injected: held by a frozen member")
}
