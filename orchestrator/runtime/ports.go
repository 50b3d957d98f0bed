package runtime

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/arbiterlab/arbiter/internal/machinelock"
)

// A port arbiter picks for an engine is free when it is picked, and stays unbound until
// the engine binds it, a moment or seconds later (a container starting). In that moment
// nothing else may take it, or the engine fails to bind while its health checks reach
// whatever did (seen as an arm reporting another arm's pins):
//
//   - The kernel hands a port just closed to the next bind of port 0: another engine's
//     helper (ollama picks its runner's port that way) or an outgoing connection. Engine
//     ports are therefore taken from below the kernel's ephemeral range
//     (net.ipv4.ip_local_port_range), which a bind of port 0 never returns.
//   - Launches of this arbiter that start at once: a port handed out is claimed in this
//     process until its engine has ended.
//   - Other arbiters on the machine: the same claim is an flock on a file named after the
//     port under PortLockDir, held as long.

// PortLockDir is where the arbiters of a machine claim the ports they hand to engines;
// $ARBITER_PORT_LOCK_DIR names another.
const PortLockDir = "/tmp/arbiter-ports"

// portSpan is how many ports below the ephemeral range engines are given from.
const portSpan = 12000

var portClaims = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// enginePorts is the range [lo, hi) engine ports are drawn from: the portSpan ports below
// the kernel's ephemeral range.
func enginePorts() (lo, hi int) {
	hi = 32768 // Linux's default start of the ephemeral range; BSDs and macOS start higher
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 1024+1000 {
				hi = n
			}
		}
	}
	return max(1024, hi-portSpan), hi
}

// freePort returns a loopback port free now, below the ephemeral range, and claimed by
// no other launch of this arbiter or of another on this machine; release gives the claim
// back once the engine that took it has ended.
func freePort() (port int, release func(), err error) {
	lo, hi := enginePorts()
	dir := os.Getenv("ARBITER_PORT_LOCK_DIR")
	if dir == "" {
		dir = PortLockDir
	}
	// A folder of the user's own: a file, a link or another user's folder there must
	// neither stop the launch nor receive its lock files (machinelock.PrivateDir).
	dir, derr := machinelock.PrivateDir(dir)
	shared := derr == nil
	for range 512 {
		port := lo + rand.IntN(hi-lo)
		portClaims.Lock()
		if portClaims.ports[port] {
			portClaims.Unlock()
			continue
		}
		portClaims.ports[port] = true
		portClaims.Unlock()
		unclaim := func() {
			portClaims.Lock()
			delete(portClaims.ports, port)
			portClaims.Unlock()
		}
		var lock *os.File
		if shared {
			if lock, err = lockPort(filepath.Join(dir, strconv.Itoa(port))); err != nil || lock == nil {
				unclaim()
				continue
			}
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			// Bound by something else: a server of the machine's, an engine not ours.
			if lock != nil {
				lock.Close()
			}
			unclaim()
			continue
		}
		ln.Close()
		var once sync.Once
		return port, func() {
			once.Do(func() {
				if lock != nil {
					lock.Close() // closing the only descriptor drops the flock
				}
				unclaim()
			})
		}, nil
	}
	return 0, nil, fmt.Errorf("find a free port: none of 512 tried between %d and %d was free and unclaimed", lo, hi-1)
}

// lockPort takes the machine-wide claim on one port: its lock file, flocked. It returns
// nil without an error when another arbiter holds it.
func lockPort(path string) (*os.File, error) {
	f, err := machinelock.Open(path)
	if err != nil {
		return nil, err
	}
	ok, err := machinelock.TryLock(f)
	if err != nil || !ok {
		f.Close()
		return nil, err
	}
	return f, nil
}
