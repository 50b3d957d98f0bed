package bisect

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// hostileBisect is a bisection whose good side gives --model-path a value that looks
// like a flag. refserve (Go's flag package) reads it as the path, so good runs without
// HiCache; the release then turns HiCache on, with BF16_INDEX_K, which corrupt together.
const hostileBisect = `version: 1
name: hostile
engine: {preset: %s}
good: {env: {BF16_INDEX_K: "0"}, args: [--model-path, --enable-hierarchical-cache]}
bad: {env: {BF16_INDEX_K: "1"}, args: [--model-path, /models/x, --enable-hierarchical-cache]}
workload: {kind: toolcall-agent, sessions: 10, rounds: 2, seed: 1}
search: {effect: 0.1}
`

// refserveCorrupts decides a step as refserve would: it reads the applied arm's command
// line with Go's flag package, as refserve does (cmd/refserve/config.go), not with
// arbiter's parser, and corrupts when BF16_INDEX_K=1 meets --enable-hierarchical-cache.
func refserveCorrupts(t *testing.T, spec *arms.BisectSpec) func(Probe) stats.StepOutcome {
	return func(p Probe) stats.StepOutcome {
		step, err := spec.StepSpec(arms.StepOptions{Name: "hostile-s", Applied: p.Changes, Alpha: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		armList, err := step.Expand()
		if err != nil {
			t.Fatal(err)
		}
		applied := armList[1]
		fs := flag.NewFlagSet("refserve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("model-path", "", "")
		hicache := fs.Bool("enable-hierarchical-cache", false, "")
		if err := fs.Parse(applied.Command[1:]); err != nil || fs.NArg() > 0 {
			t.Fatalf("refserve would refuse %q: %v", applied.Command, err)
		}
		if applied.Env["BF16_INDEX_K"] == "1" && *hicache {
			return stats.StepCorrupts
		}
		return stats.StepClean
	}
}

// A flag value that starts with - is the value of a flag that takes one: the
// bisection sees HiCache turned on by the release, and names it with BF16_INDEX_K. It
// once read --model-path as a bare flag and HiCache as shared by both sides, and named
// BF16_INDEX_K with "--model-path: set → /models/x". An engine that reads its flags with
// argparse (SGLang) would not take the flag-like value: the spec is refused instead.
func TestBisectFlagLikeValueNamesTheRightCulprit(t *testing.T) {
	spec, err := arms.ParseBisect("spec.yaml", []byte(strings.Replace(hostileBisect, "%s", "refserve", 1)))
	if err != nil {
		t.Fatal(err)
	}
	design, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSearch(design.Changes, design.MaxSteps, false)
	if err != nil {
		t.Fatal(err)
	}
	drive(t, s, refserveCorrupts(t, spec))
	c := s.Conclusion()
	var culprit []string
	for _, i := range c.Culprit {
		culprit = append(culprit, spec.Changes[i].Label())
	}
	if got := strings.Join(culprit, " and "); c.Status != store.ConclusionCulprit || got != "BF16_INDEX_K: 0 → 1 and --enable-hierarchical-cache: absent → set" {
		t.Fatalf("conclusion %s: culprit %q, want BF16_INDEX_K and --enable-hierarchical-cache (%+v)", c.Status, got, c)
	}

	_, err = arms.ParseBisect("spec.yaml", []byte(strings.Replace(hostileBisect, "%s", "sglang", 1)))
	if err == nil || !strings.Contains(err.Error(), `spec.yaml:4:41: good.args: --model-path needs a value, and the engine reads "--enable-hierarchical-cache" after it as a flag`) ||
		!strings.Contains(err.Error(), "write --model-path=--enable-hierarchical-cache") {
		t.Fatalf("sglang: err = %v, want a refusal at good.args naming --model-path", err)
	}
}
