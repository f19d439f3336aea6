package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// batch is how many datagrams one recvmmsg takes and one sendmmsg sends.
// Under load the socket queue holds many queries; taking them together
// pays the system call once per batch instead of twice per query, which
// is most of what answering from memory costs.
const batch = 32

// mmsghdr is struct mmsghdr of recvmmsg(2) and sendmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// udpBatch is one socket reader's batch state. The kernel writes into
// in, names and the headers; every pointer in them points into this
// struct's own arrays and buffers, allocated once.
type udpBatch struct {
	w     *worker
	rc    syscall.RawConn
	in    [batch]mmsghdr
	out   [batch]mmsghdr
	inIov [batch]unix.Iovec
	outIo [batch]unix.Iovec
	names [batch]unix.RawSockaddrInet6 // large enough for IPv4 too
	bufs  [batch][]byte
	resps [batch][]byte

	// On a wildcard socket (udpControl), each datagram's control data:
	// read, where it was sent; then written, the answer's source.
	pktinfo bool
	ctrls   [batch]ctrlBuf

	got, sent int   // results of the last recvmmsg / sendmmsg
	pending   int   // responses to send in out[sent:pending]
	errno     error // of the last call
	recv      func(fd uintptr) bool
	send      func(fd uintptr) bool
}

// kernelWaitCores is the GOMAXPROCS from which a reader whose socket runs
// dry waits for it in the kernel (ppoll) instead of in Go's poller.
//
// Parked in the poller, a reader is woken through the scheduler: the
// thread that polls readies it, and another thread is woken to run it.
// When the load generator keeps a socket only nearly busy, that is a wake
// a batch. Knot's threads sleep on their sockets in the kernel, and at 4
// and 8 server cores of the 16-core machine Knot kept scaling where dnsd
// did not (bench/README.md, stops 30 and 34). Waiting in the kernel, the
// reader's own thread sleeps on its socket and wakes straight to the
// batch, and took 2-14% more queries a second there, for 3-15% less CPU a
// query (stop 37). On two cores shared with the load generator it lost
// 7-17%: a thread asleep in ppoll keeps its P until the scheduler's
// monitor takes it back, and on so few cores that P was wanted. So below
// four the poller waits.
const kernelWaitCores = 4

// serveUDP reads and answers until shutdown, then returns; the socket
// stays open for the caller to close, so the answers being written when
// shutdown starts still go out. A reader waiting in the poller is stopped
// by the socket's read deadline set in the past; one waiting in the kernel
// only by stop, and the socket must not be closed before it returns: it
// holds the descriptor through its wait (Serve closes the sockets last).
func (s *Server) serveUDP(pc *net.UDPConn, reads prometheus.Counter, stop *udpStop) error {
	rc, err := pc.SyscallConn()
	if err != nil {
		return s.serveEach(pc, reads)
	}
	b := newUDPBatch(s.newUDPWorker(pc), wildcard(pc.LocalAddr().String()))
	b.rc = rc
	kernel := stop != nil
	for {
		if kernel {
			err := b.waitInKernel(stop)
			if errors.Is(err, errPollFailed) {
				// The poller copes with whatever the socket reports.
				s.log.Warn("UDP reader falls back to Go's poller", "err", err)
				kernel = false
				continue
			}
			if err != nil {
				return nil // stopped
			}
		} else if err := rc.Read(b.recv); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.log.Warn("reading UDP queries failed", "err", err)
			continue
		}
		if b.errno != nil {
			s.log.Warn("reading UDP queries failed", "err", b.errno)
			continue
		}
		reads.Add(float64(b.got)) // the socket's own counter: no other core writes it
		b.w.startBatch()
		b.answer()
		b.w.addBatch()
		b.flush()
		b.w.endBatch()
	}
}

// errStopped ends a reader that waits in the kernel; errPollFailed moves
// it to Go's poller.
var (
	errStopped    = errors.New("UDP reader stopped")
	errPollFailed = errors.New("the socket reports an error or hang-up with no datagram to read")
)

// waitInKernel reads a batch, sleeping in ppoll on the socket and on stop
// while the socket is dry. ppoll goes through the scheduler's system call
// entry, so the scheduler's monitor hands the P to others while the
// thread sleeps (within 20 us to 10 ms).
func (b *udpBatch) waitInKernel(stop *udpStop) error {
	if stop.stopped.Load() {
		return errStopped
	}
	var fail error
	err := b.rc.Control(func(fd uintptr) {
		fds := [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(stop.fd), Events: unix.POLLIN}}
		for !b.recvmmsg(fd) {
			if fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
				// Reported last time, and still nothing to read: polling
				// again would return at once, for ever.
				fail = errPollFailed
				return
			}
			fds[0].Revents, fds[1].Revents = 0, 0
			if _, err := unix.Ppoll(fds[:], nil, nil); err != nil && err != unix.EINTR {
				fail = fmt.Errorf("%w: ppoll: %w", errPollFailed, err)
				return
			}
			if fds[1].Revents != 0 {
				fail = errStopped
				return
			}
		}
	})
	if fail != nil {
		return fail
	}
	return err
}

