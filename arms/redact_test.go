package arms

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
)

func environ(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestLooksLikeCredential(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"HF_TOKEN", true}, {"TOKEN", true}, {"hf_token", true}, {"GITHUB_TOKEN", true}, {"API_KEY", true},
		{"AWS_SECRET_ACCESS_KEY", true}, {"OPENAI_API_KEY", true}, {"DB_PASSWORD", true}, {"PASSWORD", true},
		{"PASSWD", true}, {"CLIENT_SECRET", true}, {"GCP_CREDENTIALS", true}, {"AUTH", true},
		{"BASIC_AUTH_HEADER", true}, {"PROXY_AUTHORIZATION", true},
		// A credential word that is not the name's end names something else.
		{"INTER_TOKEN_DELAY", false}, {"TOKENIZER_PATH", false}, {"TOKENIZER", false}, {"MAX_TOKENS", false},
		{"MAX_TOKENS_PER_BATCH", false}, {"GH_TOKENS", false}, {"MY_CREDENTIAL_FILE", false}, {"TOKEN_FILE", false},
		{"SECRET_NAME", false}, {"AWS_ACCESS_KEY_ID", false}, {"BF16_INDEX_K", false}, {"AUTHOR", false},
		{"KEY", false}, {"API", false}, {"SECRETARY", false}, {"APIKEY", false}, {"ACCESS", false}, {"", false},
	} {
		if got := LooksLikeCredential(tc.name); got != tc.want {
			t.Errorf("LooksLikeCredential(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCredentialFlagsMatchAtTheEndOnly(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want bool
	}{
		{"--token", true}, {"--hf-token", true}, {"--api-key", true}, {"--password", true}, {"-token", true},
		{"--client-secret", true}, {"--auth-header", true},
		{"--inter-token-delay", false}, {"--max-tokens", false}, {"--tokenizer", false}, {"--tokenizer-path", false},
		{"--max-total-tokens", false}, {"--secret-env", false}, {"--key-value-cache", false}, {"--", false},
	} {
		if got := looksLikeCredentialFlag(tc.flag); got != tc.want {
			t.Errorf("looksLikeCredentialFlag(%q) = %v, want %v", tc.flag, got, tc.want)
		}
	}
	// The value of a duration flag whose name holds a credential word is kept, and is
	// not taken for a secret that would then be hidden wherever "20ms" is written.
	args := []string{"refserve", "--inter-token-delay", "20ms", "--max-tokens", "2048", "--hf-token", "hf_abcdefgh"}
	want := []string{"refserve", "--inter-token-delay", "20ms", "--max-tokens", "2048", "--hf-token", Redacted}
	if got := RedactArgs(args); !slices.Equal(got, want) {
		t.Errorf("RedactArgs = %q, want %q", got, want)
	}
	s := &Spec{Engine: Engine{Args: args}}
	if got := s.Redactor(nil).Redact(`{"inter_token_delay":"20ms","max_tokens":2048,"token":"hf_abcdefgh"}`); got != `{"inter_token_delay":"20ms","max_tokens":2048,"token":"[redacted]"}` {
		t.Errorf("server info redacted as %s", got)
	}
}

const secretSpec = `version: 1
name: t
engine:
  preset: sglang
  env: {WANDB_API_KEY: "wandb-0123456789", SHORT_TOKEN: "abc", LOG_LEVEL: "debug-verbose"}
  secrets: [HF_TOKEN, MISSING_TOKEN]
arms:
  control:   {env: {BF16_INDEX_K: "0", DB_PASSWORD: "hunter2-long"}}
  treatment: {env: {BF16_INDEX_K: "1", DB_PASSWORD: "hunter2-long"}}
workload: {sessions: 4, rounds: 2}
`

func TestRedactor(t *testing.T) {
	s := mustParse(t, secretSpec)
	r := s.Redactor(environ(map[string]string{"HF_TOKEN": "hf_abcdefgh", "PATH": "/usr/bin"}))
	in := "launch HF_TOKEN=hf_abcdefgh wandb=wandb-0123456789 pw=hunter2-long level=debug-verbose k=abc BF16_INDEX_K=1 path=/usr/bin"
	want := "launch HF_TOKEN=[redacted] wandb=[redacted] pw=[redacted] level=debug-verbose k=abc BF16_INDEX_K=1 path=/usr/bin"
	if got := r.Redact(in); got != want {
		t.Errorf("Redact\n  %s\nwant\n  %s", got, want)
	}
	if got := r.RedactBytes([]byte(in)); string(got) != want {
		t.Errorf("RedactBytes %s", got)
	}
	clean := []byte("nothing secret here")
	if got := r.RedactBytes(clean); &got[0] != &clean[0] {
		t.Error("RedactBytes copied a clean input")
	}
	var nilR *Redactor
	if nilR.Redact("x") != "x" || (&Redactor{}).Redact("hf_abcdefgh") != "hf_abcdefgh" {
		t.Error("empty redactor changed its input")
	}
}

func TestRedactorLongestFirst(t *testing.T) {
	r := newRedactor([]string{"abcd", "abcdefgh", "xy"})
	if got := r.Redact("abcdefgh abcd xy"); got != "[redacted] [redacted] xy" {
		t.Errorf("got %q", got)
	}
}

func TestRedactorConcurrent(t *testing.T) {
	s := mustParse(t, secretSpec)
	r := s.Redactor(environ(map[string]string{"HF_TOKEN": "hf_abcdefgh"}))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got := r.Redact("t=hf_abcdefgh"); got != "t=[redacted]" {
					t.Errorf("got %q", got)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestRedactedSource(t *testing.T) {
	s := mustParse(t, secretSpec)
	out := s.RedactedSource()
	for _, secret := range []string{"wandb-0123456789", "hunter2-long", `"abc"`} {
		if bytes.Contains(out, []byte(secret)) {
			t.Errorf("redacted source still holds %s:\n%s", secret, out)
		}
	}
	for _, kept := range []string{`BF16_INDEX_K: "1"`, `LOG_LEVEL: "debug-verbose"`, "secrets: [HF_TOKEN, MISSING_TOKEN]", `SHORT_TOKEN: "[redacted]"`} {
		if !bytes.Contains(out, []byte(kept)) {
			t.Errorf("redacted source lost %s:\n%s", kept, out)
		}
	}
	// The redacted text is still a valid spec with the same shape.
	again, err := Parse("redacted.yaml", out)
	if err != nil {
		t.Fatalf("redacted source does not parse: %v\n%s", err, out)
	}
	if again.Engine.Env["WANDB_API_KEY"] != Redacted || again.Arms[1].Pins.Env["BF16_INDEX_K"] != "1" {
		t.Errorf("reparsed %+v", again.Engine.Env)
	}
}

func TestRedactedSourceBlockStyle(t *testing.T) {
	src := strings.Replace(specWith(twoArms), "  preset: refserve\n", "  preset: refserve\n  env:\n    API_TOKEN: tok  # short, unquoted\n    HF_TOKEN: 'single-quoted-value'\n", 1)
	out := string(mustParse(t, src).RedactedSource())
	if strings.Contains(out, "tok ") || strings.Contains(out, "single-quoted-value") || !strings.Contains(out, "# short, unquoted") {
		t.Errorf("got:\n%s", out)
	}
}

func TestLaunchEnv(t *testing.T) {
	s := mustParse(t, secretSpec)
	arms, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	_, err = arms[0].LaunchEnv(environ(map[string]string{"HF_TOKEN": "hf_abcdefgh"}))
	if err == nil || !strings.Contains(err.Error(), "MISSING_TOKEN") || strings.Contains(err.Error(), "hf_abcdefgh") {
		t.Fatalf("missing secret: %v", err)
	}
	env, err := arms[1].LaunchEnv(environ(map[string]string{"HF_TOKEN": "hf_abcdefgh", "MISSING_TOKEN": "m-1234", "OTHER": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"BF16_INDEX_K=1", "DB_PASSWORD=hunter2-long", "HF_TOKEN=hf_abcdefgh", "LOG_LEVEL=debug-verbose",
		"MISSING_TOKEN=m-1234", "SHORT_TOKEN=abc", "WANDB_API_KEY=wandb-0123456789"}
	if !slices.Equal(env, want) {
		t.Errorf("env %q\nwant %q", env, want)
	}
}

// BenchmarkRedactBytes measures the cost the store pays on every raw response body.
func BenchmarkRedactBytes(b *testing.B) {
	s, err := Parse("spec.yaml", []byte(secretSpec))
	if err != nil {
		b.Fatal(err)
	}
	r := s.Redactor(environ(map[string]string{"HF_TOKEN": "hf_abcdefgh"}))
	body := bytes.Repeat([]byte(`data: {"choices":[{"delta":{"content":"<｜DSML｜invoke name=\"get_weather\">"}}]}`+"\n\n"), 200)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r.RedactBytes(body)
	}
}

func TestRedactedSourceKeepsBlockScalarsValid(t *testing.T) {
	src := strings.Replace(specWith(twoArms), "  preset: refserve\n", "  preset: refserve\n  env:\n    SERVICE_TOKEN: |\n      line-one-secret\n", 1)
	out := mustParse(t, src).RedactedSource()
	if bytes.Contains(out, []byte("line-one-secret")) {
		t.Errorf("block scalar secret kept:\n%s", out)
	}
	if _, err := Parse("redacted.yaml", out); err != nil {
		t.Errorf("redacted source no longer parses: %v\n%s", err, out)
	}
}

func TestRedactorHidesJSONEscapedSecrets(t *testing.T) {
	spec := &Spec{Engine: Engine{Env: map[string]string{"DB_PASSWORD": `p&ss<w>rd"9\x`}}}
	r := spec.Redactor(nil)
	b, _ := json.Marshal(map[string]string{"DB_PASSWORD": spec.Engine.Env["DB_PASSWORD"]})
	got := r.Redact(string(b))
	if got != `{"DB_PASSWORD":"[redacted]"}` {
		t.Errorf("redacted JSON = %s (from %s)", got, b)
	}
	if got := r.Redact(`p&ss<w>rd"9\x`); got != Redacted {
		t.Errorf("plain value: %q", got)
	}
}

// A detector plugin gets arbiter's environment without what looks like a credential or
// is an engine's secret, but with what detector_secrets grants it.
func TestPluginEnvWithholdsCredentialsButTheGranted(t *testing.T) {
	s := mustParse(t, `version: 1
name: p
engine: {preset: refserve, secrets: [ODDLY_NAMED]}
arms: {a: {env: {X: "1"}}, b: {env: {X: "2"}}}
workload: {kind: toolcall-agent, sessions: 4, rounds: 1}
detectors: [dsml-leak, plugin:judge]
detector_secrets: [JUDGE_API_KEY]
`)
	host := []string{"PATH=/usr/bin", "HF_TOKEN=hf_abcdefgh", "ODDLY_NAMED=o-1234", "JUDGE_API_KEY=j-5678", "JUDGE_MODE=strict", "AWS_SECRET_ACCESS_KEY=aws-9999"}
	lookup := environ(map[string]string{"JUDGE_API_KEY": "j-5678"})
	got, err := s.PluginEnv(host, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/usr/bin", "JUDGE_MODE=strict", "JUDGE_API_KEY=j-5678"}; !slices.Equal(got, want) {
		t.Errorf("plugin env %q, want %q", got, want)
	}
	// Its value is hidden wherever arbiter writes, as an engine secret's is.
	if r := s.Redactor(lookup).Redact("judge said j-5678"); r != "judge said [redacted]" {
		t.Errorf("a detector secret is not redacted: %q", r)
	}
	if _, err := s.PluginEnv(host, environ(nil)); err == nil || !strings.Contains(err.Error(), "detector secret JUDGE_API_KEY not set") || strings.Contains(err.Error(), "j-5678") {
		t.Errorf("a granted variable not set: %v", err)
	}
	// With no spec (arbiter classify), nothing is granted.
	got, _ = (*Spec)(nil).PluginEnv(host, nil)
	if want := []string{"PATH=/usr/bin", "ODDLY_NAMED=o-1234", "JUDGE_MODE=strict"}; !slices.Equal(got, want) {
		t.Errorf("plugin env with no spec %q, want %q", got, want)
	}
}

func TestDetectorSecretsAreCheckedWhereWritten(t *testing.T) {
	base := "version: 1\nname: p\nengine: {preset: refserve}\narms: {a: {env: {X: \"1\"}}, b: {env: {X: \"2\"}}}\nworkload: {kind: toolcall-agent, sessions: 4, rounds: 1}\n"
	for _, c := range []struct{ src, want string }{
		{"detector_secrets: [JUDGE_API_KEY]\n", "test.yaml:6:1: detector_secrets: detector_secrets hands variables to detector plugins, but detectors lists none"},
		{"detectors: [plugin:judge]\ndetector_secrets: [JUDGE_API_KEY, JUDGE_API_KEY]\n", "test.yaml:7:35: detector_secrets.1: detector secret JUDGE_API_KEY is listed twice"},
		{"detectors: [plugin:judge]\ndetector_secrets: [\"not a name\"]\n", "test.yaml:7:20: detector_secrets.0: \"not a name\" is not a variable name"},
	} {
		_, err := Parse("test.yaml", []byte(base+c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %s", c.src, err, c.want)
		}
	}
}
