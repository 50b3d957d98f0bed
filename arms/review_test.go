package arms

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// specWithEngineEnv is a valid two-arm spec whose engine block carries extra lines.
func specWithEngine(lines string) string {
	return strings.Replace(specWith(twoArms), "  preset: refserve\n", "  preset: refserve\n"+lines, 1)
}

func TestRedactedSourceEveryScalarStyle(t *testing.T) {
	src := specWithEngine(`  env:
    PRIVATE_KEY: |
      -----BEGIN PRIVATE KEY-----
      MIIEvQIBADANBgkqhkiG9w0BAQEFAASC
      -----END PRIVATE KEY-----

    DB_PASSWORD: "p\u00e9ssword1"   # escaped
    WRAPPED_TOKEN: "first-half
      second-half"
    FOLDED_TOKEN: >-
      k9x
    TAGGED_TOKEN: !!str q7z
    PLAIN_TOKEN: plain-first
      plain-second
    QUOTED_SECRET: 'it''s-mine'
    LOG_LEVEL: debug
`)
	s := mustParse(t, src)
	out := string(s.RedactedSource())
	for _, leak := range []string{"MIIEvQ", "BEGIN PRIVATE", "END PRIVATE", `p\u00e9ssword1`, "ssword1", "first-half", "second-half",
		"k9x", "q7z", "plain-first", "plain-second", "it''s-mine"} {
		if strings.Contains(out, leak) {
			t.Errorf("redacted source still holds %q:\n%s", leak, out)
		}
	}
	for _, kept := range []string{"# escaped", "LOG_LEVEL: debug", "!!str"} {
		if !strings.Contains(out, kept) {
			t.Errorf("redacted source lost %q:\n%s", kept, out)
		}
	}
	again, err := Parse("redacted.yaml", []byte(out))
	if err != nil {
		t.Fatalf("redacted source does not parse: %v\n%s", err, out)
	}
	for k, v := range again.Engine.Env {
		if LooksLikeCredential(k) && v != Redacted {
			t.Errorf("%s = %q after redaction", k, v)
		}
	}
	if again.Engine.Env["LOG_LEVEL"] != "debug" {
		t.Errorf("LOG_LEVEL = %q", again.Engine.Env["LOG_LEVEL"])
	}
}

func TestRedactedSourceAliasedCredential(t *testing.T) {
	src := specWith("arms:\n  control:   {env: {K: \"0\", X_TOKEN: &tk ab1}}\n  treatment: {env: {K: \"1\", X_TOKEN: *tk}}\n")
	out := string(mustParse(t, src).RedactedSource())
	if strings.Contains(out, "ab1") {
		t.Errorf("aliased credential kept:\n%s", out)
	}
	if _, err := Parse("redacted.yaml", []byte(out)); err != nil {
		t.Errorf("redacted source does not parse: %v\n%s", err, out)
	}
}

func TestRedactedSourceKeepsOtherOccurrencesValid(t *testing.T) {
	// The secret also appears as a plain value elsewhere; rewriting it there must not
	// turn a string into a YAML list.
	src := "version: 1\nname: t\nengine:\n  preset: refserve\n  env: {UPSTREAM_TOKEN: \"tok-abcdef\"}\n" +
		"  args: [--served-model-name, tok-abcdef]\nworkload: {sessions: 4, rounds: 2}\n" + twoArms
	out := string(mustParse(t, src).RedactedSource())
	if strings.Contains(out, "tok-abcdef") {
		t.Errorf("secret kept:\n%s", out)
	}
	again, err := Parse("redacted.yaml", []byte(out))
	if err != nil {
		t.Fatalf("redacted source does not parse: %v\n%s", err, out)
	}
	if !slices.Equal(again.Engine.Args, []string{"--served-model-name", Redacted}) {
		t.Errorf("args %q", again.Engine.Args)
	}
}

