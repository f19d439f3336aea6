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
	lc := net.ListenConfig{Control: udpControl}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// udpControl sets a UDP socket's options, before it binds so that no
// datagram comes without what they ask for. On a wildcard address the
// kernel is asked to say where each datagram was sent (pktinfo), for its
// answer to leave from there: left to the route, it leaves from whichever
// address the route to the client picks, and a client that asked another
// address of the host drops it. A dual-stack socket asks for both kinds:
// an IPv4 datagram's in_pktinfo names the interface's address where it
// was a broadcast.
func udpControl(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		if serr != nil || !wildcard(address) {
			return
		}
		// A kernel that refuses these sends no control data, and every
		// answer leaves as it would without them: no reason not to serve.
		if network == "udp6" {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		}
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// wildcard: address (host:port) binds every address of the host.
func wildcard(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}
