package enginehttp

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestARedirectStaysOnTheEnginesHostAndPort(t *testing.T) {
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"AccessKeyId":"AKIAEXAMPLE"}`)
	}))
	defer elsewhere.Close()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/here", http.StatusFound)
		case "/here":
			io.WriteString(w, "ok")
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/latest/meta-data", http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	}))
	defer engine.Close()
	c := Client(0)
	resp, err := c.Get(engine.URL + "/moved")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("a redirect on the engine's own port: %q", b)
	}
	for _, path := range []string{"/away", "/loop"} {
		resp, err = c.Get(engine.URL + path)
		if !errors.Is(err, ErrRedirect) {
			if resp != nil {
				b, _ = io.ReadAll(resp.Body)
			}
			t.Errorf("%s: err = %v, body %q; want ErrRedirect", path, err, b)
		}
	}
}
