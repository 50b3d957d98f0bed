package arms

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// wants reads the "# want: LINE:COL PATH" comments at the top of a spec.
func wants(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break
		}
		if w, ok := strings.CutPrefix(line, "# want: "); ok {
			out = append(out, strings.TrimSpace(w))
		}
	}
	return out
}

func got(err error) []string {
	var out []string
	for _, e := range Errors(err) {
		s := fmt.Sprintf("%d:%d", e.Line, e.Col)
		if e.Path != "" {
			s += " " + e.Path
		}
		out = append(out, s)
	}
	return out
}

func TestInvalidSpecFiles(t *testing.T) {
	files, err := filepath.Glob("../testdata/specs/invalid-*.yaml")
	if err != nil || len(files) < 12 {
		t.Fatalf("want at least 12 invalid specs, found %d (%v)", len(files), err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := wants(t, data)
			if len(want) == 0 {
				t.Fatalf("%s has no # want: comment", path)
			}
			spec, err := Load(path)
			if err == nil {
				t.Fatalf("Load accepted an invalid spec: %+v", spec)
			}
			if spec != nil {
				t.Errorf("Load returned a spec with an error")
			}
			if g := got(err); !slices.Equal(g, want) {
				t.Errorf("errors at\n  %s\nwant\n  %s\nfull error:\n%v", strings.Join(g, "\n  "), strings.Join(want, "\n  "), err)
			}
			for _, e := range Errors(err) {
				if e.File != path {
					t.Errorf("error names file %q, want %q", e.File, path)
				}
				if !strings.HasPrefix(e.Error(), fmt.Sprintf("%s:%d:%d: ", path, e.Line, e.Col)) {
					t.Errorf("error %q does not start with file:line:col", e.Error())
				}
			}
			confounded := strings.HasPrefix(filepath.Base(path), "invalid-confound-")
			if errors.Is(err, ErrConfounded) != confounded {
				t.Errorf("errors.Is(err, ErrConfounded) = %v, want %v: %v", !confounded, confounded, err)
			}
		})
	}
}

func TestValidSpecFiles(t *testing.T) {
	files, _ := filepath.Glob("../testdata/specs/valid-*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	files = append(files, examples...)
	if len(files) < 5 {
		t.Fatalf("found only %d valid specs and examples", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			spec, err := Load(path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			arms, err := spec.Expand()
			if err != nil {
				t.Fatalf("Expand: %v", err)
			}
			if len(arms) < 2 {
				t.Fatalf("expanded to %d arms", len(arms))
			}
			names := map[string]bool{}
			for _, a := range arms {
				if names[a.Name] {
					t.Errorf("arm name %s twice", a.Name)
				}
				names[a.Name] = true
			}
			if !names[spec.Analysis.Baseline] {
				t.Errorf("baseline %q names no arm", spec.Analysis.Baseline)
			}
		})
	}
}

func TestQuickstartExample(t *testing.T) {
	spec, err := Load("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "bf16-index-k-decisive" || spec.Engine.Preset != "refserve" {
		t.Errorf("name %q preset %q", spec.Name, spec.Engine.Preset)
	}
	wantArgs := []string{"--enable-hierarchical-cache", "--tool-call-parser", "deepseekv4", "--enable-metrics"}
	if !slices.Equal(spec.Engine.Args, wantArgs) {
		t.Errorf("engine args %q, want %q (no --max-running-requests cap; metrics for the verdict's Conditions)", spec.Engine.Args, wantArgs)
	}
	w := spec.Workload
	if w.Kind != "toolcall-agent" || w.Sessions != 60 || w.Rounds != 4 || w.Concurrency != 60 || w.Seed != 42 || w.Temperature != 0 {
		t.Errorf("workload %+v", w)
	}
	if !slices.Equal(spec.Detectors, []string{"dsml-leak", "toolcall-schema"}) {
		t.Errorf("detectors %q", spec.Detectors)
	}
	a := spec.Analysis
	if a.Unit != "session" || a.Alpha != 0.05 || a.Baseline != "control" || a.AA {
		t.Errorf("analysis %+v", a)
	}
	if spec.Timeouts != (Timeouts{Startup: 60 * time.Second, Request: 120 * time.Second, Stall: 30 * time.Second, Detector: 60 * time.Second}) {
		t.Errorf("timeouts %+v", spec.Timeouts)
	}
	arms, err := spec.Expand()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"refserve", "--enable-hierarchical-cache", "--tool-call-parser", "deepseekv4", "--enable-metrics"}
	for i, v := range []string{"0", "1"} {
		if !slices.Equal(arms[i].Command, want) {
			t.Errorf("arm %s command %q", arms[i].Name, arms[i].Command)
		}
		if arms[i].Env["BF16_INDEX_K"] != v || len(arms[i].Env) != 1 {
			t.Errorf("arm %s env %v", arms[i].Name, arms[i].Env)
		}
	}
}

func TestAAExample(t *testing.T) {
	spec, err := Load("../examples/aa.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !spec.Analysis.AA || spec.Arms[0].Name != "a1" || spec.Arms[1].Name != "a2" {
		t.Errorf("aa %v arms %+v", spec.Analysis.AA, spec.Arms)
	}
	// The same spec without the declaration is refused as identical arms.
	src := strings.Replace(string(spec.Source), "\n  aa: true", "\n  aa: false", 1)
	_, err = Parse("aa.yaml", []byte(src))
	if !errors.Is(err, ErrConfounded) || !strings.Contains(err.Error(), "arms a1 and a2 are identical") {
		t.Errorf("without aa: %v", err)
	}
}

func TestFactorialExample(t *testing.T) {
	spec, err := Load("../examples/factorial.yaml")
	if err != nil {
		t.Fatal(err)
	}
	arms, err := spec.Expand()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range arms {
		names = append(names, a.Name)
	}
	want := []string{"bf16_index_k=0,hicache=off", "bf16_index_k=0,hicache=on", "bf16_index_k=1,hicache=off", "bf16_index_k=1,hicache=on"}
	if !slices.Equal(names, want) {
		t.Errorf("arms %q, want %q", names, want)
	}
	if spec.Workload.Sessions != 60 || spec.Workload.Rounds != 4 || spec.Workload.Concurrency != 60 {
		t.Errorf("workload %+v", spec.Workload)
	}
}
