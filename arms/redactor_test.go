package arms

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The decoders below are written independently of the Redactor: they read a whole
// text the way a person trying to recover a secret from a record would, undoing every
// escape and encoding they can find, and report whether the secret comes back.

var (
	percentRE  = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)
	unicodeRE  = regexp.MustCompile(`\\+[uU]([0-9A-Fa-f]{4})`)
	hexEscRE   = regexp.MustCompile(`\\+[xX]([0-9A-Fa-f]{2})`)
	slashEscRE = regexp.MustCompile(`\\+([/"'\\])`)
	base64RE   = regexp.MustCompile(`[A-Za-z0-9+/_-]{4,}={0,2}`)
	hexRunRE   = regexp.MustCompile(`[0-9A-Fa-f]{8,}`)
)

func percentDecode(s string) string {
	return percentRE.ReplaceAllStringFunc(s, func(m string) string {
		b, _ := hex.DecodeString(m[1:])
		return string(b)
	})
}

func jsUnescape(s string) string {
	s = unicodeRE.ReplaceAllStringFunc(s, func(m string) string {
		v, _ := strconv.ParseUint(m[len(m)-4:], 16, 32)
		return string(rune(v)) // a lone surrogate becomes U+FFFD; pairs are joined below
	})
	s = hexEscRE.ReplaceAllStringFunc(s, func(m string) string {
		v, _ := strconv.ParseUint(m[len(m)-2:], 16, 32)
		return string(rune(v))
	})
	return slashEscRE.ReplaceAllString(s, "$1")
}

// jsonUnescape decodes \u escapes with surrogate pairs the way a JSON decoder does.
func jsonUnescape(s string) string {
	var out string
	if json.Unmarshal([]byte(`"`+strings.ReplaceAll(s, `"`, `\"`)+`"`), &out) == nil {
		return out
	}
	return s
}

// decodings lists the texts a reader could get from s by undoing encodings, nested up to
// a few levels.
func decodings(s string) []string {
	seen := map[string]bool{}
	var out []string
	var walk func(s string, depth int)
	walk = func(s string, depth int) {
		if seen[s] || depth > 3 {
			return
		}
		seen[s] = true
		out = append(out, s)
		for _, d := range []string{percentDecode(s), percentDecode(strings.ReplaceAll(s, "+", " ")), jsUnescape(s), jsonUnescape(s), html.UnescapeString(s)} {
			walk(d, depth+1)
		}
		for _, run := range base64RE.FindAllString(s, -1) {
			for off := range 4 {
				if off >= len(run) {
					break
				}
				r := strings.TrimRight(run[off:], "=")
				if len(r)%4 == 1 {
					r = r[:len(r)-1]
				}
				for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
					b, _ := enc.DecodeString(r)
					if len(b) > 0 {
						out = append(out, string(b))
					}
				}
			}
		}
		for _, run := range hexRunRE.FindAllString(s, -1) {
			for off := range 2 {
				r := run[off:]
				b, _ := hex.DecodeString(r[:len(r)/2*2])
				out = append(out, string(b))
			}
		}
	}
	walk(s, 0)
	return out
}

func recoverable(text, secret string) bool {
	for _, d := range decodings(text) {
		if strings.Contains(d, secret) {
			return true
		}
	}
	return false
}

