package detectors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/plugins"
)

func TestRegistry(t *testing.T) {
	want := []string{"divergence", "dsml-leak", "finish-anomaly", "repetition", "toolcall-schema"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	if got := ResponseNames(); !slices.Equal(got, []string{"dsml-leak", "finish-anomaly", "repetition", "toolcall-schema"}) {
		t.Fatalf("ResponseNames() = %v", got)
	}
	if !IsCrossArm("divergence") || IsCrossArm("dsml-leak") || IsCrossArm("plugin:x") {
		t.Error("IsCrossArm is wrong")
	}
	for _, n := range want {
		d, ok := Builtin(n)
		if !ok || d.Name() != n {
			t.Errorf("Builtin(%q) = %v, %v", n, d, ok)
		}
	}
	if _, ok := Builtin("plugin:x"); ok {
		t.Error("Builtin accepted a plugin name")
	}
}

// failing is a detector that cannot judge.
type failing struct{}

func (failing) Name() string { return "failing" }
func (failing) Detect(context.Context, plugins.Response) (plugins.Label, error) {
	return plugins.Label{}, errors.New("backend gone")
}

func TestLabel(t *testing.T) {
	var ds []plugins.Detector
	for _, n := range Names() {
		d, _ := Builtin(n)
		ds = append(ds, d)
	}
	// Every built-in but divergence labels the reply; divergence is skipped, not failed.
	labels, corrupted, err := Label(context.Background(), ds, reply(prose))
	if err != nil || corrupted || len(labels) != 4 {
		t.Fatalf("clean reply: %v %v %v", labels, corrupted, err)
	}
	r := calls(agentTools, call("get_weather", `{}`))
	r.Completion.Choices[0].Message.Content = v4Leak
	labels, corrupted, err = Label(context.Background(), append(ds, failing{}), r)
	if !corrupted || len(labels) != 4 {
		t.Fatalf("leak: %v %v", labels, corrupted)
	}
	if err == nil || !strings.Contains(err.Error(), "detector failing: backend gone") {
		t.Errorf("err = %v", err)
	}
	got := map[string]bool{}
	for _, l := range labels {
		got[l.Detector] = l.Corrupted
	}
	// finish_reason "tool_calls" with markup left in content is a finish anomaly too.
	if !got["dsml-leak"] || !got["toolcall-schema"] || got["repetition"] || !got["finish-anomaly"] {
		t.Errorf("labels = %+v", labels)
	}
}

func BenchmarkLabel(b *testing.B) {
	var ds []plugins.Detector
	for _, n := range Names() {
		d, _ := Builtin(n)
		ds = append(ds, d)
	}
	// About 4 KB of prose and code with a quoted mention, and one structured call.
	content := strings.Repeat(prose+"\n\n", 3) + "The wrapper is `<｜DSML｜tool_calls>`.\n\n" + goCode
	r := calls(agentTools, call("search", `{"query": "hicache restore", "limit": 5, "filters": [{"field": "arm", "op": "eq"}]}`))
	r.Completion.Choices[0].Message.Content = content
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		if _, _, err := Label(context.Background(), ds, r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRepetitionLongReply(b *testing.B) {
	var sb strings.Builder // about 64 KB that never repeats itself
	for i := range 40 {
		fmt.Fprintf(&sb, "Section %d.\n\n%s\n\n%s\n\n", i, strings.ReplaceAll(prose, "session", fmt.Sprint("session", i)), goCode)
	}
	content := sb.String()
	r := reply(content)
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		if _, err := (repetition{}).Detect(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSpecsKnowEveryBuiltin: arms validates a spec's detectors list against its own list
// of names (it cannot import this package); the two must not drift apart.
func TestSpecsKnowEveryBuiltin(t *testing.T) {
	known := slices.Sorted(slices.Values(arms.KnownDetectors))
	if !slices.Equal(known, Names()) {
		t.Errorf("arms.KnownDetectors = %v, built-ins = %v", known, Names())
	}
}
