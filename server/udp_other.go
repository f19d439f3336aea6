//go:build !linux

package server

import (
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// kernelWaitCores: off Linux every reader waits in Go's poller.
const kernelWaitCores = 0

func (s *Server) serveUDP(pc *net.UDPConn, reads prometheus.Counter, _ *udpStop) error {
	return s.serveEach(pc, reads)
}

type udpStop struct{}

func (s *Server) newUDPStop() *udpStop { return nil }
func (u *udpStop) signal()             {}
func (u *udpStop) close()              {}

// pktinfo: off Linux no socket learns where a datagram was sent.
func pktinfo(source) []byte { return nil }

func sourceRefused(error) bool { return false }
