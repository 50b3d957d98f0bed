package arms

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:30000/v1":                "http://127.0.0.1:30000/v1",
		"http://u:pw@host:30000/v1":                "http://[redacted]@host:30000/v1",
		"https://ghp_TOKEN@host":                   "https://[redacted]@host",
		"http://host/v1?api_key=sk-SECRET&model=m": "http://host/v1?api_key=[redacted]&model=[redacted]",
		"http://host/?sk-SECRET":                   "http://host/?[redacted]",
		"http://host/#access_token=SECRET":         "http://host/#[redacted]",
		"http://a:b@host/p?k=v#f":                  "http://[redacted]@host/p?k=[redacted]#[redacted]",
		"http://u:p w@ho st%zz/?key=SECRET":        "http://[redacted]@ho st%zz/?key=[redacted]",
		"u:SECRET@host:30000":                      "[redacted]@host:30000",
		"http://host/path@not-userinfo":            "http://host/path@not-userinfo",
		"http://us@r:SECRET@host":                  "http://[redacted]@host",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestBaseURLErrorsShowNoCredential: a base_url refused for its credentials, its query,
// its scheme or its form is named in the error without the secret it carries.
func TestBaseURLErrorsShowNoCredential(t *testing.T) {
	src := specWith("arms:\n  control:   {env: {BF16_INDEX_K: \"0\"}, base_url: \"http://127.0.0.1:30000\"}\n" +
		"  treatment: {env: {BF16_INDEX_K: \"1\"}, base_url: \"BASE\"}\nruntime: {kind: external}\n")
	for base, want := range map[string]string{
		"http://127.0.0.1:30001/v1?api_key=sk-SECRET42": "no query",
		"http://tok-SECRET42@127.0.0.1:30001":           "no credentials",
		"http://user:SECRET42@127.0.0.1:30001":          "no credentials",
		"ftp://user:SECRET42@127.0.0.1:30001":           "want http://",
		"http://user:SECRET42@127.0.0.1:30001%zz/":      "not a URL",
		"http://127.0.0.1:30001/#token=SECRET42":        "no query or fragment",
		"http:///?key=SECRET42":                         "names no host",
	} {
		err := parseErr(t, strings.Replace(src, "BASE", base, 1))
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "SECRET42") {
			t.Errorf("base_url %q: %v; want %q, without the secret", base, err, want)
		}
	}
}
