package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdCluster is a cluster of real etcd members on loopback. Each member
// embeds an Etcd, so Stop, Kill, Pause, Resume, Start and Etcdctl work on
// one member at a time. Every member's peer traffic goes through a
// PeerRouter, so a test can also cut one member off from its peers (while
// its clients still reach it) or delay what it exchanges with them.
type EtcdCluster struct {
	Members []*EtcdMember

	t      testing.TB
	bin    string   // the etcd binary (WithEtcdTool), for replacements too
	args   []string // extra etcd flags, for replacements too
	token  string
	router *PeerRouter
	gen    int // names replacement members
}

// EtcdMember is one member. Its Etcd (and so its Process) is replaced by
// ReplaceMember.
type EtcdMember struct {
	*Etcd
	Name string
	// listenPeer is where etcd itself listens for peers; PeerURL (what
	// the other members dial) is the router's port in front of it.
	listenPeer string
}

// StartEtcdCluster starts n etcd members that form one new cluster, and
// waits until every one of them reports healthy. Their processes start
// together: a member of a new cluster is healthy only once a quorum of its
// peers is up, so none can be waited for alone.
func StartEtcdCluster(t testing.TB, n int, opts ...EtcdOption) *EtcdCluster {
	t.Helper()
	var cfg etcdConfig
	for _, o := range opts {
		o(&cfg)
	}
	c := &EtcdCluster{t: t, bin: cfg.bin(t), args: cfg.args, token: fmt.Sprintf("harness-%d", time.Now().UnixNano()), router: newPeerRouter(t)}
	var initial []string
	for i := range n {
		m := &EtcdMember{
			Name:       fmt.Sprintf("m%d", i),
			listenPeer: fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		}
		m.Etcd = &Etcd{
			Endpoint: fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
			PeerURL:  "http://" + c.router.listen(m.Name, m.listenPeer),
			DataDir:  t.TempDir(),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		c.start(m, strings.Join(initial, ","), "new", false)
	}
	deadline := time.Now().Add(StartupTimeout)
	for _, m := range c.Members {
		for {
			err := HTTPOK(m.Endpoint + "/health")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd member %s not healthy after %v: %v (log: %s)", m.Endpoint, StartupTimeout, err, m.LogPath)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.learnIDs()
	c.waitWritable(deadline)
	return c
}

// waitWritable returns once the cluster commits a write. Healthy members
// can still refuse one for a moment after the start (an election, the
// peer connections learnIDs closes), and a test's first write must not
// meet that.
func (c *EtcdCluster) waitWritable(deadline time.Time) {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cli.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, "/harness/started", "1")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("etcd cluster takes no write after %v: %v", StartupTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *EtcdCluster) start(m *EtcdMember, initial, state string, wait bool) {
	c.t.Helper()
	args := append([]string{
		"--name=" + m.Name,
		"--data-dir=" + m.DataDir,
		"--listen-client-urls=" + m.Endpoint,
		"--advertise-client-urls=" + m.Endpoint,
		"--listen-peer-urls=http://" + m.listenPeer,
		"--initial-advertise-peer-urls=" + m.PeerURL,
		"--initial-cluster=" + initial,
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=" + c.token,
	}, c.args...)
	endpoint := m.Endpoint
	ready := func() error { return HTTPOK(endpoint + "/health") }
	if wait {
		m.Process = StartProcess(c.t, c.bin, args, nil, ready)
		return
	}
	m.Process = StartProcess(c.t, c.bin, args, nil, nil)
	// From now on Start and Restart wait for the member's health, which a
	// single member coming back to a cluster with quorum reaches.
	m.Process.ready = ready
}

// learnIDs tells the router which member id (the X-Server-From header of
// etcd's peer requests) belongs to which member.
func (c *EtcdCluster) learnIDs() {
	c.t.Helper()
	cli := c.Client(c.t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.MemberList(ctx)
	if err != nil {
		c.t.Fatalf("etcd member list: %v", err)
	}
	for _, pm := range r.Members {
		for _, m := range c.Members {
			if pm.Name == m.Name {
				c.router.setID(m.Name, fmt.Sprintf("%x", pm.ID))
			}
		}
	}
	// Connections made before the ids were known name no caller, so
	// Isolate could not cut them by their caller; etcd dials them again
	// at once, and then they do.
	c.router.mu.Lock()
	for rc := range c.router.conns {
		if rc.from == "" {
			rc.close()
		}
	}
	c.router.mu.Unlock()
}

// Endpoints are the members' client URLs, in member order.
func (c *EtcdCluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Endpoint
	}
	return out
}

// Leader returns the index of the member that a majority of the members
// answering within a second follow (a paused, stopped or isolated one may
// not), retrying for up to StartupTimeout.
func (c *EtcdCluster) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(StartupTimeout)
	for {
		if i, ok := c.leader(); ok {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster: no leader after %v", StartupTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *EtcdCluster) leader() (int, bool) {
	votes := map[uint64]int{}
	ids := map[uint64]int{}
	for i, m := range c.Members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, m.Endpoint)
		cancel()
		cli.Close()
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			votes[st.Leader]++
		}
	}
	for id, n := range votes {
		if i, ok := ids[id]; ok && n > len(c.Members)/2 {
			return i, true
		}
	}
	return 0, false
}

// Client returns a client of every member, closed when the test ends.
func (c *EtcdCluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// ReplaceMember kills member i, removes it from the cluster, adds a new
// member with an empty data directory on the same client and peer URLs
// (so clients configured with the old endpoint list reach it), starts it
// with --initial-cluster-state=existing and waits until it is healthy.
func (c *EtcdCluster) ReplaceMember(t testing.TB, i int) {
	t.Helper()
	old := c.Members[i]
	old.Kill()
	var others []string
	for j, m := range c.Members {
		if j != i {
			others = append(others, m.Endpoint)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: others, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("etcd member list: %v", err)
	}
	for _, pm := range list.Members {
		if pm.Name != old.Name {
			continue
		}
		// etcd refuses while the members left have not all been
		// connected for a few seconds (its strict reconfiguration check).
		for {
			_, err := cli.MemberRemove(ctx, pm.ID)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("etcd member remove %s: %v", old.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The same check refuses an add until the members left have been
	// connected for a few seconds, as after a restart of one of them.
	var added *clientv3.MemberAddResponse
	for {
		added, err = cli.MemberAdd(ctx, []string{old.PeerURL})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("etcd member add: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.gen++
	m := &EtcdMember{
		Name:       fmt.Sprintf("%s-r%d", old.Name, c.gen),
		listenPeer: old.listenPeer,
		Etcd:       &Etcd{Endpoint: old.Endpoint, PeerURL: old.PeerURL, DataDir: t.TempDir()},
	}
	c.router.rename(old.Name, m.Name)
	c.router.setID(m.Name, fmt.Sprintf("%x", added.Member.ID))
	var initial []string
	for _, pm := range added.Members {
		name := pm.Name
		if pm.ID == added.Member.ID {
			name = m.Name
		}
		for _, u := range pm.PeerURLs {
			initial = append(initial, name+"="+u)
		}
	}
	c.Members[i] = m
	c.start(m, strings.Join(initial, ","), "existing", true)
}

// Isolate cuts member i off from every other member, in both directions,
// while its clients still reach it: a partition of the peer network only.
func (c *EtcdCluster) Isolate(i int) { c.router.isolate(c.Members[i].Name, true) }

// Heal undoes Isolate.
func (c *EtcdCluster) Heal(i int) { c.router.isolate(c.Members[i].Name, false) }

// DelayPeers makes everything member i exchanges with its peers arrive d
// late (0 ends it): a member that stays in the cluster but falls behind,
// as with a slow disk or a long network path.
func (c *EtcdCluster) DelayPeers(i int, d time.Duration) { c.router.delay(c.Members[i].Name, d) }

// PeerRouter forwards etcd's peer (raft) connections, one listener per
// member, and knows which member dialled each connection from the
// X-Server-From header etcd puts on every peer request. A plain TCP Proxy
// in front of one member cannot separate it from the others: etcd's peer
// transport dials in both directions and falls back from one stream to
// another, so cutting only the connections into a member leaves the ones
// it dials, and the cluster never notices.
type PeerRouter struct {
	mu       sync.Mutex
	byID     map[string]string // member id (hex) -> name
	isolated map[string]bool
	delays   map[string]time.Duration
	conns    map[*routed]bool
	ls       []net.Listener
	names    []*string // each listener's member, renamed by ReplaceMember
}

type routed struct {
	from, to  string // member names; from is "" when the header named none
	down, up  net.Conn
	closeOnce sync.Once
}

func (r *routed) close() {
	r.closeOnce.Do(func() {
		r.down.Close()
		if r.up != nil {
			r.up.Close()
		}
	})
}

func newPeerRouter(t testing.TB) *PeerRouter {
	r := &PeerRouter{byID: map[string]string{}, isolated: map[string]bool{}, delays: map[string]time.Duration{}, conns: map[*routed]bool{}}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, l := range r.ls {
			l.Close()
		}
		for c := range r.conns {
			c.close()
		}
	})
	return r
}

// listen starts the router's port for member name, forwarding to target,
// and returns its address.
func (r *PeerRouter) listen(name, target string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	to := &name
	r.mu.Lock()
	r.ls = append(r.ls, l)
	r.names = append(r.names, to)
	r.mu.Unlock() // renamed in place by ReplaceMember
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			dest := *to
			r.mu.Unlock()
			go r.forward(c, dest, target)
		}
	}()
	return l.Addr().String()
}

func (r *PeerRouter) setID(name, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[id] = name
}

func (r *PeerRouter) rename(old, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.names {
		if *p == old {
			*p = name
		}
	}
	for id, n := range r.byID {
		if n == old {
			delete(r.byID, id)
		}
	}
	r.isolated[name], r.delays[name] = r.isolated[old], r.delays[old]
	delete(r.isolated, old)
	delete(r.delays, old)
}

func (r *PeerRouter) isolate(name string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.isolated[name] = on
	if !on {
		return
	}
	for c := range r.conns {
		if c.from == name || c.to == name {
			c.close()
			delete(r.conns, c)
		}
	}
}

func (r *PeerRouter) delay(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delays[name] = d
}

// blocked reports whether a connection between from and to must not pass.
func (r *PeerRouter) blocked(from, to string) bool {
	return r.isolated[to] || (from != "" && r.isolated[from])
}

// delayOf is how late a connection between from and to delivers.
func (r *PeerRouter) delayOf(from, to string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.delays[to]
	if from != "" {
		d = max(d, r.delays[from])
	}
	return d
}

func (r *PeerRouter) forward(c net.Conn, to, target string) {
	// The request head says who is calling; it is passed on unchanged.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 16<<10)
	var seen bytes.Buffer
	from := ""
	if req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(br, &seen))); err == nil {
		r.mu.Lock()
		from = r.byID[req.Header.Get("X-Server-From")]
		r.mu.Unlock()
	}
	c.SetReadDeadline(time.Time{})
	head := seen.Bytes()
	rc := &routed{from: from, to: to, down: c}
	r.mu.Lock()
	if r.blocked(from, to) {
		r.mu.Unlock()
		c.Close()
		return
	}
	r.conns[rc] = true
	r.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		rc.close()
		r.drop(rc)
		return
	}
	r.mu.Lock()
	rc.up = up
	if !r.conns[rc] { // isolated while dialling
		r.mu.Unlock()
		rc.close()
		return
	}
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { r.pipe(rc, up, io.MultiReader(bytes.NewReader(head), br)); done <- struct{}{} }()
	go func() { r.pipe(rc, c, up); done <- struct{}{} }()
	<-done
	rc.close()
	<-done
	r.drop(rc)
}

func (r *PeerRouter) drop(rc *routed) {
	r.mu.Lock()
	delete(r.conns, rc)
	r.mu.Unlock()
}

// pipe copies src to dst, each chunk held back by the delay in force
// when it was read: a constant latency, not a lower rate.
func (r *PeerRouter) pipe(rc *routed, dst net.Conn, src io.Reader) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now().Add(r.delayOf(rc.from, rc.to))}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		if d := time.Until(ch.at); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(ch.b); err != nil {
			rc.close()
			for range q { // let the reader end
			}
			return
		}
	}
}
