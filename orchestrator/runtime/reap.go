package runtime

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// ProcessID names one process across time: a pid means nothing once its process is gone
// and the number is given to another, so the process's start time and the boot it ran
// in go with it.
type ProcessID struct {
	Pid int
	// Start is the process's start time in clock ticks after boot (/proc/PID/stat,
	// field 22).
	Start uint64
	// BootID is /proc/sys/kernel/random/boot_id of the boot the process ran in.
	BootID string
}

// Self names arbiter's own process; an error where processes cannot be identified
// (outside Linux).
func Self() (ProcessID, error) { return identify(os.Getpid()) }

// Identify names the running process pid; an error when it does not run or where
// processes cannot be identified (outside Linux).
func Identify(pid int) (ProcessID, error) { return identify(pid) }

// Alive reports whether p still runs: same boot, same pid, same start time, not a
// zombie. Where processes cannot be identified it reports false.
func (p ProcessID) Alive() bool {
	if p.Pid <= 0 {
		return false
	}
	boot, err := bootID()
	if err != nil || boot != p.BootID {
		return false
	}
	info, err := readProc(p.Pid)
	return err == nil && info.start == p.Start && info.state != 'Z'
}

// ErrNotOurs reports a process group whose id now belongs to processes that are not the
// ones recorded: the recorded group ended and its number was given out again.
var ErrNotOurs = errors.New("the process group's id was reused by other processes")

// GroupMembers lists the living processes of the process group led by leader (the
// group's id is the leader's pid). It returns none when the group is gone or belongs to
// another boot, and ErrNotOurs when the id was reused: a process with the leader's pid
// and another start time leads it, or a member started before the recorded leader did.
func GroupMembers(leader ProcessID) ([]int, error) {
	boot, err := bootID()
	if err != nil {
		return nil, err
	}
	if boot != leader.BootID {
		return nil, nil // everything of another boot is gone
	}
	procs, err := groupProcs(leader.Pid)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(procs))
	for _, p := range procs {
		if (p.pid == leader.Pid && p.start != leader.Start) || p.start < leader.Start {
			return nil, ErrNotOurs
		}
		pids = append(pids, p.pid)
	}
	return pids, nil
}

// ReapGroup ends the process group led by leader, as Stop would have: SIGTERM, then
// SIGKILL once the group is empty, grace has passed or ctx ends. It returns how many
// processes the group held. A group that is gone, or whose id was reused (ErrNotOurs),
// is left alone.
func ReapGroup(ctx context.Context, leader ProcessID, grace time.Duration) (int, error) {
	pids, err := GroupMembers(leader)
	if err != nil || len(pids) == 0 {
		return 0, err
	}
	_ = syscall.Kill(-leader.Pid, syscall.SIGTERM)
	if grace <= 0 {
		grace = DefaultGrace
	}
	if waitGroupEmpty(ctx, leader.Pid, grace) {
		return len(pids), nil
	}
	// Between the check above and now the group kept members, so its id is still
	// the one recorded.
	_ = syscall.Kill(-leader.Pid, syscall.SIGKILL)
	if !waitGroupEmpty(ctx, leader.Pid, 5*time.Second) {
		left, _ := groupMembers(leader.Pid)
		if len(left) > 0 {
			return len(pids), errors.New("processes of the group survived SIGKILL (stuck in the kernel?)")
		}
	}
	return len(pids), nil
}

// waitGroupEmpty polls group pgid until it holds no living process, for at most d.
func waitGroupEmpty(ctx context.Context, pgid int, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if pids, err := groupMembers(pgid); err == nil && len(pids) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}
