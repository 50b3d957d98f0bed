package arms

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Redacted replaces a secret wherever arbiter writes text.
const Redacted = "[redacted]"

// minSecretLen is the shortest value a Redactor replaces: a 1-3 byte value ("0", "on")
// occurs everywhere, and replacing it would garble every record without protecting
// anything a guess could not recover anyway.
const minSecretLen = 4

// credentialEndings are the _-separated words that make a variable or flag name look
// like it holds a credential when the name ends with them: HF_TOKEN, --token,
// CLIENT_SECRET, DB_PASSWORD, BASIC_AUTH, --auth-header. Only the end of a name counts:
// a credential word in the middle names something else (--inter-token-delay is a
// duration, TOKENIZER_PATH and MY_CREDENTIAL_FILE are paths). TOKENS is left out on
// purpose: MAX_TOKENS and its kin count model tokens.
var credentialEndings = [][]string{
	{"TOKEN"}, {"SECRET"}, {"SECRETS"}, {"PASSWORD"}, {"PASSWD"}, {"PASSPHRASE"},
	{"CREDENTIAL"}, {"CREDENTIALS"}, {"AUTH"}, {"AUTHORIZATION"},
	{"AUTH", "HEADER"}, {"AUTHORIZATION", "HEADER"},
}

// credentialLastWords count only as the last word of a longer name: API_KEY,
// AWS_SECRET_ACCESS_KEY, OPENAI_KEY, PRIVATE_KEY, DB_PASS and GITHUB_PAT are
// credentials, while a lone KEY, PASS or PAT says too little to hide.
var credentialLastWords = []string{"KEY", "PASS", "PAT"}

// LooksLikeCredential reports whether a variable name suggests its value is a
// credential. The rule, on the name's _-separated words in any case: the name ends with
// TOKEN, SECRET(S), PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL(S), AUTH, AUTHORIZATION or
// AUTH(ORIZATION)_HEADER, or its last word of two or more is KEY, PASS or PAT. So
// HF_TOKEN, GITHUB_TOKEN, API_KEY, AWS_SECRET_ACCESS_KEY, CLIENT_SECRET and DB_PASS are
// credentials, and INTER_TOKEN_DELAY, TOKENIZER_PATH, MAX_TOKENS, BF16_INDEX_K and
// KEY_VALUE_CACHE are not.
//
// The trade-off: a name that matches by accident (CACHE_KEY, FUSION_PASS) has its value
// hidden in the stored spec and in every record that holds it, which can garble a
// record (and makes resume ask for the spec file); a secret whose name does not end like
// a credential (AWS_ACCESS_KEY_ID, MY_TOKEN_VALUE) is stored in clear. A secret with an
// unusual name belongs in engine.secrets, which hides it whatever its name.
func LooksLikeCredential(name string) bool {
	words := strings.Split(strings.ToUpper(name), "_")
	for _, end := range credentialEndings {
		if len(words) >= len(end) && slices.Equal(words[len(words)-len(end):], end) {
			return true
		}
	}
	return len(words) >= 2 && words[len(words)-2] != "" && slices.Contains(credentialLastWords, words[len(words)-1])
}

// looksLikeCredentialFlag applies LooksLikeCredential to a flag's name, dashes read as
// underscores: --api-key, --hf-token and --password=... are credential flags.
func looksLikeCredentialFlag(name string) bool {
	name = strings.TrimLeft(name, "-")
	return name != "" && LooksLikeCredential(strings.ReplaceAll(name, "-", "_"))
}