// udpStop wakes the readers that wait in the kernel at shutdown: an
// eventfd that each polls beside its socket, readable for all of them once
// written.
type udpStop struct {
	fd      int
	stopped atomic.Bool // a reader still busy checks it between batches
}

// newUDPStop is nil below kernelWaitFrom, or where no eventfd can be had;
// the readers then wait in Go's poller, which the sockets' read deadline
// stops.
func (s *Server) newUDPStop() *udpStop {
	if runtime.GOMAXPROCS(0) < s.kernelWaitFrom {
		return nil
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		s.log.Warn("no eventfd: UDP readers wait in Go's poller", "err", err)
		return nil
	}
	return &udpStop{fd: fd}
}

func (u *udpStop) signal() {
	if u != nil {
		u.stopped.Store(true)
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(u.fd, one[:])
	}
}

func (u *udpStop) close() {
	if u != nil {
		_ = unix.Close(u.fd)
	}
}

func newUDPBatch(w *worker, pktinfo bool) *udpBatch {
	b := &udpBatch{w: w, pktinfo: pktinfo}
	for i := range batch {
		if pktinfo {
			b.in[i].hdr.Control = &b.ctrls[i].b[0]
		}
		b.bufs[i] = make([]byte, udpBufSize)
		b.resps[i] = make([]byte, 0, 512)
		b.inIov[i].Base = &b.bufs[i][0]
		b.in[i].hdr.Iov = &b.inIov[i]
		b.in[i].hdr.SetIovlen(1)
		b.in[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.out[i].hdr.Iov = &b.outIo[i]
		b.out[i].hdr.SetIovlen(1)
	}
	b.recv = b.recvmmsg
	b.send = b.sendmmsg
	return b
}

// recvmmsg is rc.Read's callback: false asks the poller to wait.
//
// Both calls are raw: the socket is non-blocking, so neither ever waits,
// and telling the scheduler that they might (entersyscall) only made its
// monitor hand the P to another thread whenever a sendmmsg was long
// (it delivers each loopback datagram inline). That churn cost about a
// tenth of the CPU at full load; the poller still does all the waiting.
func (b *udpBatch) recvmmsg(fd uintptr) bool {
	for i := range batch {
		b.inIov[i].SetLen(udpBufSize)
		b.in[i].hdr.Namelen = uint32(unsafe.Sizeof(b.names[i]))
		b.in[i].hdr.Flags = 0
	}
	if b.pktinfo {
		for i := range batch {
			b.in[i].hdr.SetControllen(len(b.ctrls[i].b))
		}
	}
	// MSG_TRUNC: a datagram longer than its buffer reports its own
	// length, not the buffer's, for the query log's size of it.
	n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.in[0])), batch, unix.MSG_TRUNC, 0, 0)
	switch e {
	case unix.EAGAIN:
		return false
	case unix.EINTR:
		return false // the poller calls again
	case 0:
		b.got, b.errno = int(n), nil
	default:
		b.got, b.errno = 0, e
	}
	return true
}

// answer handles each datagram read and queues its response, addressed
// to the sockaddr it came from.
func (b *udpBatch) answer() {
	b.pending, b.sent = 0, 0
	w := b.w
	for i := range b.got {
		from, ok := addrPort(&b.names[i])
		if !ok {
			continue
		}
		w.from = from
		if b.pktinfo {
			w.asked = pktinfoDst(b.ctrls[i].b[:min(int(b.in[i].hdr.Controllen), len(b.ctrls[i].b))])
		}
		w.out = b.resps[i][:0]
		var out []byte
		if b.in[i].hdr.Flags&unix.MSG_TRUNC != 0 {
			out = w.oversized(b.bufs[i][:min(int(b.in[i].n), udpBufSize)], int(b.in[i].n)) // cut at udpBufSize: what is left is no query
		} else {
			out = w.handle(b.bufs[i][:b.in[i].n])
		}
		if out == nil {
			continue
		}
		b.resps[i] = out[:0] // keep the grown buffer for the next batch
		j := b.pending
		b.outIo[j].Base = &out[0]
		b.outIo[j].SetLen(len(out))
		b.out[j].hdr.Name = b.in[i].hdr.Name
		b.out[j].hdr.Namelen = b.in[i].hdr.Namelen
		if b.pktinfo {
			b.setSource(j, &b.ctrls[i], w.asked)
		}
		b.pending++
	}
}