func TestRedactorHidesCredentialFlags(t *testing.T) {
	src := specWithEngine("  args: [--api-key, sk-live-0123456789, --hf-token=hf_abcdefghij, --port-offset, \"1\"]\n")
	src = strings.Replace(src, `{env: {BF16_INDEX_K: "1"}}`, `{env: {BF16_INDEX_K: "1"}, args: [--password, pw-9876543]}`, 1)
	src = strings.Replace(src, `{env: {BF16_INDEX_K: "0"}}`, `{env: {BF16_INDEX_K: "0"}, args: [--password, pw-1234567]}`, 1)
	s := mustParse(t, src)
	arms, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	r := s.Redactor(nil)
	cmd := r.Redact(strings.Join(arms[1].Command, " "))
	for _, leak := range []string{"sk-live-0123456789", "hf_abcdefghij", "pw-9876543"} {
		if strings.Contains(cmd, leak) {
			t.Errorf("command keeps %s: %s", leak, cmd)
		}
	}
	if !strings.Contains(cmd, "--hf-token=[redacted]") || !strings.Contains(cmd, "--port-offset 1") {
		t.Errorf("command %s", cmd)
	}
	out := string(s.RedactedSource())
	for _, leak := range []string{"sk-live-0123456789", "hf_abcdefghij", "pw-9876543", "pw-1234567"} {
		if strings.Contains(out, leak) {
			t.Errorf("redacted source keeps %s:\n%s", leak, out)
		}
	}
	again, err := Parse("redacted.yaml", []byte(out))
	if err != nil {
		t.Fatalf("redacted source does not parse: %v\n%s", err, out)
	}
	if want := []string{"--api-key", Redacted, "--hf-token=" + Redacted, "--port-offset", "1"}; !slices.Equal(again.Engine.Args, want) {
		t.Errorf("args %q, want %q", again.Engine.Args, want)
	}
}

func TestRedactArgs(t *testing.T) {
	in := []string{"sglang", "--token", "k9", "--api-key=ab", "--model", "m", "--auth-header", "a", "b", "--tp", "2", "--password="}
	want := []string{"sglang", "--token", Redacted, "--api-key=" + Redacted, "--model", "m", "--auth-header", Redacted, Redacted, "--tp", "2", "--password="}
	got := RedactArgs(in)
	if !slices.Equal(got, want) {
		t.Errorf("RedactArgs\n  %q\nwant\n  %q", got, want)
	}
	if in[2] != "k9" {
		t.Error("RedactArgs changed its input")
	}
}

// A credential's value that starts with - is still its value: hidden, and never quoted
// by the refusal of a command line the engine would read otherwise.
func TestCredentialValueThatLooksLikeAFlag(t *testing.T) {
	got := RedactArgs([]string{"--api-key", "-x7Gk2pQ", "--tp", "2"})
	if want := []string{"--api-key", Redacted, "--tp", "2"}; !slices.Equal(got, want) {
		t.Errorf("RedactArgs %q, want %q", got, want)
	}
	for _, preset := range []string{"sglang", "custom"} {
		src := "version: 1\nname: t\nengine: {preset: " + preset + ", command: [server], args: [--api-key, -x7Gk2pQ]}\n" +
			"arms:\n  a: {env: {K: \"0\"}}\n  b: {env: {K: \"1\"}}\nworkload: {sessions: 4, rounds: 2}\n"
		_, err := Parse("spec.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), "--api-key") || strings.Contains(err.Error(), "x7Gk2pQ") {
			t.Errorf("%s: err = %v, want a refusal naming --api-key and not its value", preset, err)
		}
	}
}

