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

// FuzzExpandGPUs checks that any GPU list either fails cleanly or expands to distinct
// devices, and that cutting a node into slots never hands one device to two slots.
func FuzzExpandGPUs(f *testing.F) {
	for _, s := range []string{"0-7", "0,2,4", "3", "1-0", "0-99999", "a", ",", "0,,1"} {
		f.Add(s, 2, 0)
	}
	f.Fuzz(func(t *testing.T, list string, perArm, slots int) {
		ids, err := ExpandGPUs(list)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("%q: device %s twice", list, id)
			}
			seen[id] = true
		}
		if perArm < 0 || perArm > MaxGPUs || slots < 0 || slots > MaxSlots {
			return
		}
		out, err := nodeSlots(Node{Name: "n", GPUs: list, Slots: slots}, 0, perArm)
		if err != nil {
			return
		}
		used := map[string]bool{}
		for _, sl := range out {
			for id := range strings.SplitSeq(sl.GPUs, ",") {
				if id != "" && used[id] {
					t.Fatalf("%q, %d per arm: device %s in two slots", list, perArm, id)
				}
				used[id] = true
			}
		}
	})
}

func TestSlotsOnCountsAllGPUs(t *testing.T) {
	src := strings.Replace(specWith(twoArms+"runtime:\n  nodes:\n    - {name: gpu-host, gpus: all}\n"), "preset: refserve", "preset: refserve\n  gpus: 1", 1)
	s := mustParse(t, src)
	for count, want := range map[int]string{0: "gpu-host/0 (GPUs 0)", 1: "gpu-host/0 (GPUs 0)", 2: "gpu-host/0 (GPUs 0) gpu-host/1 (GPUs 1)"} {
		slots, err := s.SlotsOn(func(Node) int { return count })
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sl := range slots {
			got = append(got, sl.String())
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%d GPUs: slots %v, want %s", count, got, want)
		}
	}
}
