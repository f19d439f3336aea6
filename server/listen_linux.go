package server

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenUDP binds with SO_REUSEPORT so that several sockets share the
// port and the kernel spreads queries over them, one reader per CPU.
func listenUDP(addr string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}
