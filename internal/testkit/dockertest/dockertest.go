//go:build linux

// Package dockertest starts Docker daemons of their own for tests: each with its own
// socket, data root, exec root, pidfile and containerd namespace, beside the system's
// daemon, so that a test can run arms on several Docker nodes of one machine and stop
// one of them under a running experiment. The daemons keep off the host's networking:
// each has a bridge of its own (never docker0: a daemon started with --bridge=none
// deletes docker0, the system daemon's bridge) and no iptables rules or masquerading;
// tests run their containers on the host's network (a node's network: host), on ports
// arbiter picks.
//
// Starting a daemon needs root and dockerd. Without them a test skips, unless
// ARBITER_REQUIRE_DOCKER=1 (CI), which makes it a failure.
package dockertest

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// Dockerd is where the daemon binary is looked for first; PATH is searched after.
const Dockerd = "/usr/sbin/dockerd"

// Daemon is one extra Docker daemon.
type Daemon struct {
	// Name is the node's name (node-0, node-1, ...).
	Name string
	// Host is the daemon's address: unix:// and its socket.
	Host string
	// Dir holds everything of the daemon: socket, data root, exec root, pidfile, log.
	Dir string
	// Driver is the storage driver it runs with (overlay2, else vfs).
	Driver string
	// Bridge is the network bridge made for it, deleted with it.
	Bridge string
	// TLSHost is the daemon's tcp:// address, and CA, Cert and Key the files a client
	// needs there (StartTLS only).
	TLSHost, CA, Cert, Key string

	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Require skips t, or fails it where ARBITER_REQUIRE_DOCKER=1, when extra daemons
// cannot be started here.
func Require(t testing.TB) string {
	t.Helper()
	why := ""
	bin, err := dockerdPath()
	switch {
	case err != nil:
		why = err.Error()
	case os.Geteuid() != 0:
		why = "starting Docker daemons needs root"
	default:
		if _, err := exec.LookPath("ip"); err != nil {
			why = "no ip command (iproute2) to make the daemons' bridges"
		}
	}
	if why == "" {
		return bin
	}
	if os.Getenv("ARBITER_REQUIRE_DOCKER") == "1" {
		t.Fatalf("ARBITER_REQUIRE_DOCKER=1 but no Docker daemons can be started: %s", why)
	}
	t.Skipf("%s (set ARBITER_REQUIRE_DOCKER=1 to make this a failure)", why)
	return ""
}

func dockerdPath() (string, error) {
	if _, err := os.Stat(Dockerd); err == nil {
		return Dockerd, nil
	}
	p, err := exec.LookPath("dockerd")
	if err != nil {
		return "", errors.New("no dockerd (neither " + Dockerd + " nor on PATH)")
	}
	return p, nil
}

// Start starts n daemons, waits until each answers, and stops and removes them (and
// their containers) when t ends.
func Start(t testing.TB, n int) []*Daemon {
	t.Helper()
	return startN(t, n, false)
}

// StartTLS starts one daemon that also listens on tcp://127.0.0.1 with --tlsverify:
// TLSHost is that address, and CA, Cert and Key the client's files (a CA, a server
// certificate for 127.0.0.1 and a client certificate are made for it).
func StartTLS(t testing.TB) *Daemon {
	t.Helper()
	return startN(t, 1, true)[0]
}

func startN(t testing.TB, n int, tls bool) []*Daemon {
	t.Helper()
	bin := Require(t)
	var out []*Daemon
	for i := range n {
		d, err := start(bin, fmt.Sprintf("node-%d", i), tls)
		if d != nil {
			t.Cleanup(func() {
				if err := d.Remove(); err != nil {
					t.Errorf("dockertest: %s: %v", d.Name, err)
				}
			})
		}
		if err != nil {
			t.Fatalf("dockertest: %v", err)
		}
		out = append(out, d)
	}
	return out
}

func start(bin, name string, tls bool) (*Daemon, error) {
	// A short path: socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", bridgePrefix)
	if err != nil {
		return nil, err
	}
	// An empty configuration file: the system's /etc/docker/daemon.json (its data
	// root, its storage driver) is the system daemon's alone.
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), []byte("{}\n"), 0o644); err != nil {
		return nil, err
	}
	ns := filepath.Base(dir)
	d := &Daemon{Name: name, Host: "unix://" + filepath.Join(dir, "d.sock"), Dir: dir}
	if err := d.makeBridge(); err != nil {
		return d, err
	}
	base := []string{bin, "--config-file", filepath.Join(dir, "daemon.json"),
		"--host", d.Host, "--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "x"),
		"--pidfile", filepath.Join(dir, "d.pid"),
		"--bridge", d.Bridge, "--iptables=false", "--ip-masq=false", "--ip-forward=false",
		// The system's containerd may be shared: a namespace of its own keeps this
		// daemon's containers apart from every other daemon's.
		"--containerd-namespace", ns, "--containerd-plugins-namespace", ns + "-plugins"}
	if tls {
		args, err := d.makeTLS()
		if err != nil {
			return d, err
		}
		base = append(base, args...)
	}
	var errs []error
	for _, driver := range []string{"overlay2", "vfs"} {
		d.args, d.Driver = append(base[:len(base):len(base)], "--storage-driver", driver), driver
		err := d.launch()
		if err == nil {
			return d, nil
		}
		errs = append(errs, fmt.Errorf("%s with %s: %w", name, driver, err))
		d.kill()
		d.unmount()
		os.RemoveAll(filepath.Join(dir, "data"))
	}
	return d, errors.Join(errs...)
}

