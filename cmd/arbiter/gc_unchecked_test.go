package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/store"
)

// TestGcSaysWhatItCouldNotCheck: a Docker daemon that does not answer (the one
// $DOCKER_HOST names, a node of --spec, the local one of a database whose experiments used
// the docker runtime) is named as not checked, gc does not say nothing is left, and it
// exits 1.
func TestGcSaysWhatItCouldNotCheck(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exp, _ := s.CreateExperiment(ctx, store.Experiment{Name: "e", SpecPath: "s.yaml", Spec: "version: 1", Created: time.Now()})
	arm, _ := s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: "control", Pins: "{}", Command: "[]", Env: "{}"})
	if _, err := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: arm, Runtime: "docker", Status: "done", Started: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.FinishExperiment(ctx, exp, store.ExperimentDone, "", time.Now())
	s.Close()
	// Nothing listens on port 1: the daemon there is down.
	const down = "tcp://127.0.0.1:1"
	spec := filepath.Join(dir, "spec.yaml")
	os.WriteFile(spec, []byte("version: 1\nname: gc\nengine: {preset: refserve, image: arbiter/refserve:latest}\n"+
		"arms:\n  control: {env: {BF16_INDEX_K: \"0\"}}\n  treatment: {env: {BF16_INDEX_K: \"1\"}}\n"+
		"workload: {sessions: 2, rounds: 1}\nruntime:\n  kind: docker\n  nodes:\n    - {name: node-a, host: \""+down+"\"}\n"), 0o644)

	check := func(name, node string, args ...string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, append([]string{"gc", "--db", db}, args...)...)
		if code != exitError || strings.Contains(stdout, "no leftover containers") ||
			!strings.Contains(stdout, "not checked: "+node) || !strings.Contains(stderr, "could not check") {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s\nwant exit %d, naming %q as not checked", name, code, stdout, stderr, exitError, node)
		}
	}
	t.Setenv("DOCKER_HOST", down)
	check("$DOCKER_HOST down", "node "+down+" ($DOCKER_HOST)")
	check("--host down", "node "+down, "--host", down)
	check("--spec with its node down", "node node-a", "--spec", spec)
}
