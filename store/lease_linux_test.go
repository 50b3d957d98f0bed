package store

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// A killed arbiter is a zombie until its parent reaps it; its lease is stale already.
func TestZombieHoldsNoLease(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !processExists(pid) {
		t.Fatal("a running process judged gone")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Wait for the exit without reaping it: the process is now a zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if !signalable(pid) {
		t.Fatal("the zombie cannot be signalled: the test proves nothing")
	}
	if processExists(pid) {
		t.Error("a zombie judged alive: its lease would block a resume until it expires")
	}
	cmd.Wait()
	if processExists(pid) {
		t.Error("a reaped process judged alive")
	}
}
