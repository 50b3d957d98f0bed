//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/internal/testkit/dockertest"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// `arbiter image build` puts a static refserve, and nothing else, in an image FROM
// scratch on a daemon without a registry, and the image serves.
func TestImageBuildMakesAnImageThatServes(t *testing.T) {
	t.Parallel()
	ds := dockertest.Start(t, 1)
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve", testbin.Static...)
	const tag = "arbiter-test/image-build:1"
	code, stdout, stderr := runCLI(t, "image", "build", "--binary", bin, "--tag", tag, "--host", ds[0].Host)
	if code != 0 || !strings.Contains(stdout, "built "+tag) || stderr != "" {
		t.Fatalf("image build: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	cli, err := client.New(client.WithHost(ds[0].Host))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	img, err := cli.ImageInspect(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	if ep := img.Config.Entrypoint; !slices.Equal(ep, []string{"/usr/local/bin/refserve"}) {
		t.Errorf("entrypoint %v, want /usr/local/bin/refserve", ep)
	}
	if n := len(img.RootFS.Layers); n != 1 {
		t.Errorf("%d layers, want the one that holds refserve", n)
	}
	inst, err := runtime.Docker{Host: ds[0].Host, Network: "host", Grace: 5 * time.Second}.Start(context.Background(),
		runtime.Launch{Name: "exp1-image-b0", Image: tag, Command: []string{"refserve"}, LogPath: filepath.Join(t.TempDir(), "engine.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(context.Background())
	dockertest.WaitHealthy(t, inst)

	// A binary that is not there is a usage error that says how to make one.
	code, _, stderr = runCLI(t, "image", "build", "--binary", filepath.Join(t.TempDir(), "none"), "--host", ds[0].Host)
	if code != exitUsage || !strings.Contains(stderr, "make image") {
		t.Errorf("image build of a missing binary: exit %d, %q", code, stderr)
	}
}

// gc --spec sweeps every docker node of a spec: a leftover on each daemon is found on
// its node and removed there.
func TestGcSweepsEveryNodeOfASpec(t *testing.T) {
	t.Parallel()
	ds := dockertest.Start(t, 2)
	image := dockertest.RefserveImage(t, ds...)
	dir := t.TempDir()
	db := filepath.Join(dir, "results.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	over, _ := s.CreateExperiment(ctx, store.Experiment{Name: "over", Created: time.Now()})
	s.FinishExperiment(ctx, over, store.ExperimentDone, "", time.Now())
	dbID, err := store.DatabaseID(ctx, s.DB())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// An arbiter killed outright leaves a container on each node.
	var nodes strings.Builder
	for i, d := range ds {
		inst, err := runtime.Docker{Host: d.Host, Network: "host", Grace: 5 * time.Second}.Start(ctx, runtime.Launch{
			Name: fmt.Sprintf("exp%d-arm%d-b0", over, i), ExperimentID: over, RunID: int64(i + 1), DatabaseID: dbID,
			Image: image, Command: []string{"refserve"}, LogPath: filepath.Join(dir, fmt.Sprintf("engine%d.log", i))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inst.Stop(context.Background()) })
		fmt.Fprintf(&nodes, "    - {name: %s, host: %q, network: host}\n", d.Name, d.Host)
	}
	spec := filepath.Join(dir, "spec.yaml")
	src := "version: 1\nname: gc\nengine: {preset: refserve, image: " + image + "}\n" +
		"arms:\n  control: {env: {BF16_INDEX_K: \"0\"}}\n  treatment: {env: {BF16_INDEX_K: \"1\"}}\n" +
		"workload: {sessions: 2, rounds: 1}\nruntime:\n  kind: docker\n  nodes:\n" + nodes.String()
	if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "gc", "--db", db, "--spec", spec)
	if code != 0 {
		t.Fatalf("gc --spec: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, d := range ds {
		if !strings.Contains(stdout, "node "+d.Name) {
			t.Errorf("gc did not report a container on %s:\n%s", d.Name, stdout)
		}
		left, err := (runtime.Docker{Host: d.Host}).Leftovers(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Errorf("%s still holds %v after gc --spec", d.Name, left)
		}
	}
}