func TestLooksLikeCredentialNamesFromTheField(t *testing.T) {
	for _, n := range []string{"OPENAI_KEY", "PRIVATE_KEY", "HUGGING_FACE_HUB_KEY", "DB_PASS", "AUTHORIZATION", "GITHUB_PAT", "ssh_key", "GPG_PASSPHRASE"} {
		if !LooksLikeCredential(n) {
			t.Errorf("%s should look like a credential", n)
		}
	}
	for _, n := range []string{"BF16_INDEX_K", "MAX_TOKENS", "KEY_VALUE_CACHE", "KEY", "KV_CACHE_DTYPE", "PATH", "PASSTHROUGH", "PATTERN", "MONKEY", "KEYS_DIR"} {
		if LooksLikeCredential(n) {
			t.Errorf("%s should not look like a credential", n)
		}
	}
}

func TestRedactEnv(t *testing.T) {
	s := &Spec{Engine: Engine{Secrets: []string{"MY_VAR"}}}
	in := map[string]string{"API_TOKEN": "k9x", "BF16_INDEX_K": "1", "MY_VAR": "v", "DB_PASS": ""}
	got := s.RedactEnv(in)
	want := map[string]string{"API_TOKEN": Redacted, "BF16_INDEX_K": "1", "MY_VAR": Redacted, "DB_PASS": Redacted}
	if !maps.Equal(got, want) {
		t.Errorf("RedactEnv = %v, want %v", got, want)
	}
	if in["API_TOKEN"] != "k9x" {
		t.Error("RedactEnv changed its input")
	}
	if (*Spec)(nil).RedactEnv(nil) != nil {
		t.Error("nil env should stay nil")
	}
}

