package runtime

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
)

func shLaunch(t *testing.T, script string, env ...string) Launch {
	t.Helper()
	return Launch{Name: "t", Command: []string{"sh", "-c", script, "sh"}, Env: env,
		LogPath: filepath.Join(t.TempDir(), "logs", "engine.log")}
}

func TestProcessReportsCrashWithExitCodeAndLogTail(t *testing.T) {
	l := shLaunch(t, `echo "starting on $2"; echo "fatal: index pool exhausted" >&2; exit 3`)
	inst, err := Process{}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	<-inst.Done()
	e := inst.Exit()
	if e.Code != 3 || !e.Crashed() {
		t.Fatalf("exit = %+v, want code 3, crashed", e)
	}
	if !strings.Contains(e.LogTail, "fatal: index pool exhausted") {
		t.Errorf("log tail %q lacks the engine's last words", e.LogTail)
	}
	port := strings.TrimPrefix(inst.Endpoint(), "http://127.0.0.1:")
	if !strings.Contains(e.LogTail, "starting on "+port) {
		t.Errorf("engine was not given the endpoint's port %s: %q", port, e.LogTail)
	}
	b, _ := os.ReadFile(l.LogPath)
	if !strings.Contains(string(b), "fatal: index pool exhausted") {
		t.Errorf("log file lacks stderr: %q", b)
	}
}

func TestProcessStopEscalatesToSIGKILL(t *testing.T) {
	// The engine ignores SIGTERM, as a wedged engine may; it says so once the trap is set
	// so that the test does not race the shell's start-up.
	l := shLaunch(t, `trap '' TERM; echo armed; while :; do sleep 1; done`)
	inst, err := Process{Grace: 200 * time.Millisecond}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, l.LogPath, "armed", inst)
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := inst.Exit()
	if e.Signal != "SIGKILL" || e.Crashed() || e.String() != "killed by SIGKILL" {
		t.Fatalf("exit = %+v (%s), want killed by SIGKILL and stopped", e, e)
	}
}

func TestProcessStopIsGracefulFirst(t *testing.T) {
	l := shLaunch(t, `trap 'echo bye; exit 0' TERM; echo armed; while :; do sleep 0.05; done`)
	inst, err := Process{Grace: time.Minute}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, l.LogPath, "armed", inst)
	inst.Stop(context.Background())
	if e := inst.Exit(); e.Code != 0 || e.Signal != "" || !strings.Contains(e.LogTail, "bye") {
		t.Fatalf("exit = %+v, want a clean exit after SIGTERM", e)
	}
}

func TestProcessRedactsLogsAndPassesOnlyGivenEnv(t *testing.T) {
	t.Setenv("ARBITER_TEST_LEAK", "should-not-pass")
	const secret = "hf_topsecretvalue42"
	l := shLaunch(t, `echo "token=$HF_TOKEN leak=$ARBITER_TEST_LEAK pin=$BF16_INDEX_K"`, "HF_TOKEN="+secret, "BF16_INDEX_K=1")
	l.Redact = func(s string) string { return strings.ReplaceAll(s, secret, "[redacted]") }
	inst, err := Process{}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	<-inst.Done()
	b, _ := os.ReadFile(l.LogPath)
	got := string(b)
	if strings.Contains(got, secret) || strings.Contains(inst.Exit().LogTail, secret) {
		t.Errorf("secret reached the log: %q", got)
	}
	if !strings.Contains(got, "token=[redacted] leak= pin=1") {
		t.Errorf("log = %q, want redacted token, no leaked variable, the pin", got)
	}
}

func TestProcessStartErrors(t *testing.T) {
	if _, err := (Process{}).Start(context.Background(), Launch{LogPath: "x"}); err == nil {
		t.Error("empty command started")
	}
	l := Launch{Command: []string{"/nonexistent/engine"}, LogPath: filepath.Join(t.TempDir(), "l")}
	if _, err := (Process{}).Start(context.Background(), l); err == nil || !strings.Contains(err.Error(), "/nonexistent/engine") {
		t.Errorf("missing binary: err = %v", err)
	}
}

// waitForLog waits until the engine's log holds marker, following the file as it grows;
// it fails the test if the engine exits first.
func waitForLog(t *testing.T, path, marker string, inst Instance) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), marker) {
			return
		}
		select {
		case <-inst.Done():
			t.Fatalf("engine exited before logging %q: %+v", marker, inst.Exit())
		case <-deadline:
			t.Fatalf("engine never logged %q", marker)
		case <-tick.C:
		}
	}
}

// TestProcessEngineDiesWithArbiter kills a process that started an engine, as SIGKILL
// would kill arbiter, and checks that the engine does not live on as an orphan.
func TestProcessEngineDiesWithArbiter(t *testing.T) {
	if os.Getenv("ARBITER_TEST_ENGINE_PARENT") != "" {
		return // this is the parent run by the test below, see engineParent
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "engine.pid")
	parent := exec.Command(os.Args[0], "-test.run=^TestProcessEngineParent$")
	parent.Env = append(os.Environ(), "ARBITER_TEST_ENGINE_PARENT="+pidFile)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var enginePid int
	deadline := time.Now().Add(20 * time.Second)
	for enginePid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			enginePid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			parent.Process.Kill()
			t.Fatal("the engine never started")
		}
		time.Sleep(10 * time.Millisecond) // polling a file another process writes
	}
	parent.Process.Kill()
	parent.Wait()
	for syscall.Kill(enginePid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(enginePid, syscall.SIGKILL)
			t.Fatalf("engine %d outlived the process that started it", enginePid)
		}
		time.Sleep(10 * time.Millisecond) // polling for another process's exit
	}
}

