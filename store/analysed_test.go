package store

import (
	"context"
	"testing"
	"time"
)

// One rule decides which sessions an analysis counts; the SQL tallies must agree with it
// session by session.
func TestSessionCountsFollowTheOneRule(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	ctx := context.Background()
	w := s.NewWriter(WriterOptions{})
	sessions := []struct {
		status    SessionStatus
		corrupted bool
	}{
		{"ok", false}, {"ok", true}, {"ok", true}, // finished: analysed
		{"aborted", true}, {"timeout", true}, // corrupted, then lost: not analysed
		{"error", false}, {"aborted", false}, // lost clean
	}
	var want SessionCounts
	for i, x := range sessions {
		w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Index: i, Status: x.status, Turns: 2, Corrupted: x.corrupted})
		want.Count(x.status, x.corrupted)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want != (SessionCounts{Recorded: 7, Analysed: 3, Corrupted: 2, Lost: 4, CorruptedThenLost: 2}) {
		t.Fatalf("Count tallied %+v", want)
	}
	got, err := RunSessionCounts(ctx, s.DB(), run)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("RunSessionCounts = %+v, want %+v", got, want)
	}
	byArm, err := ArmSessionCounts(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if byArm[arm] != want {
		t.Errorf("ArmSessionCounts = %+v, want %+v", byArm[arm], want)
	}
	outcomes, err := Sessions(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	analysed := 0
	for _, o := range outcomes {
		if o.Analysed() {
			analysed++
		}
	}
	if analysed != want.Analysed {
		t.Errorf("SessionOutcome.Analysed counts %d, the tally %d", analysed, want.Analysed)
	}

	list, err := ListExperiments(ctx, s.DB())
	if err != nil || len(list) != 1 || list[0].Sessions != 3 || list[0].Corrupted != 2 || list[0].Lost != 4 {
		t.Errorf("ListExperiments = %+v, %v; want 3 analysed, 2 corrupted, 4 lost", list, err)
	}

	// A launch that a resume ran again is left out of the experiment's tally.
	rerun, err := s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Runtime: "process", Status: "starting"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Supersede(ctx, run, rerun); err != nil {
		t.Fatal(err)
	}
	if byArm, err = ArmSessionCounts(ctx, s.DB(), exp); err != nil || byArm[arm] != (SessionCounts{}) {
		t.Errorf("after the launch was superseded: %+v, %v; want nothing counted", byArm[arm], err)
	}
}

func TestDesignLossLimitDefaultsForOldExperiments(t *testing.T) {
	var d Design
	if d.LossLimit() != DefaultMaxLoss {
		t.Errorf("no max_loss recorded: limit %g, want %g", d.LossLimit(), DefaultMaxLoss)
	}
	zero := 0.0
	d.MaxLoss = &zero
	if d.LossLimit() != 0 {
		t.Errorf("max_loss 0 recorded: limit %g, want 0", d.LossLimit())
	}
	e := ExperimentRow{Design: `{"blocks":1,"max_loss":0.25}`}
	if got := e.ParsedDesign().LossLimit(); got != 0.25 {
		t.Errorf("parsed max_loss %g, want 0.25", got)
	}
}

// One rule decides which launches an analysis counts: every read the verdict makes keeps
// the sessions of exactly the launches InAnalysis keeps, and CutShortSessionCounts
// counts the rest, for every status a launch can have.
func TestLaunchesInTheAnalysisFollowTheOneRule(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, _ := seedExperiment(t, s)
	ctx := context.Background()
	statuses := []RunStatus{RunStarting, RunReady, RunDone, RunCrashed, RunFailed, RunWedged, RunErroring,
		RunTimedOut, RunInterrupted, RunLost, RunRefused}
	w := s.NewWriter(WriterOptions{})
	in := map[int64]bool{}
	var want, wantCut SessionCounts
	for _, st := range statuses {
		run, err := s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Runtime: "process", Status: st, Started: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		in[run] = InAnalysis(st, false)
		// Each launch finished one corrupted session and lost one clean one.
		for i, x := range []SessionStatus{SessionOK, SessionAborted} {
			w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Index: i, Status: x, Turns: 1, Corrupted: x == SessionOK})
			if in[run] {
				want.Count(x, x == SessionOK)
			} else {
				wantCut.Count(x, x == SessionOK)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want.Recorded != 14 || wantCut.Recorded != 8 {
		t.Fatalf("InAnalysis keeps %d sessions and cuts %d; want the launches of 7 statuses kept and 4 cut short", want.Recorded, wantCut.Recorded)
	}
	byArm, err := ArmSessionCounts(ctx, s.DB(), exp)
	if err != nil || byArm[arm] != want {
		t.Errorf("ArmSessionCounts = %+v, %v; want %+v", byArm[arm], err, want)
	}
	cut, err := CutShortSessionCounts(ctx, s.DB(), exp)
	if err != nil || cut[arm] != wantCut {
		t.Errorf("CutShortSessionCounts = %+v, %v; want %+v", cut[arm], err, wantCut)
	}
	outcomes, err := Sessions(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outcomes {
		if !in[o.RunID] {
			t.Errorf("Sessions read a session of launch %d, which is cut short", o.RunID)
		}
	}
	if len(outcomes) != want.Recorded {
		t.Errorf("Sessions read %d sessions, want %d", len(outcomes), want.Recorded)
	}
	list, err := ListExperiments(ctx, s.DB())
	if err != nil || len(list) != 1 || list[0].Sessions != want.Analysed || list[0].Lost != want.Lost {
		t.Errorf("ListExperiments = %+v, %v; want %d analysed and %d lost", list, err, want.Analysed, want.Lost)
	}
}

// A launch cut short is out of the analysis but not out of reach: its corrupted responses
// are still the requests `arbiter repro` bundles, with the load they met.
func TestFailingTurnsIncludeLaunchesCutShort(t *testing.T) {
	s := newStore(t, Options{})
	exp, _, _ := seedExperiment(t, s)
	ctx := context.Background()
	arm, err := s.AddArm(ctx, Arm{ExperimentID: exp, Name: "treatment", Position: 1, Pins: "{}", Command: "[]", Env: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Runtime: "process", Status: RunInterrupted, Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	first := 0
	w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Started: time.Now(), StatusCode: 200, Corrupted: true,
		Request: `{"messages":[]}`, Response: `{}`, Labels: []Label{{Detector: "dsml-leak", Corrupted: true, Reason: "markup in content"}}})
	w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Status: SessionOK, Turns: 1, Corrupted: true, FirstCorruptedTurn: &first})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	failing, err := FailingTurns(ctx, s.DB(), exp, "control")
	if err != nil || len(failing) != 1 || failing[0].Arm != "treatment" || failing[0].Reasons != "dsml-leak: markup in content" {
		t.Fatalf("FailingTurns = %+v, %v; want treatment's corrupted turn from its interrupted launch", failing, err)
	}
	load, err := RoundOpenings(ctx, s.DB(), exp, "treatment", 0, 0)
	if err != nil || len(load) != 1 {
		t.Errorf("RoundOpenings = %v, %v; want the interrupted launch's one opening", load, err)
	}
	if s, err := Sessions(ctx, s.DB(), exp); err != nil || len(s) != 0 {
		t.Errorf("Sessions = %+v, %v; the interrupted launch is out of the analysis", s, err)
	}
}
