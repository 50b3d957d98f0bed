package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

// alive reports whether pid runs and is no zombie.
func alive(pid int) bool {
	p, err := readProc(pid)
	return err == nil && p.state != 'Z'
}

// waitGone waits until none of pids runs, failing the test after limit.
func waitGone(t *testing.T, limit time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var left []int
		for _, p := range pids {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v still run after %v", left, limit)
		}
		time.Sleep(20 * time.Millisecond) // polling other processes' exit
	}
}

// readPid waits for path to hold "KEY=PID" lines and returns the one of key.
func readPid(t *testing.T, path, key string, limit time.Duration) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `=(\d+)$`)
	deadline := time.Now().Add(limit)
	for {
		if b, err := os.ReadFile(path); err == nil {
			if m := re.FindSubmatch(b); m != nil {
				n, _ := strconv.Atoi(string(m[1]))
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %s=PID", path, key)
		}
		time.Sleep(10 * time.Millisecond) // polling a file another process writes
	}
}

func TestProcessStopKillsWorkersTheEngineLeftBehind(t *testing.T) {
	// The engine exits on SIGTERM at once, but its worker ignores SIGTERM: Stop must not
	// take the engine's exit for the end of the group.
	l := shLaunch(t, `(trap '' TERM; echo "worker=$(exec sh -c 'echo $PPID')"; while :; do sleep 0.05; done) &
trap 'exit 0' TERM; echo armed; while :; do sleep 0.05; done`)
	inst, err := Process{Grace: 300 * time.Millisecond}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	waitForLog(t, l.LogPath, "armed", inst)
	worker := readPid(t, l.LogPath, "worker", 10*time.Second)
	if !alive(worker) {
		t.Fatalf("worker %d is not running before Stop", worker)
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := inst.Exit(); e.Code != 0 || e.Crashed() {
		t.Errorf("exit = %+v, want the engine's own clean exit on SIGTERM", e)
	}
	waitGone(t, 2*time.Second, worker)
}

func TestProcessStopEndsTheGroupOfAnEngineThatCrashed(t *testing.T) {
	l := shLaunch(t, `(trap '' TERM; echo "worker=$(exec sh -c 'echo $PPID')"; while :; do sleep 0.05; done) &
sleep 0.2; echo "fatal: CUDA error"; exit 1`)
	inst, err := Process{Grace: 200 * time.Millisecond}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	<-inst.Done()
	worker := readPid(t, l.LogPath, "worker", 10*time.Second)
	if e := inst.Exit(); e.Code != 1 || !e.Crashed() {
		t.Fatalf("exit = %+v, want code 1, crashed", e)
	}
	inst.Stop(context.Background())
	waitGone(t, 2*time.Second, worker)
}

func TestProcessInstanceNamesItsGroup(t *testing.T) {
	l := shLaunch(t, `echo armed; while :; do sleep 0.05; done`)
	inst, err := Process{Grace: 200 * time.Millisecond}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(context.Background())
	waitForLog(t, l.LogPath, "armed", inst)
	leader, ok := inst.(Grouped).Group()
	if !ok || !leader.Alive() {
		t.Fatalf("group leader %+v (ok %v) is not a live process", leader, ok)
	}
	members, err := GroupMembers(leader)
	if err != nil {
		t.Fatal(err)
	}
	engine := inst.(*processInstance).cmd.Process.Pid
	if !slices.Contains(members, leader.Pid) || !slices.Contains(members, engine) {
		t.Errorf("group members %v lack the supervisor %d or the engine %d", members, leader.Pid, engine)
	}
	self, err := Self()
	if err != nil || !self.Alive() || self.Pid != os.Getpid() {
		t.Errorf("Self() = %+v, %v", self, err)
	}
	if (ProcessID{Pid: self.Pid, Start: self.Start + 1, BootID: self.BootID}).Alive() {
		t.Error("a process with another start time was taken for this one")
	}
	if (ProcessID{Pid: self.Pid, Start: self.Start, BootID: "another-boot"}).Alive() {
		t.Error("a process of another boot was taken for this one")
	}
}

// startGroup starts a process group whose leader and its child both ignore SIGTERM, as
// an orphaned engine might, and returns the leader and the child's pid.
func startGroup(t *testing.T) (ProcessID, int) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "pids")
	cmd := exec.Command("sh", "-c", `trap '' TERM; (trap '' TERM; echo "child=$(exec sh -c 'echo $PPID')" >> "$0"; while :; do sleep 0.05; done) &
while :; do sleep 0.05; done`, out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	leader, err := identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return leader, readPid(t, out, "child", 10*time.Second)
}

