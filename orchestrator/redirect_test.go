package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/store"
)

// An engine that redirects its server info to another port (a stand-in for a cloud
// metadata service) gets nothing of that port's answer stored: the redirect is not
// followed, and the run records no server info.
func TestAServerInfoRedirectedElsewhereStoresNothingOfIt(t *testing.T) {
	t.Parallel()
	const credential = "AKIAREDIRECTEDSECRET"
	metadata := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"version":"`+credential+`","AccessKeyId":"`+credential+`"}`)
	}))
	defer metadata.Close()
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(string) *engine {
			e := newEngine(t, nil)
			e.serverInfoAt = metadata.URL + "/latest/meta-data/iam"
			return e
		})})
	// The refserve preset checks pins against the server info: an engine that redirects
	// it elsewhere has pins that cannot be checked, and is refused.
	if !errors.Is(err, ErrPinsUncheckable) {
		t.Errorf("result %+v, err %v; want its pins uncheckable", res, err)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	ro.Get(&n, `SELECT count(*) FROM runs WHERE server_info LIKE '%`+credential+`%'`)
	ro.Close()
	if n != 0 {
		t.Errorf("%d runs store the redirected answer as their server info", n)
	}
	for _, f := range []string{db, db + "-wal"} {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(credential)) {
			t.Errorf("%s holds the answer of the port the engine redirected to", filepath.Base(f))
		}
	}
}
