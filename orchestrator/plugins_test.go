package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/internal/testkit/hostileplugin"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// leakyTreatment runs the test spec with extra, its treatment's engine leaking markup in
// every answer, and returns the experiment's database.
func leakyTreatment(t *testing.T, extra string) (Result, string, error) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: testSpec(t, extra), DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			e.leak = arm == "treatment"
			return e
		})})
	return res, db, err
}

// readBack opens the database at path to read, closed with the test.
func readBack(t *testing.T, path string) *sqlx.DB {
	t.Helper()
	ro, err := store.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return ro
}

func TestAPluginCannotSpeakForABuiltinDetector(t *testing.T) {
	t.Parallel()
	plugin := hostileplugin.Path(t, hostileplugin.ClaimsBuiltin)
	res, db, err := leakyTreatment(t, "detectors: [dsml-leak, \"plugin:"+plugin+"\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	ro := readBack(t, db)
	var leaked, claims, turns, corruptedSessions int
	ro.Get(&turns, `SELECT count(*) FROM turns t JOIN arms a ON a.id = t.arm_id WHERE a.name = 'treatment'`)
	ro.Get(&leaked, `SELECT count(*) FROM labels l JOIN runs r ON r.id = l.run_id JOIN arms a ON a.id = r.arm_id
		WHERE a.name = 'treatment' AND l.detector = 'dsml-leak' AND l.corrupted = 1`)
	ro.Get(&claims, `SELECT count(*) FROM labels WHERE detector = 'claims'`)
	ro.Get(&corruptedSessions, `SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'treatment' AND s.corrupted = 1`)
	if turns == 0 || leaked != turns {
		t.Errorf("dsml-leak flagged %d of the treatment's %d turns; a plugin's labels changed the built-in's", leaked, turns)
	}
	if claims != 2*turns {
		t.Errorf("%d labels under the plugin's own name, want one per turn of both arms (%d)", claims, 2*turns)
	}
	if corruptedSessions != 6 {
		t.Errorf("%d treatment sessions corrupted, want 6 (%+v)", corruptedSessions, res)
	}
}

func TestAPluginNamedLikeABuiltinIsRefused(t *testing.T) {
	t.Parallel()
	plugin := hostileplugin.Path(t, hostileplugin.NamedBuiltin)
	_, _, err := leakyTreatment(t, "detectors: [dsml-leak, \"plugin:"+plugin+"\"]\n")
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("err = %v; want the built-in's name refused as reserved", err)
	}
}

