//go:build unix

package workload

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether a connection opened earlier is still open, by peeking at it
// without blocking: a server closes a connection left idle too long (uvicorn after 5 s),
// and a request sent on it would fail as a broken stream that no engine caused.
func alive(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	open := true
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK):
		case rerr != nil || n == 0:
			open = false // reset, or closed by the peer
		default:
			open = false // bytes nobody asked for: not a connection to send on
		}
		return true
	})
	return open && err == nil
}
