package plugins_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/hostileplugin"
	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
)

func TestMain(m *testing.M) {
	hostileplugin.MaybeServe() // the tests' hostile detector plugins are this binary
	os.Exit(m.Run())
}

func response() plugins.Response {
	return plugins.Response{Completion: openai.ChatCompletion{Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: "hi"}}}}}
}

func launch(t *testing.T, mode string, out *lockedbuf.Buffer) (plugins.Detector, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = plugins.WithOutput(ctx, plugins.Output{W: out, Redact: func(s string) string { return strings.ReplaceAll(s, "s3cret", "[redacted]") }})
	d, release, err := plugins.Launch(ctx, hostileplugin.Path(t, mode))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return d, release
}

// What a Go plugin writes to its standard error once it serves reaches arbiter's,
// redacted and without the escape sequences it wrote.
func TestAServingPluginsStandardErrorReachesArbiters(t *testing.T) {
	t.Parallel()
	var out lockedbuf.Buffer
	d, release := launch(t, hostileplugin.Noisy+"-s3cret", &out)
	if _, err := d.Detect(context.Background(), response()); err != nil {
		t.Fatal(err)
	}
	// go-plugin forwards a serving plugin's standard error over its own gRPC stream, which
	// may still carry the line when Detect has returned: wait for it (up to 30 s) before
	// the plugin is released, as arbiter's own plugins live on after a call.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "hostile plugin says") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	release()
	got := out.String()
	if !strings.Contains(got, "hostile plugin says [redacted] red") || strings.Contains(got, "s3cret") || strings.Contains(got, "\x1b") {
		t.Fatalf("arbiter's standard error:\n%q", got)
	}
	if strings.Contains(got, `"@level"`) {
		t.Errorf("go-plugin's own structured lines reached arbiter's standard error raw:\n%s", got)
	}
}

// A label carries its plugin's name whatever the plugin claims, and an answer over the
// limit is refused before it is decoded.
func TestAPluginsAnswerIsItsOwnAndBounded(t *testing.T) {
	t.Parallel()
	var out lockedbuf.Buffer
	d, _ := launch(t, hostileplugin.ClaimsBuiltin, &out)
	l, err := d.Detect(context.Background(), response())
	if err != nil || l.Detector != "claims" {
		t.Fatalf("label %+v, err %v; want it under the plugin's own name, claims", l, err)
	}
	huge, _ := launch(t, hostileplugin.Huge+"-8388608", &out)
	if l, err := huge.Detect(context.Background(), response()); err == nil {
		t.Fatalf("an 8 MiB reason was accepted (%d bytes)", len(l.Reason))
	}
}

// A plugin started WithEnv sees that environment and nothing else of arbiter's: not the
// tokens arbiter holds. Without it, it sees arbiter's whole environment.
func TestAPluginSeesOnlyTheEnvironmentItIsGiven(t *testing.T) {
	t.Setenv("SNOOPED_TOKEN", "held-by-arbiter-1234")
	snoop := func(ctx context.Context) string {
		t.Helper()
		ctx = plugins.WithOutput(ctx, plugins.Output{W: &lockedbuf.Buffer{}})
		d, release, err := plugins.Launch(ctx, hostileplugin.Path(t, hostileplugin.Snoops))
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		l, err := d.Detect(context.Background(), response())
		if err != nil {
			t.Fatal(err)
		}
		return l.Reason
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := snoop(plugins.WithEnv(ctx, []string{"GRANTED_KEY=g-5678"})); got != "GRANTED_KEY=g-5678" {
		t.Errorf("a plugin given GRANTED_KEY alone sees %q", got)
	}
	if got := snoop(plugins.WithEnv(ctx, nil)); got != "none" {
		t.Errorf("a plugin given no environment sees %q", got)
	}
	if got := snoop(ctx); !strings.Contains(got, "SNOOPED_TOKEN=held-by-arbiter-1234") {
		t.Errorf("a plugin given nothing by its caller sees %q; want arbiter's environment", got)
	}
}