func TestPluginDetectorByPath(t *testing.T) {
	s := mustParse(t, specWith(twoArms+"detectors: [\"plugin:/opt/det/bin\", \"plugin:./det\", \"plugin:ok\", dsml-leak]\n"))
	if want := []string{"plugin:/opt/det/bin", "plugin:./det", "plugin:ok", "dsml-leak"}; !slices.Equal(s.Detectors, want) {
		t.Errorf("detectors %q", s.Detectors)
	}
	for _, bad := range []string{"plugin:", "plugin:bad name", "plugin:a\tb"} {
		_, err := Parse("spec.yaml", []byte(specWith(twoArms+fmt.Sprintf("detectors: [%q]\n", bad))))
		if err == nil || !strings.Contains(err.Error(), "unknown detector") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// factorsSpec writes n binary factors, each over its own env variable.
func factorsSpec(n int) string {
	var b strings.Builder
	b.WriteString("factors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  f%d: {env: V%d, levels: [\"0\", \"1\"]}\n", i, i)
	}
	return specWith(b.String())
}

func TestExpandCapsArms(t *testing.T) {
	s := mustParse(t, factorsSpec(8))
	if arms, err := s.Expand(); err != nil || len(arms) != 256 {
		t.Fatalf("8 factors: %d arms, %v", len(arms), err)
	}
	_, err := Parse("spec.yaml", []byte(factorsSpec(12)))
	if err == nil {
		t.Fatal("12 binary factors accepted")
	}
	es := Errors(err)
	if len(es) != 1 || !strings.Contains(es[0].Msg, "4096 arms") || !strings.Contains(es[0].Msg, "f0, f1") ||
		!strings.Contains(es[0].Msg, "256") || es[0].Line != 6 || es[0].Path != "factors" {
		t.Errorf("got %v", err)
	}
	// 62 binary factors overflow nothing and are refused as quickly.
	_, err = Parse("spec.yaml", []byte(factorsSpec(70)))
	if err == nil || !strings.Contains(err.Error(), "more than 256") {
		t.Errorf("70 factors: %v", err)
	}
}

func TestConfoundFlagOrder(t *testing.T) {
	src := specWith("arms:\n  control:   {args: [--a, \"1\", --enable-metrics]}\n  treatment: {args: [--enable-metrics, --a, \"1\"]}\n")
	_, err := Parse("spec.yaml", []byte(src))
	if !errors.Is(err, ErrConfounded) || !strings.Contains(err.Error(), "identical") {
		t.Errorf("flag order: %v", err)
	}
	// Repeating a flag: the last one wins, so order between the repeats matters.
	src = specWith("arms:\n  control:   {args: [--a, \"1\", --a, \"2\"]}\n  treatment: {args: [--a, \"2\", --a, \"1\"]}\n")
	if _, err := Parse("spec.yaml", []byte(src)); err != nil {
		t.Errorf("repeated flags in another order are different arms: %v", err)
	}
	src = specWith("factors:\n  x:\n    lo: {args: [--enable-metrics, --disable-radix-cache]}\n    hi: {args: [--disable-radix-cache, --enable-metrics]}\n")
	_, err = Parse("spec.yaml", []byte(src))
	if !errors.Is(err, ErrConfounded) || !strings.Contains(err.Error(), "set the same pins") {
		t.Errorf("levels in another flag order: %v", err)
	}
}

func TestSecretAndEnvClashPosition(t *testing.T) {
	src := specWithEngine("  env:\n    LOG: x\n    HF_TOKEN: abc\n  secrets: [HF_TOKEN]\n")
	_, err := Parse("spec.yaml", []byte(src))
	es := Errors(err)
	if len(es) != 1 || es[0].Line != 7 || es[0].Col != 5 || es[0].Path != "engine.env.HF_TOKEN" {
		t.Errorf("got %v", err)
	}
}

// BenchmarkExpandFactors measures the largest full factorial arbiter expands.
func BenchmarkExpandFactors(b *testing.B) {
	s, err := Parse("spec.yaml", []byte(factorsSpec(8)))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Expand(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSecretsSpecFileStoredWithoutSecrets(t *testing.T) {
	s, err := Load("../testdata/specs/valid-secrets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := string(s.RedactedSource())
	for _, leak := range []string{"sk-live-0123456789abcdef", "hf_abcdefghijklmnop", "MIIEvQ", "PRIVATE KEY-----", "ssword1",
		"first-half", "second-half", "k9x", "q7z", "Bearer", "it''s-mine"} {
		if strings.Contains(out, leak) {
			t.Errorf("stored spec holds %q:\n%s", leak, out)
		}
	}
	again, err := Parse("stored.yaml", []byte(out))
	if err != nil {
		t.Fatalf("stored spec does not parse: %v\n%s", err, out)
	}
	if !slices.Equal(again.Detectors, s.Detectors) || again.Engine.Env["LOG_LEVEL"] != "info" {
		t.Errorf("stored spec changed: detectors %q env %v", again.Detectors, again.Engine.Env)
	}
}

func TestTaggedBlockScalarValue(t *testing.T) {
	s := mustParse(t, specWithEngine("  env:\n    NOTE: !!str |\n      two\n      lines\n    X_TOKEN:\t!!str >-\n      zz\n"))
	if got := s.Engine.Env["NOTE"]; got != "two\nlines\n" {
		t.Errorf("NOTE = %q, want the block's text", got)
	}
	out := string(s.RedactedSource())
	if strings.Contains(out, "zz") || !strings.Contains(out, "      lines\n") {
		t.Errorf("redacted source:\n%s", out)
	}
}

// BenchmarkRedactedSourceOneLine measures a spec written as one line of flow YAML, the
// shape a generated spec takes; redaction must stay linear in its length.
func BenchmarkRedactedSourceOneLine(b *testing.B) {
	var env strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&env, "V%d: \"value-%d\", ", i, i)
	}
	src := "{version: 1, name: t, engine: {preset: refserve, env: {" + env.String() + "API_TOKEN: tok-123456}}, " +
		"workload: {sessions: 1, rounds: 1}, arms: {a: {env: {K: \"0\"}}, b: {env: {K: \"1\"}}}}\n"
	s, err := Parse("spec.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if bytes.Contains(s.RedactedSource(), []byte("tok-123456")) {
			b.Fatal("secret kept")
		}
	}
}
