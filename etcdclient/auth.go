package etcdclient

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/etcdns/etcdns/config"
)

// A password login is asked for once a process, not once a stream.
//
// clientv3, given a user and a password, authenticates when a client is
// made and again before every stream it opens: a watch, a lease's
// keepalive. Each Authenticate costs the member that takes it a bcrypt
// hash and a raft proposal: 64 ms of its CPU at etcd's default cost, and as
// long to wait, on the 2-vCPU VM (bench/README.md, "A password asked for
// once"). dnsd opens a client for every endpoint and a stream for every
// move of its watch, so a fleet of frontends starting, or moving off a
// failed proxy, had the members hash a password for each of them several
// times over, while the publisher waited to write.
//
// So the clients dialled here with a password share one token, kept by a
// tokens for their configuration. It is asked for before the first
// request that needs it, and again only after etcd refused it: a token
// expired (--auth-token-ttl), or older than a change to the users and
// roles.
type tokens struct {
	user, password string
	timeout        time.Duration // of one Authenticate: the dial timeout
	turn           chan struct{} // held while one Authenticate runs

	mu         sync.Mutex
	token      string // "": none yet, or the last one was refused
	notEnabled bool   // etcd said it has no auth: send none
	// A wrong password is not tried again until refusedUntil: each try
	// costs etcd a bcrypt hash, and a DaemonSet of frontends with a wrong
	// Secret would otherwise have the members hash for each of them at
	// every retry of every request. The wait doubles up to maxLoginWait.
	refusedErr   error
	refusedUntil time.Time
	refusedWait  time.Duration
}

const (
	firstLoginWait = time.Second
	maxLoginWait   = 5 * time.Minute
)

// authenticateMethod is the one call made without a token.
const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

var (
	tokensMu sync.Mutex
	shared   = map[string]*tokens{}
)

// tokensFor returns the tokens every client of c shares, or nil without
// a password. DialEach's clients are of one cluster, as is Dial's.
func tokensFor(c config.Etcd) *tokens {
	if c.Username == "" || c.Password == "" {
		return nil
	}
	key := strings.Join(endpointsOf(c), ",") + "\x00" + c.Username + "\x00" + c.Password
	tokensMu.Lock()
	defer tokensMu.Unlock()
	t := shared[key]
	if t == nil {
		t = &tokens{user: c.Username, password: c.Password, timeout: dialTimeout(c), turn: make(chan struct{}, 1)}
		shared[key] = t
	}
	return t
}

func (t *tokens) current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.token
}

// forget drops token, which etcd refused, if it is still the one held, so
// that the next request authenticates first. A request refused with no
// token at all means etcd has turned auth on since it said it had none.
func (t *tokens) forget(token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token == token {
		t.token, t.notEnabled = "", false
	}
}

// ensure authenticates on cc unless a token is held, or etcd has said it
// has no auth. One caller authenticates at a time; those waiting behind it
// find its token and send nothing.
func (t *tokens) ensure(ctx context.Context, cc *grpc.ClientConn) error {
	held := func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.token != "" || t.notEnabled
	}
	if held() {
		return nil
	}
	if err := t.refused(); err != nil {
		return err
	}
	select {
	case t.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-t.turn }()
	if held() {
		return nil
	}
	if err := t.refused(); err != nil {
		return err
	}
	// The login is bounded, and does not wait for a connection to become
	// ready: every other client of the configuration waits for it, and a
	// caller whose member is frozen or down must not hold them (a
	// publisher's probes and lease renewals among them) for longer.
	actx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	resp, err := pb.NewAuthClient(cc).Authenticate(actx, &pb.AuthenticateRequest{Name: t.user, Password: t.password}, append(slices.Clip(CallOptions), grpc.WaitForReady(false))...)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch rpctypes.Error(err) {
	case nil:
	case rpctypes.ErrAuthNotEnabled:
		t.token, t.notEnabled = "", true
		return nil
	case rpctypes.ErrAuthFailed:
		t.refusedWait = min(max(2*t.refusedWait, firstLoginWait), maxLoginWait)
		t.refusedErr = fmt.Errorf("etcd refused user %q's password (not tried again for %s): %w", t.user, t.refusedWait, rpctypes.ErrAuthFailed)
		t.refusedUntil = time.Now().Add(t.refusedWait)
		return t.refusedErr
	default:
		return err // as gRPC gave it, so that clientv3 retries what it would have
	}
	t.token, t.notEnabled, t.refusedWait = resp.Token, false, 0
	return nil
}

