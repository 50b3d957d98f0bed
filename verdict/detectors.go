package verdict

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/internal/inert"
	"github.com/arbiterlab/arbiter/store"
)

// DetectorHealth is how one detector fared over the launches that count: the responses
// it judged, those it failed on (an error, a crash, past timeouts.detector), and those it
// was not asked about once it had run past its time in a launch. A detector's failure is
// its own, never the engine's: the engines were timed by their answers.
type DetectorHealth struct {
	Detector string
	Judged   int
	Failed   int
	Skipped  int
	// Error is the first failure's words.
	Error string
}

// Unjudged is how many responses the detector gave no label to.
func (h DetectorHealth) Unjudged() int { return h.Failed + h.Skipped }

// loadDetectorHealth reads how each detector fared; nothing for experiments recorded
// before it was kept.
func (v *Verdict) loadDetectorHealth(ctx context.Context, db *sqlx.DB) error {
	runs, err := store.DetectorRuns(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	by := map[string]*DetectorHealth{}
	for _, r := range runs {
		h := by[r.Detector]
		if h == nil {
			h = &DetectorHealth{Detector: r.Detector}
			by[r.Detector] = h
		}
		h.Judged += r.Judged
		h.Failed += r.Failed
		h.Skipped += r.Skipped
		if h.Error == "" {
			h.Error = r.Error
		}
	}
	v.DetectorHealth = v.DetectorHealth[:0]
	for _, h := range by {
		v.DetectorHealth = append(v.DetectorHealth, *h)
	}
	sort.Slice(v.DetectorHealth, func(i, j int) bool { return v.DetectorHealth[i].Detector < v.DetectorHealth[j].Detector })
	return nil
}

// failingDetectors are the detectors that left responses unjudged.
func (v *Verdict) failingDetectors() []DetectorHealth {
	var out []DetectorHealth
	for _, h := range v.DetectorHealth {
		if h.Unjudged() > 0 {
			out = append(out, h)
		}
	}
	return out
}

// detectorCaveats says which detectors failed, and that the engines are not blamed for
// it; it reports whether it said anything of detector d.
func (v *Verdict) detectorCaveats(add func(CaveatKind, string, ...any)) map[string]bool {
	said := map[string]bool{}
	for _, h := range v.failingDetectors() {
		said[h.Detector] = true
		add(CaveatDetector, "Detector %s left %d of %d responses unjudged (%s): its failure, not the engines'; those responses count as clean for it, so its counts are a lower bound (`--fail-on detector` fails on this).",
			h.Detector, h.Unjudged(), h.Judged+h.Unjudged(), inert.Text(h.Error, 512))
	}
	return said
}

// detectorGate is --fail-on detector: any detector that left a response unjudged.
func (v *Verdict) detectorGate() (bool, string) {
	var bad []string
	for _, h := range v.failingDetectors() {
		bad = append(bad, fmt.Sprintf("%s left %d of %d responses unjudged (%s)", h.Detector, h.Unjudged(), h.Judged+h.Unjudged(), h.Error))
	}
	if len(bad) == 0 {
		return false, ""
	}
	return true, strings.Join(bad, "; ")
}

// detectorSummary is the JSON summary's "detectors": how each detector fared.
func (v *Verdict) detectorSummary() []map[string]any {
	out := []map[string]any{}
	for _, h := range v.DetectorHealth {
		out = append(out, map[string]any{"detector": h.Detector, "judged": h.Judged, "failed": h.Failed,
			"skipped": h.Skipped, "unjudged": h.Unjudged(), "error": h.Error})
	}
	return out
}

// mdText is text a detector wrote (a reason, an error) as one markdown table cell: inert,
// cut, and escaped so that it can neither break the table nor bold, link or embed
// anything.
func mdText(s string) string {
	if r := []rune(s); len(r) > 90 {
		s = string(r[:89]) + "…"
	}
	return inert.Markdown(s, 4<<10)
}

// detectorHealthSection is the markdown section of the detectors that failed; none when
// every detector judged every response.
func (b *markdownWriter) detectorHealthSection() {
	bad := b.failingDetectors()
	if len(bad) == 0 {
		return
	}
	fmt.Fprintf(b.b, "\n## Detectors that failed\n\nA detector that errs, crashes or runs past `timeouts.detector` leaves responses unjudged; the engines were timed by their answers, so this is the detector's failure, not theirs.\n\n")
	fmt.Fprintf(b.b, "| detector | judged | failed | not asked | first failure |\n|---|---:|---:|---:|---|\n")
	for _, h := range bad {
		fmt.Fprintf(b.b, "| %s | %d | %d | %d | %s |\n", mdText(h.Detector), h.Judged, h.Failed, h.Skipped, mdText(h.Error))
	}
}
