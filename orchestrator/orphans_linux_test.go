package orchestrator

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// TestReapOrphansSparesLiveArbitersAndEndsTheRest records one process group as started
// by this (live) process and one as started by an arbiter that is gone; only the second
// is ended.
func TestReapOrphansSparesLiveArbitersAndEndsTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "a.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	expID, err := st.CreateExperiment(ctx, store.Experiment{Name: "e", SpecPath: "s", Spec: "s", Unit: "session",
		Alpha: 0.05, Baseline: "a", Version: "t", Host: "h", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	armID, err := st.AddArm(ctx, store.Arm{ExperimentID: expID, Name: "a", Pins: "{}", Command: "[]", Env: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	self, err := runtime.Self()
	if err != nil {
		t.Fatal(err)
	}
	group := func() runtime.ProcessID {
		cmd := exec.Command("sh", "-c", `while :; do sleep 0.05; done`)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		id, err := runtime.Identify(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	record := func(g runtime.ProcessID, arbiter runtime.ProcessID) int64 {
		runID, err := st.StartRun(ctx, store.Run{ExperimentID: expID, ArmID: armID, Runtime: "process", Status: store.RunReady,
			Started: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		err = st.RecordEngineProcess(ctx, store.EngineProcess{RunID: runID, ExperimentID: expID, Host: "h",
			BootID: g.BootID, PGID: g.Pid, LeaderStart: g.Start, ArbiterPID: arbiter.Pid, ArbiterStart: arbiter.Start})
		if err != nil {
			t.Fatal(err)
		}
		return runID
	}
	live, orphan := group(), group()
	record(live, self)
	dead := self
	dead.Start-- // this pid, but another process: the arbiter that started it is gone
	orphanRun := record(orphan, dead)

	listed, err := ReapOrphans(ctx, st, 0, true)
	if err != nil || len(listed) != 1 || listed[0].RunID != orphanRun || listed[0].Ended {
		t.Fatalf("dry run listed %+v, %v; want only run %d, not ended", listed, err, orphanRun)
	}
	reaped, err := ReapOrphans(ctx, st, 0, false)
	if err != nil || len(reaped) != 1 || !reaped[0].Ended || reaped[0].Processes < 1 {
		t.Fatalf("reaped %+v, %v", reaped, err)
	}
	if pids, _ := runtime.GroupMembers(orphan); len(pids) != 0 {
		t.Errorf("the orphan's group still holds %v", pids)
	}
	if pids, _ := runtime.GroupMembers(live); len(pids) == 0 {
		t.Error("the group of a live arbiter was ended")
	}
	if again, _ := ReapOrphans(ctx, st, 0, false); len(again) != 0 {
		t.Errorf("a second reap found %+v", again)
	}
}