// refused is the error of the last login while it is not to be tried
// again.
func (t *tokens) refused() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Now().Before(t.refusedUntil) {
		return t.refusedErr
	}
	return nil
}

// refusedToken reports whether err is etcd refusing a request's token (or
// its absence), which a new token mends.
func refusedToken(err error) bool {
	switch rpctypes.Error(err) {
	case rpctypes.ErrInvalidAuthToken, rpctypes.ErrAuthOldRevision, rpctypes.ErrUserEmpty:
		return true
	}
	return false
}

// GetRequestMetadata puts the token on every request (grpc's
// credentials.PerRPCCredentials).
func (t *tokens) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if tok := t.current(); tok != "" {
		return map[string]string{rpctypes.TokenFieldNameGRPC: tok}, nil
	}
	return nil, nil
}

// RequireTransportSecurity is false: a token is sent as the endpoint's
// scheme says, with TLS or without, as clientv3 sends it.
func (t *tokens) RequireTransportSecurity() bool { return false }

// unary authenticates before a request when no token is held, and once
// again when etcd refuses the one sent, then sends the request again.
func (t *tokens) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == authenticateMethod {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	if err := t.ensure(ctx, cc); err != nil {
		return err
	}
	sent := t.current()
	err := invoke(ctx, method, req, reply, cc, opts...)
	if !refusedToken(err) {
		return err
	}
	t.forget(sent)
	if err := t.ensure(ctx, cc); err != nil {
		return err
	}
	err = invoke(ctx, method, req, reply, cc, opts...)
	if refusedToken(err) {
		// Refused with a token just given: not one that clientv3's own
		// retries, each of which would log in again, should see.
		return fmt.Errorf("etcd refused a token it had just given (%v)", err.Error())
	}
	return err
}

// stream authenticates before a stream opens when no token is held. A
// stream cannot be sent again from here: when etcd refuses its token (the
// stream fails, or a watcher is canceled with that reason), the token is
// dropped, and whoever opens the next stream authenticates.
func (t *tokens) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, open grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := t.ensure(ctx, cc); err != nil {
		return nil, err
	}
	sent := t.current()
	s, err := open(ctx, desc, cc, method, opts...)
	if err != nil {
		if refusedToken(err) {
			t.forget(sent)
		}
		return nil, err
	}
	return &tokenStream{ClientStream: s, t: t, sent: sent}, nil
}

type tokenStream struct {
	grpc.ClientStream
	t    *tokens
	sent string
}

func (s *tokenStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		if refusedToken(err) {
			s.t.forget(s.sent)
		}
		return err
	}
	// A watcher's create is refused in a response, not by the stream.
	if w, ok := m.(*pb.WatchResponse); ok && w.Canceled && refusedReason(w.CancelReason) {
		s.t.forget(s.sent)
	}
	return nil
}

// RefusedToken reports whether err is etcd refusing a request's login
// token, in a response or in a watcher's cancel reason: a new login mends
// it, and the clients dialled here log in again for the next request.
func RefusedToken(err error) bool {
	return err != nil && (refusedToken(err) || refusedReason(err.Error()))
}

// refusedReason reports whether a watcher's cancel reason is a refused
// token. etcd writes the whole gRPC error there ("rpc error: code =
// Unauthenticated desc = etcdserver: invalid auth token").
func refusedReason(reason string) bool {
	for _, e := range []error{rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrGRPCUserEmpty} {
		if reason != "" && strings.HasSuffix(reason, rpctypes.ErrorDesc(e)) {
			return true
		}
	}
	return false
}
