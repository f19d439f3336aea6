//go:build !linux

package server

import "net"

func (s *Server) serveUDP(pc *net.UDPConn) error { return s.serveEach(pc) }
