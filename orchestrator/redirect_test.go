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
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
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

// An experiment refused for its pins stays refused: a resume launches nothing and says
// why, and the verdict says the experiment was refused.
func TestARefusedExperimentStaysRefusedAcrossResume(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	first, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			if arm == "treatment" {
				e.serverInfoAt = "http://127.0.0.1:1/elsewhere"
			}
			return e
		})})
	if !errors.Is(err, ErrPinsUncheckable) {
		t.Fatalf("first attempt: %v, %+v; want the treatment's pins uncheckable", err, first)
	}
	launched := 0
	_, err = Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Resume: first.ExperimentID,
		Runtime: engines(func(string) *engine { launched++; return newEngine(t, nil) })})
	if !errors.Is(err, ErrPinsNotHeld) || !strings.Contains(err.Error(), "was refused") || launched != 0 {
		t.Fatalf("resume: %v, %d launches; want it refused, launching nothing", err, launched)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	v, err := verdict.Build(context.Background(), ro, first.ExperimentID)
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	if err := v.Markdown(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "The experiment was refused") {
		t.Errorf("the verdict does not say the experiment was refused:\n%s", buf.String())
	}
}