// flush sends the queued responses. A datagram the kernel refuses (the
// client's port closed, no route) is dropped, as sendto's error would be.
func (b *udpBatch) flush() {
	for b.sent < b.pending {
		if err := b.rc.Write(b.send); err != nil {
			return // socket closed
		}
	}
}

func (b *udpBatch) sendmmsg(fd uintptr) bool {
	n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.out[b.sent])), uintptr(b.pending-b.sent), 0, 0, 0)
	switch e {
	case 0:
		b.sent += int(n)
	case unix.EAGAIN, unix.EINTR:
		return false
	default:
		// The first unsent one failed: skip it, or, refused with its
		// source, send it as without pktinfo.
		if h := &b.out[b.sent].hdr; h.Control != nil && sourceRefused(e) {
			h.Control = nil
			h.SetControllen(0)
		} else {
			b.sent++
		}
	}
	return true
}

// addrPort reads the client address out of a sockaddr without allocating.
func addrPort(sa *unix.RawSockaddrInet6) (netip.AddrPort, bool) {
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port), true
	}
	return netip.AddrPort{}, false
}

// ctrlBuf is one datagram's control data, with room for both pktinfos a
// dual-stack socket gets with an IPv4 datagram.
type ctrlBuf struct {
	_ [0]uint64 // aligned as a cmsghdr
	b [72]byte  // CMSG_SPACE of in_pktinfo and in6_pktinfo on 64-bit systems
}

// sourceRefused: the kernel would not send from the source a pktinfo
// named (an address since removed, a link-local one off its link, no
// route from it). Other errors (a firewall's, no buffer) would refuse the
// datagram from anywhere.
func sourceRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENETUNREACH)
}

// pktinfoDst is where a datagram was sent, as its control data says; the
// zero source where it says nothing usable. in_pktinfo's local address
// wins: for a broadcast it is the interface's, which an answer can leave
// from.
func pktinfoDst(ctl []byte) source {
	var dst source
	for len(ctl) >= unix.CmsgLen(0) {
		h, data, rest, err := unix.ParseOneSocketControlMessage(ctl)
		if err != nil {
			break
		}
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			return source{addr: netip.AddrFrom4([4]byte(data[4:8]))} // ipi_spec_dst
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			dst = source{addr: netip.AddrFrom16([16]byte(data[:16])), ifindex: binary.NativeEndian.Uint32(data[16:20])} // ipi6_addr, ipi6_ifindex
		}
		ctl = rest
	}
	return dst
}

// setSource has out[j] leave from src, told by a control message in c.
func (b *udpBatch) setSource(j int, c *ctrlBuf, src source) {
	h := &b.out[j].hdr
	n := putPktinfo(c, src)
	if n == 0 {
		h.Control = nil
	} else {
		h.Control = &c.b[0]
	}
	h.SetControllen(n)
}

// putPktinfo writes into c the control message that sends a datagram
// from src, and returns its length: 0 where src is unknown or a multicast
// address, which no answer can leave from. Its ifindex is 0, leaving the
// interface to the route as without one, except from a link-local IPv6
// address, which the kernel sends from only on its own link. A mapped
// IPv4 address goes as in_pktinfo: the kernel sends to a mapped address
// as IPv4.
func putPktinfo(c *ctrlBuf, s source) int {
	src := s.addr
	if !src.IsValid() || src.IsMulticast() {
		return 0
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c.b))
	data := unsafe.Add(unsafe.Pointer(&c.b), unix.CmsgLen(0))
	if src.Is4() || src.Is4In6() {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		*(*unix.Inet4Pktinfo)(data) = unix.Inet4Pktinfo{Spec_dst: src.Unmap().As4()}
		return unix.CmsgSpace(unix.SizeofInet4Pktinfo)
	}
	h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
	p := unix.Inet6Pktinfo{Addr: src.As16()}
	if src.IsLinkLocalUnicast() {
		p.Ifindex = s.ifindex
	}
	*(*unix.Inet6Pktinfo)(data) = p
	return unix.CmsgSpace(unix.SizeofInet6Pktinfo)
}

// pktinfo is the control message that sends a datagram from src, nil
// where none is needed.
func pktinfo(src source) []byte {
	c := new(ctrlBuf)
	if n := putPktinfo(c, src); n > 0 {
		return c.b[:n]
	}
	return nil
}
