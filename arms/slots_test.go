package arms

import (
	"fmt"
	"strings"
	"testing"
)

func TestSlotsCutNodesRoundRobin(t *testing.T) {
	src := strings.Replace(specWith(twoArms+`runtime:
  nodes:
    - {name: a, gpus: "0-3"}
    - {name: b, gpus: "4,5"}
    - {name: cpu, slots: 3}
`), "preset: refserve", "preset: refserve\n  gpus: 2", 1)
	// A node without a GPU list and engine.gpus set may have only one slot.
	if _, err := Parse("spec.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "runtime.nodes.2.slots") {
		t.Fatalf("want an error naming runtime.nodes.2.slots, got %v", err)
	}
	s := mustParse(t, strings.Replace(src, "{name: cpu, slots: 3}", "{name: cpu}", 1))
	slots, err := s.Slots()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sl := range slots {
		got = append(got, sl.String())
	}
	want := "a/0 (GPUs 0,1) b/0 (GPUs 4,5) cpu/0 (GPUs 0,1) a/1 (GPUs 2,3)"
	if strings.Join(got, " ") != want {
		t.Errorf("slots = %s, want %s", strings.Join(got, " "), want)
	}
}

func TestSlotsWithoutGPUs(t *testing.T) {
	cases := []struct {
		runtime string
		want    string
	}{
		{"", "local/0"},
		{"runtime:\n  nodes:\n    - {name: a, slots: 2}\n    - {name: b, slots: 2}\n", "a/0 b/0 a/1 b/1"},
		{"runtime:\n  nodes:\n    - {name: a, gpus: \"0-3\", slots: 2}\n", "a/0 (GPUs 0) a/1 (GPUs 1)"},
	}
	for _, c := range cases {
		src := specWith(twoArms + c.runtime)
		if strings.Contains(c.runtime, "gpus") {
			src = strings.Replace(src, "preset: refserve", "preset: refserve\n  gpus: 1", 1)
		}
		slots, err := mustParse(t, src).Slots()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sl := range slots {
			got = append(got, fmt.Sprint(sl))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%q: slots = %v, want %s", c.runtime, got, c.want)
		}
	}
}
