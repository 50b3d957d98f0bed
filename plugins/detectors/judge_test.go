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

func TestResolveAllRefusesTwoDetectorsOfOneName(t *testing.T) {
	if _, _, err := ResolveAll(context.Background(), []string{DSMLLeakName, DSMLLeakName}); err == nil || !strings.Contains(err.Error(), "both call themselves") {
		t.Fatalf("err = %v", err)
	}
}
