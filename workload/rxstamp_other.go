//go:build !linux

package workload

import "net"

// rxStamped returns c: receive timestamps are read on Linux only, and elsewhere a
// stream's times are read from the clock as each read returns.
func rxStamped(c net.Conn) net.Conn { return c }