func TestReapGroupEndsAGroupThatIgnoresSIGTERM(t *testing.T) {
	leader, child := startGroup(t)
	n, err := ReapGroup(context.Background(), leader, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("reaped %d processes, want the leader and its child at least", n)
	}
	waitGone(t, 2*time.Second, leader.Pid, child)
	// Once gone, a second reap finds nothing and is no error.
	if n, err := ReapGroup(context.Background(), leader, 200*time.Millisecond); n != 0 || err != nil {
		t.Errorf("second reap: %d, %v", n, err)
	}
}

func TestReapGroupLeavesAReusedGroupIdAlone(t *testing.T) {
	leader, child := startGroup(t)
	// The recorded leader started at another time: the live group is someone else's.
	recorded := leader
	recorded.Start--
	n, err := ReapGroup(context.Background(), recorded, 100*time.Millisecond)
	if !errors.Is(err, ErrNotOurs) || n != 0 {
		t.Fatalf("reap of a reused group id: %d, %v; want ErrNotOurs", n, err)
	}
	if !alive(leader.Pid) || !alive(child) {
		t.Fatal("a group that is not the recorded one was signalled")
	}
	// A group of another boot is gone by definition: nothing is touched.
	other := leader
	other.BootID = "00000000-0000-0000-0000-000000000000"
	if n, err := ReapGroup(context.Background(), other, 100*time.Millisecond); n != 0 || err != nil || !alive(leader.Pid) {
		t.Fatalf("reap of another boot's group: %d, %v", n, err)
	}
}

// TestProcessGroupDiesWithArbiter kills, with SIGKILL, a process that started an engine
// which ignores SIGTERM and leaves a child that ignores it too (hostileserve's
// ignore-sigterm mode): the supervisor must end both within the grace period.
func TestProcessGroupDiesWithArbiter(t *testing.T) {
	if os.Getenv("ARBITER_TEST_GROUP_PARENT") != "" {
		return // this is the parent run by the test below, see TestProcessGroupParent
	}
	hostile := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	dir := t.TempDir()
	info := filepath.Join(dir, "info")
	parent := exec.Command(os.Args[0], "-test.run=^TestProcessGroupParent$")
	parent.Env = append(os.Environ(), "ARBITER_TEST_GROUP_PARENT="+info, "ARBITER_TEST_HOSTILE="+hostile)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer parent.Process.Kill()
	supervisor := readPid(t, info, "supervisor", 20*time.Second)
	engine := readPid(t, info, "engine", time.Second)
	child := readPid(t, filepath.Join(dir, "engine.log"), "hostileserve started child pid", 20*time.Second)
	// Only once the child has written its own line can the kill not be what ends it
	// (a write to the dead parent's pipe would: SIGPIPE).
	waiting := fmt.Sprintf("hostileserve child pid=%d waiting", child)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(dir, "engine.log")); strings.Contains(string(b), waiting) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child never said %q", waiting)
		}
	}
	for _, p := range []int{supervisor, engine, child} {
		if !alive(p) {
			t.Fatalf("process %d is not running before the kill", p)
		}
	}
	killed := time.Now()
	parent.Process.Kill()
	parent.Wait()
	// Grace is 1s in the parent; the supervisor rounds it up to whole seconds.
	waitGone(t, 6*time.Second, engine, child, supervisor)
	t.Logf("engine, its child and the supervisor were gone %v after the SIGKILL", time.Since(killed).Round(10*time.Millisecond))
}

// TestProcessGroupParent is the parent of TestProcessGroupDiesWithArbiter.
func TestProcessGroupParent(t *testing.T) {
	info := os.Getenv("ARBITER_TEST_GROUP_PARENT")
	if info == "" {
		t.Skip("run by TestProcessGroupDiesWithArbiter")
	}
	l := Launch{Name: "orphan", Command: []string{os.Getenv("ARBITER_TEST_HOSTILE"), "--mode", "ignore-sigterm"},
		LogPath: filepath.Join(filepath.Dir(info), "engine.log")}
	inst, err := (Process{Grace: time.Second}).Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	leader, _ := inst.(Grouped).Group()
	text := fmt.Sprintf("supervisor=%d\nengine=%d\n", leader.Pid, inst.(*processInstance).cmd.Process.Pid)
	if err := os.WriteFile(info+".tmp", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Rename(info+".tmp", info)
	select {} // killed by the test above
}

func TestParseStat(t *testing.T) {
	line := "4242 (a (weird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50 18446744073709551615"
	p, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if p.pid != 4242 || p.state != 'S' || p.pgrp != 4240 || p.start != 987654 {
		t.Errorf("parsed %+v", p)
	}
	for _, bad := range []string{"", "4242", "4242 (x) S 1", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) accepted it", bad)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4242 (a (weird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 50"))
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 3 1000 50"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseStat(b)
		if err != nil {
			return
		}
		// Whatever it accepted, the name is bracketed and the fields after it parse.
		if !strings.Contains(string(b), ")") || p.state == 0 {
			t.Fatalf("parseStat(%q) = %+v without a name or a state", b, p)
		}
	})
}
