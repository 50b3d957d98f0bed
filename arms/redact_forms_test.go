package arms

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
)

// TestRedactionCoversTheDocumentedFormsOnly pins docs/spec.md's list (Secrets): the forms it
// says are covered are redacted, and the ones it says are not stay as they are. A change
// to either list changes this test and docs/spec.md together.
func TestRedactionCoversTheDocumentedFormsOnly(t *testing.T) {
	const secret = "hf_Secret12zK"
	r := newRedactor([]string{secret})
	b64 := base64.StdEncoding.EncodeToString([]byte(secret))
	hexed := hex.EncodeToString([]byte(secret))
	for _, form := range []string{
		secret, url.QueryEscape(secret), strings.ReplaceAll(secret, "S", "%53"), `hf_\u0053ecret12zK`, "hf_&#83;ecret12zK",
		b64, base64.URLEncoding.EncodeToString([]byte(secret)), strings.TrimRight(b64, "="), hexed, strings.ToUpper(hexed),
	} {
		if got := r.Redact("x " + form + " y"); strings.Contains(got, form) {
			t.Errorf("documented as covered, not redacted: %q -> %q", form, got)
		}
	}
	reversed := []rune(secret)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	for _, form := range []string{
		base32.StdEncoding.EncodeToString([]byte(secret)), string(reversed), strings.Join(strings.Split(secret, ""), " "),
		strings.ToUpper(secret), hexed[:len(hexed)-1] + strings.ToUpper(hexed[len(hexed)-1:]), hex.EncodeToString([]byte(b64)),
	} {
		if got := r.Redact("x " + form + " y"); got != "x "+form+" y" {
			t.Errorf("documented as not covered, but redacted (update docs/spec.md's Secrets): %q -> %q", form, got)
		}
	}
}
