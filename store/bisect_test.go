package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBisectionLeaseIsExclusiveUntilItExpires(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	t0 := time.Now()
	id, first, err := s.StartBisection(ctx, Bisection{Name: "b", Changes: "[]", ErrorBudget: 0.05, Effect: 0.1, Looks: 3,
		MaxSteps: 9, StepAlpha: 0.05 / 9, Sessions: 40, Created: t0}, newOwner("first"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.AcquireBisection(ctx, id, newOwner("second"), t0.Add(LeaseExpiry/2))
	var held *LeaseHeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), fmt.Sprintf("bisection %d is being run by", id)) {
		t.Fatalf("second owner while the first is live: %v", err)
	}
	b, err := FindBisection(ctx, s.DB(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if b.State() != ExperimentRunning || b.Lease() == nil || b.Lease().Owner != "first" {
		t.Fatalf("state %s, lease %+v", b.State(), b.Lease())
	}
	late := t0.Add(LeaseExpiry + time.Second)
	second, err := s.AcquireBisection(ctx, id, newOwner("second"), late)
	if err != nil {
		t.Fatalf("taking over a stale lease: %v", err)
	}
	if err := first.Renew(ctx, late); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("old owner's heartbeat: %v, want ErrLeaseLost", err)
	}
	if err := first.Finish(ctx, ExperimentDone, `{"status":"culprit"}`, "", late); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("old owner's finish: %v, want ErrLeaseLost", err)
	}
	if err := second.Finish(ctx, ExperimentInterrupted, "", "", late); err != nil {
		t.Fatal(err)
	}
	b, _ = FindBisection(ctx, s.DB(), fmt.Sprint(id))
	if b.Status != ExperimentInterrupted || b.Lease() != nil || b.Conclusion.Valid {
		t.Fatalf("after finishing: %+v", b)
	}
	// A resume takes the free lease, reopens, and records the conclusion at the end.
	third, err := s.AcquireBisection(ctx, id, newOwner("third"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := third.Reopen(ctx); err != nil {
		t.Fatal(err)
	}
	if err := third.Finish(ctx, ExperimentDone, `{"status":"culprit","culprit":[1,5],"steps":8}`, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	b, _ = FindBisection(ctx, s.DB(), "")
	if b.Status != ExperimentDone || !strings.Contains(b.Conclusion.String, `"culprit":[1,5]`) || !b.FinishedAt.Valid {
		t.Fatalf("done: %+v", b)
	}
}

// A killed bisection (its arbiter gone, the heartbeat stale) is shown abandoned.
func TestBisectionWithAStaleLeaseIsAbandoned(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	id, _, err := s.StartBisection(ctx, Bisection{Name: "b", Changes: "[]", Created: time.Now().Add(-2 * LeaseExpiry)}, newOwner("gone"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := ListBisections(ctx, s.DB())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id || list[0].State() != ExperimentAbandoned {
		t.Fatalf("%+v", list)
	}
}

func TestBisectionStepsAreRecordedOnce(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	id, _, err := s.StartBisection(ctx, Bisection{Name: "b", Changes: "[]", Created: time.Now()}, newOwner("o"))
	if err != nil {
		t.Fatal(err)
	}
	step := BisectionStep{BisectionID: id, Step: 1, Role: "reproduce", Applied: "[0,1]", ExperimentName: "b-b1-s01"}
	if err := s.AddBisectionStep(ctx, step); err != nil {
		t.Fatal(err)
	}
	if err := s.AddBisectionStep(ctx, step); !errors.Is(err, ErrStepTaken) {
		t.Fatalf("the same step twice: %v, want ErrStepTaken", err)
	}
	exp, err := s.CreateExperiment(ctx, Experiment{Name: "b-b1-s01", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetBisectionStep(ctx, id, 1, exp, "corrupts"); err != nil {
		t.Fatal(err)
	}
	steps, err := BisectionSteps(ctx, s.DB(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].ExperimentID.Int64 != exp || steps[0].Outcome.String != "corrupts" || steps[0].Applied != "[0,1]" {
		t.Fatalf("%+v", steps)
	}
	if _, err := FindBisection(ctx, s.DB(), "no-such"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown bisection: %v", err)
	}
}

// ParsedConclusion is nil before a search concludes, what the search stored after, and an
// error that names the bisection when the stored text is not a conclusion.
func TestParsedConclusion(t *testing.T) {
	if c, err := (BisectionRow{ID: 1}).ParsedConclusion(); c != nil || err != nil {
		t.Errorf("no conclusion: %+v, %v", c, err)
	}
	stored := BisectionRow{ID: 2, Conclusion: sql.NullString{Valid: true, String: `{"status":"culprit","culprit":[1,5],"confirmed_by":8,"reason":"r","steps":8}`}}
	c, err := stored.ParsedConclusion()
	if err != nil || c.Status != ConclusionCulprit || !slices.Equal(c.Culprit, []int{1, 5}) || c.ConfirmedBy != 8 || c.Steps != 8 {
		t.Errorf("stored conclusion: %+v, %v", c, err)
	}
	bad := BisectionRow{ID: 3, Conclusion: sql.NullString{Valid: true, String: "{"}}
	if c, err := bad.ParsedConclusion(); c != nil || err == nil || !strings.Contains(err.Error(), "bisection 3") {
		t.Errorf("unreadable conclusion: %+v, %v", c, err)
	}
}
