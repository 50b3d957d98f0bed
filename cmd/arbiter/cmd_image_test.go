//go:build linux

package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/internal/dockertest"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// `arbiter image build` puts a static refserve, and nothing else, in an image FROM
// scratch on a daemon without a registry, and the image serves.
func TestImageBuildMakesAnImageThatServes(t *testing.T) {
	ds := dockertest.Start(t, 1)
	bin := filepath.Join(t.TempDir(), "refserve-static")
	build := exec.Command("go", "build", "-tags", "arbiter_static", "-o", bin, "github.com/arbiterlab/arbiter/cmd/refserve")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	const tag = "arbiter-test/image-build:1"
	code, stdout, stderr := runCLI(t, "image", "build", "--binary", bin, "--tag", tag, "--host", ds[0].Host)
	if code != 0 || !strings.Contains(stdout, "built "+tag) || stderr != "" {
		t.Fatalf("image build: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	cli, err := client.New(client.WithHost(ds[0].Host), client.WithAPIVersionNegotiation())
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(inst.Endpoint() + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-inst.Done():
			t.Fatalf("the image's engine ended: %s\n%s", inst.Exit(), inst.Exit().LogTail)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the image's engine did not answer within 30s")
		}
	}

	// A binary that is not there is a usage error that says how to make one.
	code, _, stderr = runCLI(t, "image", "build", "--binary", filepath.Join(t.TempDir(), "none"), "--host", ds[0].Host)
	if code != exitUsage || !strings.Contains(stderr, "make image") {
		t.Errorf("image build of a missing binary: exit %d, %q", code, stderr)
	}
}
