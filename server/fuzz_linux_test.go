//go:build linux

package server

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpPath is a UDP socket reader's batch without the socket: a datagram
// goes in as recvmmsg hands it over, the response comes out as sendmmsg
// would take it.
type udpPath struct{ b *udpBatch }

func newUDPPath(srv *Server) *udpPath { return &udpPath{newUDPBatch(srv.newUDPWorker(nil), false)} }

// reply answers data from client: cut at udpBufSize and flagged
// MSG_TRUNC when longer, as the kernel does. It returns the response, nil
// if none.
func (p *udpPath) reply(t *testing.T, data []byte, from netip.AddrPort) []byte {
	t.Helper()
	b := p.b
	b.in[0].n = uint32(copy(b.bufs[0], data))
	b.in[0].hdr.Flags = 0
	if len(data) > len(b.bufs[0]) {
		b.in[0].hdr.Flags = unix.MSG_TRUNC
	}
	sa := &b.names[0]
	*sa = unix.RawSockaddrInet6{}
	if from.Addr().Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family, sa4.Addr = unix.AF_INET, from.Addr().As4()
	} else {
		sa.Family, sa.Addr = unix.AF_INET6, from.Addr().As16()
	}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], from.Port())
	b.got = 1
	b.answer()
	if b.pending == 0 {
		return nil
	}
	if b.out[0].hdr.Name != b.in[0].hdr.Name || b.out[0].hdr.Namelen != b.in[0].hdr.Namelen {
		t.Fatal("the response is not addressed to the query's sender")
	}
	return bytes.Clone(b.resps[0][:b.outIo[0].Len])
}