// TestProcessEngineParent is the parent of TestProcessEngineDiesWithArbiter: it starts an
// engine that writes its pid, then waits to be killed.
func TestProcessEngineParent(t *testing.T) {
	pidFile := os.Getenv("ARBITER_TEST_ENGINE_PARENT")
	if pidFile == "" {
		t.Skip("run by TestProcessEngineDiesWithArbiter")
	}
	l := Launch{Name: "orphan", Command: []string{"sh", "-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec sleep 600`, pidFile},
		LogPath: filepath.Join(filepath.Dir(pidFile), "engine.log")}
	// The rename makes the pid file appear whole, newline included.
	if _, err := (Process{}).Start(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	select {} // killed by the test above
}

// An engine learns its address the way its spec says: a flag and the port after its
// command, a variable, or {host} and {port} filled in where its command writes them.
func TestProcessTellsTheEngineItsAddress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen arms.Listen
		extra  []string
		want   string
	}{
		{"flag", arms.Listen{}, nil, "args=[--port PORT] addr="},
		{"another flag", arms.Listen{Flag: "--listen-port"}, nil, "args=[--listen-port PORT] addr="},
		{"variable", arms.Listen{Env: "ADDR", EnvValue: "http://{host}:{port}/"}, nil, "args=[] addr=http://127.0.0.1:PORT/"},
		{"placeholders", arms.Listen{Placeholder: true}, []string{"--bind={host}", "{port}"}, "args=[--bind=127.0.0.1 PORT] addr="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := shLaunch(t, `echo "args=[$*] addr=$ADDR"`)
			l.Command = append(l.Command, tc.extra...)
			l.Listen = tc.listen
			inst, err := Process{}.Start(context.Background(), l)
			if err != nil {
				t.Fatal(err)
			}
			<-inst.Done()
			port := inst.Endpoint()[strings.LastIndex(inst.Endpoint(), ":")+1:]
			b, _ := os.ReadFile(l.LogPath)
			if want := strings.ReplaceAll(tc.want, "PORT", port); strings.TrimSpace(string(b)) != want {
				t.Errorf("the engine saw %q, want %q", strings.TrimSpace(string(b)), want)
			}
		})
	}
}

// Launches that start at once are never handed the same port while an engine may still
// be about to bind it; a port comes back once the claim is released.
func TestFreePortsAreClaimedUntilReleased(t *testing.T) {
	const n = 200
	ports := make([]int, n)
	releases := make([]func(), n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, release, err := freePort()
			if err != nil {
				t.Error(err)
				return
			}
			ports[i], releases[i] = p, release
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	lo, hi := enginePorts()
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed to two launches at once", p)
		}
		seen[p] = true
		if p < lo || p >= hi {
			t.Errorf("port %d is outside [%d, %d), below the kernel's ephemeral range", p, lo, hi)
		}
	}
	for _, release := range releases {
		release()
		release() // a second release is harmless
	}
	portClaims.Lock()
	left := len(portClaims.ports)
	portClaims.Unlock()
	if left != 0 {
		t.Errorf("%d claims left after every release", left)
	}
}

// A port another arbiter of the machine has claimed (its lock file flocked) is not
// claimed again until that arbiter lets go; a bind of port 0 never returns an engine port.
func TestPortClaimsAreMachineWide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "31000")
	other, err := lockPort(path)
	if err != nil || other == nil {
		t.Fatalf("first claim: %v", err)
	}
	if f, err := lockPort(path); err != nil || f != nil {
		t.Fatalf("a claimed port was claimed again (%v)", err)
	}
	other.Close()
	f, err := lockPort(path)
	if err != nil || f == nil {
		t.Fatalf("a port let go of could not be claimed: %v", err)
	}
	f.Close()

	lo, hi := enginePorts()
	for range 200 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p >= lo && p < hi {
			t.Fatalf("the kernel gave port %d to a bind of port 0, inside the engine ports [%d, %d)", p, lo, hi)
		}
	}
}

// A file, or a link, where the port lock folder should be neither stops a launch from
// finding a port nor receives its lock files: the user's own folder beside it is used.
func TestPortLockFolderInTheWay(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "ports-file")
	os.WriteFile(file, nil, 0o644)
	target := filepath.Join(base, "target")
	os.Mkdir(target, 0o755)
	link := filepath.Join(base, "ports-link")
	os.Symlink(target, link)
	for _, dir := range []string{file, link} {
		t.Setenv("ARBITER_PORT_LOCK_DIR", dir)
		port, release, err := freePort()
		if err != nil {
			t.Fatalf("%s in the way: %v", filepath.Base(dir), err)
		}
		if _, err := os.Stat(filepath.Join(fmt.Sprintf("%s-%d", dir, os.Getuid()), strconv.Itoa(port))); err != nil {
			t.Errorf("%s in the way: the claim is not in the user's own folder: %v", filepath.Base(dir), err)
		}
		release()
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("the link's target received %d lock files", len(entries))
	}
}