// encodedForms are the ways a log, a URL, a JSON document or a careless engine may write
// v: escaped in whole or in part, in either case, encoded once or twice, base64 and hex.
func encodedForms(v string) map[string]string {
	everyByte := func(upper bool) string {
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			if upper {
				fmt.Fprintf(&b, "%%%02X", v[i])
			} else {
				fmt.Fprintf(&b, "%%%02x", v[i])
			}
		}
		return b.String()
	}
	everyOther := func() string {
		var b strings.Builder
		for i, r := range v {
			if i%2 == 0 {
				for _, c := range []byte(string(r)) {
					fmt.Fprintf(&b, "%%%02X", c)
				}
			} else {
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	unicodeEsc := func(prefix string) string {
		var b strings.Builder
		for _, r := range v {
			if r > 0xFFFF {
				r1, r2 := utf16Hi(r), utf16Lo(r)
				fmt.Fprintf(&b, `%su%04x%su%04X`, prefix, r1, prefix, r2)
				continue
			}
			fmt.Fprintf(&b, `%su%04x`, prefix, r)
		}
		return b.String()
	}
	var htmlDec strings.Builder
	for _, r := range v {
		fmt.Fprintf(&htmlDec, "&#%d;", r)
	}
	jsonForm, _ := json.Marshal(v)
	jsonTwice, _ := json.Marshal(string(jsonForm))
	forms := map[string]string{
		"plain":               v,
		"percent upper":       everyByte(true),
		"percent lower":       everyByte(false),
		"percent partial":     everyOther(),
		"percent twice":       url.QueryEscape(url.QueryEscape(v)),
		"query":               url.QueryEscape(v),
		"path":                url.PathEscape(v),
		"json":                string(jsonForm[1 : len(jsonForm)-1]),
		"json in json":        string(jsonTwice[1 : len(jsonTwice)-1]),
		"unicode escapes":     unicodeEsc(`\`),
		"unicode in json":     unicodeEsc(`\\`),
		"html":                html.EscapeString(v),
		"html decimal":        htmlDec.String(),
		"slash escaped":       strings.ReplaceAll(v, "/", `\/`),
		"hex":                 hex.EncodeToString([]byte(v)),
		"hex upper":           strings.ToUpper(hex.EncodeToString([]byte(v))),
		"base64 of it alone":  base64.StdEncoding.EncodeToString([]byte(v)),
		"base64 raw url":      base64.RawURLEncoding.EncodeToString([]byte(v)),
		"base64 in a query":   url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(v))),
		"base64 with \\/":     strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte(v)), "/", `\/`),
		"base64 in an header": base64.StdEncoding.EncodeToString([]byte("user:" + v)),
	}
	for off := range 3 {
		blob := append([]byte("xyz"[:off]), v...)
		blob = append(blob, "tail-bytes"...)
		forms[fmt.Sprintf("base64 at offset %d", off)] = base64.StdEncoding.EncodeToString(blob)
		forms[fmt.Sprintf("base64url at offset %d", off)] = base64.URLEncoding.EncodeToString(blob)
	}
	return forms
}

func TestRedactorHidesEncodedForms(t *testing.T) {
	for _, secret := range []string{"hf_e2eSecretValue_9f3k", "p&ss/wörd+1 x?=", "sk-ant-😀-key<>\"'\\end", "abcd"} {
		r := newRedactor([]string{secret})
		for name, form := range encodedForms(secret) {
			text := `{"log":"token=` + form + `; next"}`
			if !recoverable(text, secret) {
				t.Fatalf("%q %s: the test's decoders cannot read the form they should (%s)", secret, name, form)
			}
			out := r.Redact(text)
			if recoverable(out, secret) {
				t.Errorf("%q %s: recoverable after redaction:\n  in  %s\n  out %s", secret, name, text, out)
			}
			if !strings.Contains(out, Redacted) {
				t.Errorf("%q %s: nothing redacted in %s", secret, name, text)
			}
		}
	}
}

func TestRedactorLeavesOtherTextAlone(t *testing.T) {
	r := newRedactor([]string{"hf_e2eSecretValue_9f3k"})
	for _, text := range []string{
		`data: {"choices":[{"delta":{"content":"<｜DSML｜invoke name=\"get_weather\">"}}]}`,
		`%68%66 \u0068\u0066_e2e hf_e2eSecret aGZfZTJlU2Vj &#104;&#102; %zz \u12 \x`,
		strings.Repeat(`\\\\"%25%`, 50),
	} {
		if got := r.Redact(text); got != text {
			t.Errorf("changed text without the secret:\n  %s\n  %s", text, got)
		}
	}
}

func TestRedactCutHidesASecretsStartAtTheEnd(t *testing.T) {
	r := newRedactor([]string{"hf_e2eSecretValue_9f3k"})
	for in, want := range map[string]string{
		"the token: hf_e2eSe":            "the token: [redacted]",
		"the token: %68%66%5F%65":        "the token: [redacted]",
		"the token: hf_":                 "the token: hf_", // too little to say
		"the token: hf_e2eSe and more":   "the token: hf_e2eSe and more",
		"hf_e2eSecretValue_9f3k and hf_": "[redacted] and hf_",
	} {
		if got := r.RedactCut(in); got != want {
			t.Errorf("RedactCut(%q) = %q, want %q", in, got, want)
		}
	}
	if got := r.Redact("the token: hf_e2eSe"); got != "the token: hf_e2eSe" {
		t.Errorf("Redact hid a partial secret in a whole text: %q", got)
	}
}

func TestBase64CoresCoverEveryAlignment(t *testing.T) {
	const v = "hf_e2eSecretValue_9f3k"
	cores := base64Cores(v)
	for off := range 3 {
		for _, pad := range []string{"", "a", "ab", "abc"} {
			blob := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("z", off) + v + pad))
			found := false
			for _, c := range cores {
				found = found || strings.Contains(blob, c)
			}
			if !found {
				t.Errorf("no core of %q in its encoding at offset %d with %q after: %s", v, off, pad, blob)
			}
		}
	}
}

// FuzzRedactorEncodedForms writes a secret escaped rune by rune in a mix chosen by the
// fuzzer (or encoded whole), between arbitrary texts, and checks that no decoder can read
// the secret back from the redacted text.
func FuzzRedactorEncodedForms(f *testing.F) {
	f.Add("hf_e2eSecretValue_9f3k", []byte{0, 1, 2, 3, 4, 5, 6, 7}, "token=", "; next")
	f.Add("p&ss/wörd+1 x?=", []byte{8, 3, 3, 1}, `{"a":"`, `"}`)
	f.Add("sk-😀-key<>\"'\\end", []byte{9, 2}, "", "")
	f.Add("abcdefgh", []byte{10, 1}, "xyz", "tail")
	f.Add("abcdefgh", []byte{11, 2}, "", "")
	f.Fuzz(func(t *testing.T, secret string, choices []byte, before, after string) {
		if !utf8.ValidString(secret) || strings.TrimSpace(secret) != secret || len(secret) < minSecretLen || len(secret) > 64 ||
			strings.Contains(Redacted, secret) || !utf8.ValidString(before+after) {
			return
		}
		for _, w := range commonWords {
			if strings.EqualFold(secret, w) {
				return
			}
		}
		form := encodeMix(secret, choices)
		text := before + form + after
		if !recoverable(text, secret) {
			return // a mix the test's decoders do not read
		}
		// What the surroundings and the replacement text could make of themselves is
		// not the redactor's to hide.
		if recoverable(before+Redacted+after, secret) || recoverable(before+after, secret) {
			return
		}
		out := newRedactor([]string{secret}).Redact(text)
		if recoverable(out, secret) {
			t.Fatalf("secret %q recoverable:\n  in  %q\n  out %q", secret, text, out)
		}
	})
}

// encodeMix writes s as the choices say: the first choice may pick a whole-text
// encoding; otherwise each rune is written as itself or escaped one of several ways.
func encodeMix(s string, choices []byte) string {
	pick := func(i int) byte {
		if len(choices) == 0 {
			return 0
		}
		return choices[i%len(choices)]
	}
	switch pick(0) % 16 {
	case 9:
		return base64.StdEncoding.EncodeToString([]byte(s))
	case 10:
		off := int(pick(1)) % 3
		return base64.URLEncoding.EncodeToString(append([]byte("abc"[:off]), s+"zz"...))
	case 11:
		return hex.EncodeToString([]byte(s))
	case 12:
		return url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(s)))
	}
	var b strings.Builder
	i := 1
	for _, r := range s {
		switch pick(i) % 8 {
		case 1:
			for _, c := range []byte(string(r)) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		case 2:
			for _, c := range []byte(string(r)) {
				fmt.Fprintf(&b, "%%25%02x", c)
			}
		case 3:
			if r > 0xFFFF {
				fmt.Fprintf(&b, `\u%04x\u%04x`, utf16Hi(r), utf16Lo(r))
			} else {
				fmt.Fprintf(&b, `\u%04X`, r)
			}
		case 4:
			if r <= 0xFFFF {
				fmt.Fprintf(&b, `\\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		case 5:
			fmt.Fprintf(&b, "&#%d;", r)
		case 6:
			fmt.Fprintf(&b, "&#x%x;", r)
		case 7:
			if r == '/' || r == '"' {
				b.WriteString(`\` + string(r))
			} else {
				b.WriteRune(r)
			}
		default:
			b.WriteRune(r)
		}
		i++
	}
	return b.String()
}
