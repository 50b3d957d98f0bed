package runtime

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// refusingSSH writes an ssh stand-in that refuses every login the way ssh does: a
// reason on stderr and exit status 255, at once, before any byte on stdout.
func refusingSSH(t *testing.T) string {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "ssh")
	script := "#!/bin/sh\necho 'ops@127.0.0.1: Permission denied (publickey).' >&2\nexit 255\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return fake
}

// A refused login reads as ssh's own reason, whether the connection is read at once
// or written to first (as an HTTP client does), and never as a closed file: the
// session's output is read to its end before the ssh process is waited for.
func TestSSHDialRefusedSaysWhy(t *testing.T) {
	fake := refusingSSH(t)
	u, _ := url.Parse("ssh://ops@127.0.0.1")
	dial, err := sshDialer(u, fake)
	if err != nil {
		t.Fatal(err)
	}
	const conns = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*conns)
	for i := range conns {
		wg.Go(func() {
			conn, err := dial(context.Background(), "tcp", "docker.ssh")
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			if i%2 == 1 {
				// A write may land in the pipe before ssh exits; the read then says why.
				conn.Write([]byte("GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n"))
			}
			_, err = io.ReadAll(conn)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil || !strings.Contains(err.Error(), "Permission denied (publickey)") {
			t.Errorf("a connection through a refusing ssh ended with %v, want ssh's own reason", err)
		}
		if errors.Is(err, os.ErrClosed) {
			t.Errorf("a read raced the wait for ssh: %v", err)
		}
	}
}

// A read that Close overtook (an HTTP client closes the connection when its request
// cannot be written, while its reader goes on reading) still says why ssh ended, not
// that the connection's own output was closed.
func TestSSHReadAfterCloseSaysWhy(t *testing.T) {
	u, _ := url.Parse("ssh://ops@127.0.0.1")
	dial, err := sshDialer(u, refusingSSH(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial(context.Background(), "tcp", "docker.ssh")
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	_, err = conn.Read(make([]byte, 64))
	if err == nil || !strings.Contains(err.Error(), "Permission denied (publickey)") || errors.Is(err, os.ErrClosed) {
		t.Fatalf("a read after Close = %v, want ssh's own reason", err)
	}
}

// Through the Docker runtime, a refused login is the error a user sees.
func TestDockerSSHRefusedSaysWhy(t *testing.T) {
	d := Docker{Host: "ssh://ops@127.0.0.1", SSHCommand: refusingSSH(t)}
	for range 10 {
		_, err := d.Start(context.Background(), Launch{Image: "x", LogPath: filepath.Join(t.TempDir(), "engine.log")})
		if err == nil || !strings.Contains(err.Error(), "Permission denied (publickey)") || strings.Contains(err.Error(), "file already closed") {
			t.Fatalf("Start through a refusing ssh = %v, want ssh's own reason", err)
		}
	}
}