// credentialArgs walks a command line and calls secret for each argument that is the
// value of a credential flag (--api-key X, or every argument up to the next flag; the
// first is its value whatever it looks like, -X included) and keyed for each
// --flag=VALUE whose value is one, with the flag's name.
func credentialArgs(args []string, secret func(i int), keyed func(i int, name, value string)) {
	secretNext := false
	for i, a := range args {
		if i > 0 && secretNext && IsFlagToken(a) && looksLikeCredentialFlag(args[i-1]) {
			secret(i) // the credential's value, though it starts with -
			continue
		}
		if !IsFlagToken(a) {
			if secretNext {
				secret(i)
			}
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		cred := looksLikeCredentialFlag(name)
		secretNext = cred && !hasValue
		if cred && value != "" {
			keyed(i, name, value)
		}
	}
}

// RedactArgs returns a copy of a command line with the value of every credential flag
// (--api-key X, --hf-token=X, --password X; see LooksLikeCredential) replaced by
// [redacted], whatever its length; the flags themselves stay, so the command still
// reads as what was launched.
func RedactArgs(args []string) []string {
	if args == nil {
		return nil
	}
	out := slices.Clone(args)
	credentialArgs(args, func(i int) { out[i] = Redacted },
		func(i int, name, _ string) { out[i] = name + "=" + Redacted })
	return out
}

// RedactEnv returns a copy of env in which the value of every credential-named entry
// (see LooksLikeCredential) and of every variable listed in engine.secrets is
// [redacted], whatever its length: the form in which an arm's env may be stored or
// printed. A nil env stays nil.
func (s *Spec) RedactEnv(env map[string]string) map[string]string {
	if env == nil {
		return nil
	}
	out := maps.Clone(env)
	for k := range out {
		if LooksLikeCredential(k) || (s != nil && slices.Contains(s.Engine.Secrets, k)) {
			out[k] = Redacted
		}
	}
	return out
}

// Redactor collects the values to hide: every variable named in engine.secrets, as
// arbiter's environment holds it (environ is os.LookupEnv in production), every env
// value of the engine, an arm or a factor level whose name looks like a credential, and
// every value given to a credential flag in the engine's command or args or an arm's or
// level's args (--api-key X, --hf-token=X). Values shorter than 4 bytes, and true,
// false and null, are not replaced: they would match everywhere. RedactEnv and
// RedactArgs hide those where they are written. The Redactor finds each value in its
// escaped and encoded forms too (see Redactor).
func (s *Spec) Redactor(environ func(string) (string, bool)) *Redactor {
	var values []string
	if environ != nil {
		for _, name := range slices.Concat(s.Engine.Secrets, s.DetectorSecrets) {
			if v, ok := environ(name); ok {
				values = append(values, v)
			}
		}
	}
	for _, env := range s.allEnv() {
		for k, v := range env {
			if LooksLikeCredential(k) {
				values = append(values, v)
			}
		}
	}
	for _, args := range s.allArgs() {
		credentialArgs(args, func(i int) { values = append(values, args[i]) },
			func(_ int, _, value string) { values = append(values, value) })
	}
	return newRedactor(values)
}

// pinSets lists the engine's own settings and the pins of every arm and factor level.
func (s *Spec) pinSets() []Pins {
	out := []Pins{{Env: s.Engine.Env, Args: s.Engine.Args}}
	for _, a := range s.Arms {
		out = append(out, a.Pins)
	}
	for _, f := range s.Factors {
		for _, l := range f.Levels {
			out = append(out, l.Pins)
		}
	}
	return out
}

// allArgs lists every command line fragment in the spec.
func (s *Spec) allArgs() [][]string {
	out := [][]string{s.Engine.Command}
	for _, p := range s.pinSets() {
		out = append(out, p.Args)
	}
	return out
}

// commonWords are values a Redactor never replaces: they are no one's secret, and
// replacing them would garble every JSON record ("stream":true).
var commonWords = []string{"true", "false", "null", "yes", "no", "on", "off"}

// allEnv lists every env mapping in the spec.
func (s *Spec) allEnv() []map[string]string {
	var out []map[string]string
	for _, p := range s.pinSets() {
		out = append(out, p.Env)
	}
	return out
}

// LaunchEnv is the environment an arm's process gets, as sorted KEY=VALUE pairs: the
// arm's env plus every secret copied from arbiter's environment (environ is
// os.LookupEnv in production). A secret that is not set is an error that names it;
// no error ever carries a value.
func (a Arm) LaunchEnv(environ func(string) (string, bool)) ([]string, error) {
	env := maps.Clone(a.Env)
	if env == nil {
		env = map[string]string{}
	}
	secrets, missing := lookupAll(a.Secrets, environ)
	maps.Copy(env, secrets)
	if len(missing) > 0 {
		return nil, fmt.Errorf("secret %s not set in arbiter's environment (engine.secrets copies it from there)", strings.Join(missing, ", "))
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

// PluginEnv is the environment a detector plugin starts with: arbiter's own (environ, as
// os.Environ lists it), which is how a plugin is configured, without the variables whose
// names look like credentials (LooksLikeCredential) or that engine.secrets names, which
// are the engines' alone; then every variable detector_secrets names, read with lookup
// (os.LookupEnv in production). A detector secret that is not set is an error that names
// it; no error carries a value. A nil Spec (a command with no spec, arbiter classify)
// withholds the credentials and grants nothing.
func (s *Spec) PluginEnv(environ []string, lookup func(string) (string, bool)) ([]string, error) {
	var withheld, granted []string
	if s != nil {
		withheld, granted = s.Engine.Secrets, s.DetectorSecrets
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if LooksLikeCredential(name) || slices.Contains(withheld, name) || slices.Contains(granted, name) {
			continue
		}
		out = append(out, kv)
	}
	vals, missing := lookupAll(granted, lookup)
	for _, name := range granted {
		if v, ok := vals[name]; ok {
			out = append(out, name+"="+v)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("detector secret %s not set in arbiter's environment (detector_secrets copies it from there)", strings.Join(missing, ", "))
	}
	return out, nil
}

// lookupAll reads every name with lookup (os.LookupEnv in production; nil finds none):
// the values found, and the names not set, in order.
func lookupAll(names []string, lookup func(string) (string, bool)) (map[string]string, []string) {
	vals := map[string]string{}
	var missing []string
	for _, name := range names {
		v, ok := "", false
		if lookup != nil {
			v, ok = lookup(name)
		}
		if !ok {
			missing = append(missing, name)
			continue
		}
		vals[name] = v
	}
	return vals, missing
}

// RedactURL returns an address with what may carry a credential replaced by [redacted]:
// its userinfo (user:password@, or a token as the user), every query value (a bare query
// word too: it may be the key itself) and its fragment. It works on the text, so an
// address that does not parse as a URL is redacted as well; the scheme, host, port and
// path stay, so an error still says where arbiter looked.
func RedactURL(v string) string {
	rest, frag, hasFrag := strings.Cut(v, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	if i := strings.Index(rest, "://"); i >= 0 {
		auth := rest[i+3:]
		end := strings.IndexByte(auth, '/')
		if end < 0 {
			end = len(auth)
		}
		if at := strings.LastIndexByte(auth[:end], '@'); at >= 0 {
			rest = rest[:i+3] + Redacted + auth[at:]
		}
	} else if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		// No scheme ("user:pw@host:30000"): whatever precedes the last @ may be a credential.
		rest = Redacted + rest[at:]
	}
	if hasQuery {
		params := strings.Split(query, "&")
		for i, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok {
				params[i] = k + "=" + Redacted
			} else if p != "" {
				params[i] = Redacted
			}
		}
		rest += "?" + strings.Join(params, "&")
	}
	if hasFrag {
		rest += "#"
		if frag != "" {
			rest += Redacted
		}
	}
	return rest
}
