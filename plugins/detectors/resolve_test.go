package detectors

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

func TestResolveBuiltinAndUnknown(t *testing.T) {
	d, release, err := Resolve(context.Background(), "repetition")
	if err != nil || d.Name() != "repetition" || release == nil {
		t.Fatalf("Resolve(repetition) = %v, %v", d, err)
	}
	release()
	_, _, err = Resolve(context.Background(), "dsml_leak")
	if err == nil || !strings.Contains(err.Error(), `unknown detector "dsml_leak": built-in detectors are divergence, dsml-leak, finish-anomaly, repetition, toolcall-schema`) {
		t.Errorf("err = %v", err)
	}
	if _, _, err := Resolve(context.Background(), "plugin:"); err == nil {
		t.Error("empty plugin name resolved")
	}
	t.Setenv("PATH", t.TempDir())
	_, _, err = Resolve(context.Background(), "plugin:nowhere")
	if err == nil || !strings.Contains(err.Error(), "arbiter-detector-nowhere") {
		t.Errorf("missing plugin: err = %v", err)
	}
}

func TestResolvePluginOnPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, PluginBinaryPrefix+"example")
	if err := os.Symlink(testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter-detector-example"), bin); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("ARBITER_CONTAINS_WORD", "paris")

	ds, release, err := ResolveAll(context.Background(), []string{"dsml-leak", "plugin:example"})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	labels, corrupted, err := Label(context.Background(), ds, reply("Paris is sunny."))
	if err != nil {
		t.Fatal(err)
	}
	if !corrupted || len(labels) != 2 || labels[0].Corrupted || !labels[1].Corrupted || labels[1].Detector != "contains-word" {
		t.Errorf("labels = %+v", labels)
	}
	// The same plugin twice, by name and by path, would keep its labels under one name.
	if _, _, err := ResolveAll(context.Background(), []string{"plugin:example", "plugin:" + bin}); err == nil || !strings.Contains(err.Error(), "both call themselves") {
		t.Errorf("one plugin twice: err = %v", err)
	}
	// A failing name releases the plugins already started and reports the name.
	if _, _, err := ResolveAll(context.Background(), []string{"plugin:example", "bogus"}); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("err = %v", err)
	}
}
