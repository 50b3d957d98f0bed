package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// sshDialer reaches the Docker daemon of an ssh://[user@]host[:port] address the way the
// Docker CLI does: every connection is an ssh session that runs `docker system
// dial-stdio` on the remote machine, which joins its standard input and output to the
// remote daemon's socket. ssh runs in batch mode: a key (or agent) must let it in
// without a prompt.
func sshDialer(u *url.URL, command string) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	if u.Hostname() == "" {
		return nil, fmt.Errorf("docker runtime: host %s: %w: no machine to ssh to", u.Redacted(), ErrBadHost)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("docker runtime: host %s: %w: an ssh:// address takes no path (the remote docker CLI finds its daemon)", u.Redacted(), ErrBadHost)
	}
	if _, set := u.User.Password(); set {
		return nil, fmt.Errorf("docker runtime: host %s: %w: no passwords in the address; let an ssh key or agent authenticate", u.Redacted(), ErrBadHost)
	}
	if command == "" {
		command = "ssh"
	}
	args := []string{"-o", "BatchMode=yes"}
	if p := u.Port(); p != "" {
		args = append(args, "-p", p)
	}
	if name := u.User.Username(); name != "" {
		args = append(args, "-l", name)
	}
	// "--" ends ssh's options: a host name cannot smuggle one in.
	args = append(args, "--", u.Hostname(), "docker", "system", "dial-stdio")
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialSSH(ctx, command, args)
	}, nil
}

// dialSSH starts one ssh session and returns its standard input and output as a
// connection. Cancelling ctx after the dial does not end the connection; Close does.
func dialSSH(ctx context.Context, command string, args []string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := exec.Command(command, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("docker runtime: ssh: %w", err)
	}
	c := &sshConn{cmd: cmd, stdin: stdin, stdout: stdout, stderr: stderr, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// sshConn is an ssh session seen as a connection to the remote daemon.
type sshConn struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  io.ReadCloser
	stderr  *tailBuffer
	exited  chan struct{}
	waitErr error

	closeOnce sync.Once
}

// Read reads what the remote daemon sent; at the session's end it says why ssh ended
// when ssh said so (a refused key, an unknown host, no docker there).
func (c *sshConn) Read(p []byte) (int, error) {
	n, err := c.stdout.Read(p)
	if errors.Is(err, io.EOF) && n == 0 {
		return 0, c.ended(err)
	}
	return n, err
}

// Write sends to the remote daemon; a session that ssh already ended (a refused login)
// fails the write with a broken pipe, which ssh's own words explain better.
func (c *sshConn) Write(p []byte) (int, error) {
	n, err := c.stdin.Write(p)
	if err != nil {
		err = c.ended(err)
	}
	return n, err
}

// ended is the error of a session that ended under a read or write: what ssh said on
// its way out when it said something (waiting a moment for it to finish), else err.
func (c *sshConn) ended(err error) error {
	select {
	case <-c.exited:
	case <-time.After(time.Second):
	}
	if msg := strings.TrimSpace(c.stderr.String()); msg != "" {
		return fmt.Errorf("docker runtime: ssh session ended: %s", msg)
	}
	return err
}

// Close ends the session: its input first, so that dial-stdio ends on its own, then,
// if it lingers, the ssh process.
func (c *sshConn) Close() error {
	c.closeOnce.Do(func() {
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(2 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	})
	return nil
}

// CloseWrite half-closes the connection, as the client's hijacked streams expect.
func (c *sshConn) CloseWrite() error { return c.stdin.Close() }

func (c *sshConn) LocalAddr() net.Addr              { return sshAddr{} }
func (c *sshConn) RemoteAddr() net.Addr             { return sshAddr{} }
func (c *sshConn) SetDeadline(time.Time) error      { return nil }
func (c *sshConn) SetReadDeadline(time.Time) error  { return nil }
func (c *sshConn) SetWriteDeadline(time.Time) error { return nil }

type sshAddr struct{}

func (sshAddr) Network() string { return "ssh" }
func (sshAddr) String() string  { return "ssh" }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
