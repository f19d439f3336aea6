//go:build !linux

package server

import (
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

func (s *Server) serveUDP(pc *net.UDPConn, reads prometheus.Counter) error {
	return s.serveEach(pc, reads)
}
