package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/internal/testkit/dockertest"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// startArm starts refserve as one arm of the quickstart runs, through the process
// runtime, and returns its base URL once it answers /health.
func startArm(t *testing.T, bin string, bf16 string) string {
	t.Helper()
	inst, err := runtime.Process{}.Start(context.Background(), runtime.Launch{Name: "replay-" + bf16,
		Command: []string{filepath.Join(bin, "refserve"), "--enable-hierarchical-cache", "--tool-call-parser", "deepseekv4"},
		Env:     []string{"BF16_INDEX_K=" + bf16}, LogPath: filepath.Join(t.TempDir(), "refserve.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	dockertest.WaitHealthy(t, inst)
	return inst.Endpoint()
}

// arbiter repro on the quickstart's experiment writes a bundle that holds no secret of
// the spec's env, and whose replay reproduces a corrupted session against a fresh
// treatment arm and none against a control arm.
func TestReproBundleReplays(t *testing.T) {
	t.Parallel()
	bin := buildRefserve(t)
	src, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "hf_reproSecret_Zq81"
	spec := strings.Replace(string(src), "env: {}", `env: {HF_TOKEN: "`+secret+`"}`, 1)
	if spec == string(src) {
		t.Fatal("the quickstart's engine env is no longer `env: {}`")
	}
	dir := t.TempDir()
	specPath, db := filepath.Join(dir, "quickstart.yaml"), filepath.Join(dir, "r.db")
	if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI(t, "run", specPath, "--db", db); code != exitOK {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	bundle := filepath.Join(dir, "bundle")
	if code, stdout, stderr := runCLI(t, "repro", "--db", db, "-o", bundle); code != exitOK {
		t.Fatalf("repro: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// A folder that holds a README.md of its own (repro -o . in a project) is refused,
	// its README left as it was.
	project := filepath.Join(dir, "project")
	os.Mkdir(project, 0o755)
	os.WriteFile(filepath.Join(project, "README.md"), []byte("# my project\n"), 0o644)
	if code, stdout, stderr := runCLI(t, "repro", "--db", db, "-o", project); code == exitOK || !strings.Contains(stderr, "README.md") {
		t.Errorf("repro -o into a folder with a README.md: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "README.md")); string(b) != "# my project\n" {
		t.Errorf("the folder's README.md became:\n%s", b)
	}
	files, _ := os.ReadDir(bundle)
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(bundle, f.Name()))
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the spec's secret", f.Name())
		}
	}
	readme, err := os.ReadFile(filepath.Join(bundle, "README.md"))
	if err != nil || !strings.Contains(string(readme), "responses corrupted with treatment (BF16_INDEX_K=1), not with control") ||
		!strings.Contains(string(readme), "arbiter repro --replay") {
		t.Errorf("README.md (%v):\n%s", err, readme)
	}

	code, stdout, stderr := runCLI(t, "repro", "--replay", bundle, "--base-url", startArm(t, bin, "1"))
	if code != exitOK || !strings.Contains(stdout, "REPRODUCED: dsml-leak") {
		t.Errorf("replay against treatment: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "repro", "--replay", bundle, "--base-url", startArm(t, bin, "0"))
	if code != exitGateFailed || !strings.Contains(stdout, " 0 of ") || strings.Contains(stdout, "REPRODUCED") {
		t.Errorf("replay against control: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// An engine that cannot be reached is not one that no longer reproduces.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	code, stdout, stderr = runCLI(t, "repro", "--replay", bundle, "--base-url", gone.URL, "--timeout", "5s")
	if code != exitError || !strings.Contains(stderr, "could not judge") {
		t.Errorf("replay against nothing: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
