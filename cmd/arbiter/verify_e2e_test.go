package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// TestVendorVerifyExample runs examples/vendor-verify.yaml as a user does: 36 verifier
// requests to a reference and to an arm whose parser does not read the model's tool-call
// markup, 5 launches each. The reference's A/A is perfect (refserve is deterministic at
// temperature 0); the misparsed arm never makes a structured call, so its F1 is 0 and
// it fails, by the randomization test on launches at p = 1/126; its prompts count as
// the reference's, and it agrees on the finish reason only where neither called a tool
// (the 10 of 36 requests that ask for prose).
func TestVendorVerifyExample(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	db := filepath.Join(t.TempDir(), "results.db")
	out := filepath.Join(t.TempDir(), "verdict.md")
	// --fail-on verify fails CI on the arm that failed verification (exit 3).
	code, stdout, stderr := runCLI(t, "run", filepath.Join("..", "..", "examples", "vendor-verify.yaml"), "--db", db, "-o", out, "--fail-on", "verify")
	if code != exitGateFailed || !strings.Contains(stderr, "misparsed failed verification against reference") {
		t.Fatalf("arbiter run --fail-on verify exited %d; want %d naming misparsed\nstdout:\n%s\nstderr:\n%s", code, exitGateFailed, stdout, stderr)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	exp, err := store.LatestExperiment(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	v, err := verdict.Build(context.Background(), ro, exp.ID)
	if err != nil {
		t.Fatal(err)
	}
	vv := v.Verify
	if vv == nil || vv.Reference != "reference" || len(vv.Arms) != 2 {
		t.Fatalf("verify view %+v", vv)
	}
	ref, bad := vv.Arms[0], vv.Arms[1]
	if ref.Name != "reference" || bad.Name != "misparsed" {
		t.Fatalf("arms %s, %s", ref.Name, bad.Name)
	}
	// The reference: 4 launches after its first, 36 requests each, every score 1; 26 of
	// the 36 requests get a tool call (20 due, 4 forced, 2 later rounds).
	if p := ref.Pooled; len(ref.Launches) != 4 || p.Compared != 144 || p.F1() != 1 || p.SchemaAccuracy() != 1 ||
		p.TP != 4*26 || p.FinishAgreement() != 1 || p.PromptMatch() != 1 {
		t.Errorf("reference's A/A: %d launches, %+v", len(ref.Launches), p)
	}
	p := bad.Pooled
	if len(bad.Launches) != 5 || p.Compared != 180 || p.TP != 0 || p.FN != 5*26 || p.F1() != 0 || p.Calls != 0 {
		t.Errorf("misparsed: %d launches, %+v", len(bad.Launches), p)
	}
	if p.SameFinish != 5*10 || p.PromptMatch() != 1 {
		t.Errorf("misparsed: finish reason agrees on %d of %d, prompts match on %v", p.SameFinish, p.Compared, p.PromptMatch())
	}
	if bad.Decision != "FAIL" || !strings.Contains(bad.Why, "F1 0.00 against the reference's A/A 1.00: below its spread (randomization test on launches, two-sided p 0.008, level 0.025)") {
		t.Errorf("misparsed decision: %s, %s", bad.Decision, bad.Why)
	}
	// --json carries the same scores and decisions.
	code, stdout, _ = runCLI(t, "verdict", fmt.Sprint(exp.ID), "--db", db, "--json")
	var sum struct {
		Verify struct {
			Reference string
			Arms      []struct {
				Arm      string
				F1       *float64
				Schema   *float64 `json:"schema_accuracy"`
				Decision string
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil || code != 0 {
		t.Fatalf("verdict --json: exit %d, %v\n%s", code, err, stdout)
	}
	if a := sum.Verify.Arms; sum.Verify.Reference != "reference" || len(a) != 2 || a[1].Arm != "misparsed" || a[1].F1 == nil || *a[1].F1 != 0 ||
		a[1].Schema != nil || a[1].Decision != "FAIL" || a[0].Decision != "reference" {
		t.Errorf("verdict --json verify: %s", stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	if !strings.Contains(md, "Verification against reference FAILED for **misparsed** (tool-call F1 0.0%, schema accuracy –).") ||
		!strings.Contains(md, "| misparsed | 5 | 180 | 0.0% | – | 0.0% | – | – | 27.8% | 100.0% | **FAIL** |") {
		t.Errorf("verdict:\n%s", md)
	}
}
