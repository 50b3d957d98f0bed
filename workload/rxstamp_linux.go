//go:build linux

package workload

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// stampedConn is a TCP connection that asks the kernel for the time each segment was
// received (SO_TIMESTAMPNS) and reads with recvmsg to get it: the time a token reached
// this host, not the time a goroutine of a busy driver got round to reading it. Under
// load (a thousand streams, or an engine on the same cores) the two differ by the
// driver's scheduling delay, which would otherwise be measured as the engine's latency.
type stampedConn struct {
	net.Conn
	raw syscall.RawConn

	// The current read's arguments and results, and the function that does it, made
	// once: a closure per read would allocate per read. Reads on a connection are
	// serial (net/http has one reader at a time).
	p       []byte
	n, oobn int
	err     error
	recv    func(fd uintptr) bool
	oob     [8]uint64 // control messages; 8-byte aligned for the headers

	last atomic.Int64 // kernel receive time (Unix ns) of the last segment read; 0: none
}

// rxStamped turns on receive timestamps for a TCP connection and returns it wrapped;
// any other connection, or one that refuses, is returned as it is.
func rxStamped(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return c
	}
	s := &stampedConn{Conn: c, raw: raw}
	s.recv = s.recvmsg
	return s
}

func (c *stampedConn) recvmsg(fd uintptr) bool {
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&c.oob[0])), len(c.oob)*8)
	for {
		c.n, c.oobn, _, _, c.err = syscall.Recvmsg(int(fd), c.p, oob, 0)
		if c.err != syscall.EINTR {
			break
		}
	}
	return c.err != syscall.EAGAIN // on EAGAIN, wait until the socket is readable
}

func (c *stampedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.p = p
	err := c.raw.Read(c.recv)
	c.p = nil
	if err != nil { // closed, or past a deadline
		return 0, err
	}
	if c.err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvmsg", c.err)}
	}
	if c.n == 0 {
		return 0, io.EOF
	}
	// A read without a stamp (the kernel turns stamping on a moment after the first
	// socket asks) leaves none: an older one would date these bytes too early.
	c.last.Store(c.stamp())
	return c.n, nil
}

// stamp is the receive time in the control messages of the last read; 0 if none.
func (c *stampedConn) stamp() int64 {
	const hdr = int(unsafe.Sizeof(syscall.Cmsghdr{}))
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&c.oob[0])), len(c.oob)*8)[:c.oobn]
	for len(oob) >= hdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if int(h.Len) < hdr || int(h.Len) > len(oob) {
			return 0
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SO_TIMESTAMPNS && int(h.Len) >= hdr+int(unsafe.Sizeof(syscall.Timespec{})) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&oob[hdr]))
			return ts.Nano()
		}
		oob = oob[min(len(oob), cmsgAlign(int(h.Len))):]
	}
	return 0
}

func cmsgAlign(n int) int {
	const a = int(unsafe.Sizeof(uintptr(0)))
	return (n + a - 1) &^ (a - 1)
}

// received is when the kernel received the last segment that a read of this connection
// took in; zero if it did not say.
func (c *stampedConn) received() time.Time {
	if ns := c.last.Load(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// SyscallConn gives alive its peek at the socket.
func (c *stampedConn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }
