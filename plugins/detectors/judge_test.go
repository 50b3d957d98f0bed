package detectors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/plugins"
)

// claimer is a detector that answers in another's name, with reason, after delay (or
// never, when block).
type claimer struct {
	name, claims, reason string
	delay                time.Duration
	block                bool
}

func (c claimer) Name() string { return c.name }
func (c claimer) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	if c.block {
		<-ctx.Done()
		return plugins.Label{}, ctx.Err()
	}
	time.Sleep(c.delay)
	return plugins.Label{Detector: c.claims, Corrupted: false, Reason: c.reason}, nil
}

func TestJudgeKeepsEachLabelUnderItsDetectorsName(t *testing.T) {
	leak, _ := Builtin(DSMLLeakName)
	r := reply(v4Leak)
	out := Judge(context.Background(), []plugins.Detector{leak, claimer{name: "mine", claims: DSMLLeakName,
		reason: "\x1b[2J" + strings.Repeat("| x ", 10000)}}, r, 0)
	if len(out) != 2 || out[0].Label.Detector != DSMLLeakName || !out[0].Label.Corrupted {
		t.Fatalf("outcomes %+v", out)
	}
	if out[1].Label.Detector != "mine" {
		t.Errorf("the plugin's label is stored as %q, want its own name", out[1].Label.Detector)
	}
	if got := out[1].Label.Reason; len(got) > MaxReasonBytes+64 || strings.Contains(got, "\x1b") {
		t.Errorf("reason of %d bytes kept, escape sequences in it: %v", len(got), strings.Contains(got, "\x1b"))
	}
}

func TestJudgeBoundsEachCall(t *testing.T) {
	start := time.Now()
	out := Judge(context.Background(), []plugins.Detector{claimer{name: "hangs", block: true}, claimer{name: "slow", delay: 300 * time.Millisecond}},
		plugins.Response{}, 50*time.Millisecond)
	if !errors.Is(out[0].Err, context.DeadlineExceeded) || !errors.Is(out[1].Err, context.DeadlineExceeded) {
		t.Fatalf("outcomes %+v; want both past their time", out)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("judging took %v", time.Since(start))
	}
}

// The built-ins run without a timer; one that takes longer than its time still fails
// as past it, and one within its time, or cancelled after it answered, is judged as
// the timer would have judged it.
func TestJudgeBoundsTheBuiltinsByTheirMeasuredTime(t *testing.T) {
	var ds []plugins.Detector
	for _, name := range []string{DSMLLeakName, ToolcallSchemaName, RepetitionName, FinishAnomalyName} {
		d, ok := Builtin(name)
		if !ok {
			t.Fatalf("no built-in %s", name)
		}
		if _, ok := d.(inProcess); !ok {
			t.Fatalf("%s is not marked as running in process", name)
		}
		ds = append(ds, d)
	}
	r := reply(v4Leak)
	for _, o := range Judge(context.Background(), ds, r, time.Nanosecond) {
		if !errors.Is(o.Err, context.DeadlineExceeded) || !strings.Contains(o.Err.Error(), "answered after its 1ns") {
			t.Errorf("%s within 1ns: %v, want past its time", o.Detector, o.Err)
		}
	}
	out := Judge(context.Background(), ds, r, time.Hour)
	for _, o := range out {
		if o.Err != nil {
			t.Errorf("%s within an hour: %v", o.Detector, o.Err)
		}
	}
	if !out[0].Label.Corrupted {
		t.Errorf("%s within an hour: %+v, want the leak found", out[0].Detector, out[0].Label)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, o := range Judge(ctx, ds, r, time.Hour) {
		if !errors.Is(o.Err, context.Canceled) {
			t.Errorf("%s cancelled: %v, want cancelled", o.Detector, o.Err)
		}
	}
}

func TestResolveAllRefusesTwoDetectorsOfOneName(t *testing.T) {
	if _, _, err := ResolveAll(context.Background(), []string{DSMLLeakName, DSMLLeakName}); err == nil || !strings.Contains(err.Error(), "both call themselves") {
		t.Fatalf("err = %v", err)
	}
}