// detectorRuns reads how each detector fared, by detector, summed over the launches.
func detectorRuns(t *testing.T, db string) map[string]store.DetectorRun {
	t.Helper()
	ro := readBack(t, db)
	rows, err := store.DetectorRuns(context.Background(), ro, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.DetectorRun{}
	for _, r := range rows {
		s := out[r.Detector]
		s.Detector, s.Judged, s.Failed, s.Skipped = r.Detector, s.Judged+r.Judged, s.Failed+r.Failed, s.Skipped+r.Skipped
		if s.Error == "" {
			s.Error = r.Error
		}
		out[r.Detector] = s
	}
	return out
}

// A detector that takes longer over each response than the stall allows the engine
// wedges nothing: the engine is timed by its answers, not by their labels.
func TestASlowDetectorWedgesNoEngine(t *testing.T) {
	t.Parallel()
	plugin := hostileplugin.Path(t, hostileplugin.Slow+"-3000")
	res, db, err := leakyTreatment(t, "detectors: [dsml-leak, \"plugin:"+plugin+"\"]\n"+
		"timeouts: {startup: 5s, request: 5s, stall: 2s}\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runs {
		if r.Status != store.RunDone {
			t.Errorf("run %s/b%d %s: %s", r.Arm, r.Block, r.Status, r.Err)
		}
	}
	turns := storedTurns(t, readBack(t, db))
	if h := detectorRuns(t, db)["hostile-slow"]; h.Judged != turns || h.Failed+h.Skipped != 0 {
		t.Errorf("the slow detector: %+v; want every one of the %d turns judged", h, turns)
	}
}

// storedTurns counts the turns the test experiment stored: every session's two rounds,
// unless a loaded machine timed a request out, which ends its session early (the
// errors are logged). The detectors' counts are checked against the store's.
func storedTurns(t *testing.T, ro *sqlx.DB) int {
	t.Helper()
	var turns int
	if err := ro.Get(&turns, `SELECT count(*) FROM turns`); err != nil || turns < 2*6 {
		t.Fatalf("%d turns stored (%v); want at least one a session", turns, err)
	}
	if turns != 2*6*2 {
		var errs []string
		ro.Select(&errs, `SELECT DISTINCT error FROM turns WHERE error IS NOT NULL`)
		t.Logf("%d turns stored, not %d: %q", turns, 2*6*2, errs)
	}
	return turns
}

// A detector that never answers is given up after timeouts.detector: the turns it did
// not judge are counted as its failure, and the engines are not blamed.
func TestAHungDetectorIsTheDetectorsFailure(t *testing.T) {
	t.Parallel()
	plugin := hostileplugin.Path(t, hostileplugin.Hangs)
	res, db, err := leakyTreatment(t, "detectors: [dsml-leak, \"plugin:"+plugin+"\"]\n"+
		"timeouts: {startup: 5s, request: 5s, stall: 2s, detector: 1s}\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runs {
		if r.Status != store.RunDone {
			t.Errorf("run %s/b%d %s: %s", r.Arm, r.Block, r.Status, r.Err)
		}
	}
	// Every stored turn is accounted for: judged by dsml-leak, failed or skipped by the
	// hung one. (A session whose request a loaded machine timed out ends with fewer
	// turns than its rounds: the count is the store's, not the plan's.)
	ro := readBack(t, db)
	turns := storedTurns(t, ro)
	runs := detectorRuns(t, db)
	h := runs["hostile-hangs"]
	if h.Judged != 0 || h.Failed == 0 || h.Failed+h.Skipped != turns || !strings.Contains(h.Error, "timeouts.detector") {
		t.Errorf("the hung detector: %+v; want the %d turns failed or skipped", h, turns)
	}
	if l := runs["dsml-leak"]; l.Judged != turns {
		t.Errorf("dsml-leak: %+v; want every one of the %d turns judged", l, turns)
	}
	v, err := verdict.Build(context.Background(), ro, res.ExperimentID)
	if err != nil {
		t.Fatal(err)
	}
	if fail, why := v.Gate("detector"); !fail || !strings.Contains(why, "timeouts.detector") {
		t.Errorf("--fail-on detector: %v, %q", fail, why)
	}
}

// A detector that crashes mid-run leaves the run done, the engines unblamed, and the
// verdict naming the detector, with a gate that fails on it.
func TestACrashedDetectorIsNamedAndGated(t *testing.T) {
	t.Parallel()
	plugin := hostileplugin.Path(t, hostileplugin.Crashes+"-3")
	res, db, err := leakyTreatment(t, "detectors: [dsml-leak, \"plugin:"+plugin+"\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runs {
		if r.Status != store.RunDone {
			t.Errorf("run %s/b%d %s: %s", r.Arm, r.Block, r.Status, r.Err)
		}
	}
	ro := readBack(t, db)
	v, err := verdict.Build(context.Background(), ro, res.ExperimentID)
	if err != nil {
		t.Fatal(err)
	}
	fail, why := v.Gate("detector")
	if !fail || !strings.Contains(why, "hostile-crashes") {
		t.Errorf("--fail-on detector: %v, %q; want it failed, naming the detector", fail, why)
	}
	if fail, _ := v.Gate("wedge"); fail {
		t.Error("--fail-on wedge fails: the engines were blamed for a detector's crash")
	}
	var buf strings.Builder
	if err := v.Markdown(&buf); err != nil {
		t.Fatal(err)
	}
	if md := buf.String(); !strings.Contains(md, "<summary>Detectors that failed</summary>") || !strings.Contains(md, "hostile-crashes") || !strings.Contains(md, "hostile-crashes") {
		t.Errorf("the verdict does not name the crashed detector:\n%s", md)
	}
	sum, ok := v.Summary()["detectors"].([]map[string]any)
	if !ok || len(sum) != 2 {
		t.Errorf("JSON detectors: %#v", v.Summary()["detectors"])
	}
}

// A detector plugin runs without the credentials in arbiter's environment, but for those
// detector_secrets grants it, whose values arbiter then hides wherever it writes them.
func TestAPluginGetsOnlyTheCredentialsItIsGranted(t *testing.T) {
	t.Setenv("HF_TOKEN", "hf-withheld-1234")
	t.Setenv("JUDGE_API_KEY", "judge-granted-5678")
	plugin := hostileplugin.Path(t, hostileplugin.Snoops)
	res, db, err := leakyTreatment(t, "detectors: [dsml-leak, \"plugin:"+plugin+"\"]\ndetector_secrets: [JUDGE_API_KEY]\n")
	if err != nil {
		t.Fatal(err)
	}
	ro := readBack(t, db)
	var reasons []string
	if err := ro.Select(&reasons, `SELECT DISTINCT reason FROM labels WHERE detector = 'hostile-snoops'`); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(reasons, []string{"JUDGE_API_KEY=[redacted]"}) {
		t.Errorf("the plugin saw %q; want the granted key alone, its value hidden (%+v)", reasons, res)
	}
	// A granted variable that is not set stops the experiment before anything runs.
	os.Unsetenv("JUDGE_API_KEY")
	if _, _, err := leakyTreatment(t, "detectors: [dsml-leak, \"plugin:"+plugin+"\"]\ndetector_secrets: [JUDGE_API_KEY]\n"); err == nil ||
		!strings.Contains(err.Error(), "detector secret JUDGE_API_KEY not set") {
		t.Errorf("a granted variable not set: %v", err)
	}
}