// bridgePrefix begins the name of every daemon's bridge (and of its folder).
const bridgePrefix = "adt"

// makeBridge makes the daemon's own bridge, named after its folder (at most 15 bytes),
// on a private /24.
func (d *Daemon) makeBridge() error {
	suffix := strings.TrimPrefix(filepath.Base(d.Dir), bridgePrefix)
	if len(suffix) > 10 {
		suffix = suffix[len(suffix)-10:]
	}
	name := bridgePrefix + suffix
	var b [2]byte
	_, _ = rand.Read(b[:])
	addr := fmt.Sprintf("10.%d.%d.1/24", 200+int(b[0])%50, b[1])
	for i, args := range [][]string{{"link", "add", "name", name, "type", "bridge"}, {"addr", "add", addr, "dev", name}, {"link", "set", name, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if i == 0 {
			d.Bridge = name // made: Remove deletes it
		}
	}
	return nil
}

// deleteBridge deletes the daemon's bridge.
func (d *Daemon) deleteBridge() error {
	if d.Bridge == "" {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", d.Bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link delete %s: %v: %s", d.Bridge, err, out)
	}
	d.Bridge = ""
	return nil
}

// launch starts the daemon and waits until it answers.
func (d *Daemon) launch() error {
	logf, err := os.OpenFile(filepath.Join(d.Dir, "dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(d.args[0], d.args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, and gone with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := client.New(client.WithHost(d.Host))
	if err != nil {
		return err
	}
	defer cli.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("dockerd exited: %s", d.logTail())
		case <-ctx.Done():
			return fmt.Errorf("dockerd did not answer within 60s: %s", d.logTail())
		case <-tick.C:
		}
	}
}

func (d *Daemon) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "dockerd.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// Kill ends the daemon with SIGKILL, as a machine that goes away would: it answers
// nothing more, and its containers are left to containerd. Restart brings it back.
func (d *Daemon) Kill() { d.kill() }

func (d *Daemon) kill() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	// dockerd and the containerd it supervises, which runs in a group of its own: a
	// containerd left running would keep a restarted daemon from starting its own.
	_ = cmd.Process.Kill()
	<-done
	if b, err := os.ReadFile(filepath.Join(d.Dir, "x", "containerd", "containerd.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && isContainerd(pid, d.Dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid)
		}
	}
}

// waitGone waits (at most 10s) until pid is no longer a live process: gone, or a
// zombie that its new parent has yet to reap.
func waitGone(pid int) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the command name in parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return
		}
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

// isContainerd reports whether pid is the containerd of the daemon in dir (a pid file
// may outlive its process, and the number be taken by another).
func isContainerd(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "containerd") && strings.Contains(string(b), dir)
}

