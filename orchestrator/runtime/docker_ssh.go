package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
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
//
// The pipes are arbiter's own (os.Pipe), not exec's StdinPipe and StdoutPipe: Wait
// closes those, and a Read still under way then fails with "file already closed" in
// place of what ssh said. Here the output ends with EOF once ssh has exited, and only
// Close closes it, after the session is over.
func dialSSH(ctx context.Context, command string, args []string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("docker runtime: ssh: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("docker runtime: ssh: %w", err)
	}
	stderr := &tailBuffer{max: 4096}
	cmd := exec.Command(command, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, stderr
	// A child of ssh that keeps stderr open must not hold Wait, and with it Close.
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Start()
	// The child has its own copies of these ends; holding ours would keep the output
	// from ever reaching EOF.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("docker runtime: ssh: %w", err)
	}
	c := &sshConn{cmd: cmd, stdin: inW, stdout: outR, stderr: stderr, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// sshConn is an ssh session seen as a connection to the remote daemon.
type sshConn struct {
	cmd     *exec.Cmd
	stdin   *os.File
	stdout  *os.File
	stderr  *tailBuffer
	exited  chan struct{}
	waitErr error // set before exited is closed

	closeOnce sync.Once
}

// Read reads what the remote daemon sent; at the session's end it says why ssh ended
// when ssh failed (a refused key, an unknown host, no docker there). That holds for a
// read that Close overtook, too: an HTTP client whose request could not be written
// closes the connection while its reader still reads, and that read is about the same
// refused session.
func (c *sshConn) Read(p []byte) (int, error) {
	n, err := c.stdout.Read(p)
	if n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed)) {
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

// sshEndWait bounds how long a read or write that saw the session end waits for ssh
// to exit and say why.
const sshEndWait = 10 * time.Second

// ended is the error of a session that ended under a read or write. A session that ssh
// ended cleanly keeps err (EOF at the end of a read); one that ssh ended with an error
// says what ssh said on its way out, or else how it exited.
func (c *sshConn) ended(err error) error {
	select {
	case <-c.exited:
	case <-time.After(sshEndWait):
		return err
	}
	if c.waitErr == nil {
		return err
	}
	if msg := strings.TrimSpace(c.stderr.String()); msg != "" {
		return fmt.Errorf("docker runtime: ssh session ended: %s", msg)
	}
	return fmt.Errorf("docker runtime: ssh session ended: %w", c.waitErr)
}

// Close ends the session: its input first, so that dial-stdio ends on its own, then,
// if it lingers, the ssh process; its output is closed only once ssh has been waited for.
func (c *sshConn) Close() error {
	c.closeOnce.Do(func() {
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(2 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		c.stdout.Close()
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
