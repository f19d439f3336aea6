//go:build !linux

package server

import (
	"bytes"
	"net/netip"
	"testing"
)

// udpPath is what a UDP socket reader runs per datagram where there is no
// batching (serveEach): a longer datagram is cut at udpBufSize, unflagged.
type udpPath struct{ w *worker }

func newUDPPath(srv *Server) *udpPath { return &udpPath{srv.newUDPWorker(nil)} }

func (p *udpPath) reply(t *testing.T, data []byte, from netip.AddrPort) []byte {
	p.w.from = from
	return bytes.Clone(p.w.handle(data[:min(len(data), udpBufSize)]))
}