// Stop ends the daemon with SIGTERM, as `systemctl stop docker` would: it stops its
// containers first.
func (d *Daemon) Stop() error {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(45 * time.Second):
		d.kill()
		return errors.New("dockerd did not stop within 45s of SIGTERM; killed")
	}
}

// Freeze stops the daemon's process (SIGSTOP) without ending it: it holds every
// connection open and answers nothing, as a daemon cut off by the network would.
// Thaw (or Remove) lets it go on.
func (d *Daemon) Freeze() { d.signal(syscall.SIGSTOP) }

// Thaw lets a frozen daemon go on (SIGCONT).
func (d *Daemon) Thaw() { d.signal(syscall.SIGCONT) }

func (d *Daemon) signal(sig syscall.Signal) {
	d.mu.Lock()
	cmd := d.cmd
	d.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Running reports whether the daemon's process still runs.
func (d *Daemon) Running() bool {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Restart starts a stopped or killed daemon again on the same data; a daemon started
// after a kill stops the containers its predecessor left running.
func (d *Daemon) Restart() error {
	if d.Running() {
		return errors.New("dockerd still runs")
	}
	if d.args == nil {
		return errors.New("dockerd was never started")
	}
	// The pid files of a killed daemon and its containerd would make the new ones
	// wait for processes that are gone.
	os.Remove(filepath.Join(d.Dir, "d.pid"))
	os.Remove(filepath.Join(d.Dir, "x", "containerd", "containerd.pid"))
	return d.launch()
}

// Remove removes every container of the daemon, stops it and deletes its folder.
func (d *Daemon) Remove() error {
	var errs []error
	d.Thaw()
	if !d.Running() && d.args != nil {
		// A killed daemon left its containers to containerd: a new one ends them.
		if err := d.Restart(); err != nil {
			errs = append(errs, fmt.Errorf("restart to clean up: %w", err))
		}
	}
	if d.Running() {
		if err := d.removeContainers(); err != nil {
			errs = append(errs, err)
		}
		if err := d.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	d.unmount()
	if err := os.RemoveAll(d.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := d.deleteBridge(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (d *Daemon) removeContainers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := client.New(client.WithHost(d.Host))
	if err != nil {
		return err
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, c := range list.Items {
		// A removal already under way (asked before a freeze) is left to finish.
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmount detaches whatever the daemon left mounted under its folder (its network
// namespace file, overlay layers of a killed daemon), deepest first.
func (d *Daemon) unmount() {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], d.Dir+"/") {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// RefserveImage builds refserve static, builds an image FROM scratch holding it on
// every daemon given (no registry: the binary travels in each build context), and
// returns the image's tag. The engine lies at /usr/local/bin/refserve, so the refserve
// preset's command finds it.
func RefserveImage(t testing.TB, daemons ...*Daemon) string {
	t.Helper()
	refserveBin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve", testbin.Static...)
	files, err := runtime.ExecutableFiles(refserveBin, "/usr/local/bin/refserve")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("refserve built with arbiter_static is not static: it needs %v", files[1:])
	}
	const tag = "arbiter-test/refserve:latest"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, d := range daemons {
		if err := (runtime.Docker{Host: d.Host}).BuildImage(ctx, tag, files, "/usr/local/bin/refserve"); err != nil {
			t.Fatalf("dockertest: %s: %v", d.Name, err)
		}
	}
	return tag
}

// WaitHealthy polls an engine's /health until it answers 200, for at most 30 s; the test
// fails, with the end of the engine's log, if the engine ends first or never answers.
func WaitHealthy(t testing.TB, inst runtime.Instance) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if ep := inst.Endpoint(); ep != "" {
			if resp, err := client.Get(ep + "/health"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		select {
		case <-inst.Done():
			t.Fatalf("engine ended before it was healthy: %s\n%s", inst.Exit(), inst.Exit().LogTail)
		case <-deadline:
			t.Fatalf("engine at %s not healthy within 30s", inst.Endpoint())
		case <-tick.C:
		}
	}
}
