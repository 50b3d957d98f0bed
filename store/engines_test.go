package store

import (
	"context"
	"testing"
	"time"
)

func TestEngineProcessesAreOpenUntilEnded(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	exp, arm, run := seedExperiment(t, s)
	run2, err := s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Runtime: "process", Status: "starting", Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	rec := EngineProcess{RunID: run, ExperimentID: exp, Host: "node-a", BootID: "boot-1", PGID: 4242,
		LeaderStart: 1 << 40, ArbiterPID: 4200, ArbiterStart: 99}
	if err := s.RecordEngineProcess(ctx, rec); err != nil {
		t.Fatal(err)
	}
	other := rec
	other.RunID, other.BootID = run2, "boot-0" // a group of an earlier boot
	if err := s.RecordEngineProcess(ctx, other); err != nil {
		t.Fatal(err)
	}
	open, err := s.OpenEngineProcesses(ctx, "boot-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0] != rec {
		t.Fatalf("open groups of boot-1 = %+v, want %+v", open, rec)
	}
	if open, _ := s.OpenEngineProcesses(ctx, "boot-1", exp+1); len(open) != 0 {
		t.Errorf("another experiment's filter listed %+v", open)
	}
	if err := s.EngineProcessEnded(ctx, run, time.Now()); err != nil {
		t.Fatal(err)
	}
	if open, _ := s.OpenEngineProcesses(ctx, "boot-1", exp); len(open) != 0 {
		t.Errorf("an ended group is still listed: %+v", open)
	}
}
