package verdict

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/store"
)

// PinView is what one launch's engine reported about one pin once it was ready.
type PinView struct {
	Arm   string
	Block int
	store.PinCheck
}

// loadPins reads what every launch's engine reported about its pins (the orchestrator's
// attestation), launch by launch.
func (v *Verdict) loadPins(ctx context.Context, db *sqlx.DB) error {
	checks, err := store.PinChecks(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	for _, c := range checks {
		i := slices.IndexFunc(v.Runs, func(r RunFact) bool { return r.ID == c.RunID })
		if i < 0 || v.Runs[i].Superseded {
			continue
		}
		v.Pins = append(v.Pins, PinView{Arm: v.Runs[i].Arm, Block: v.Runs[i].Block, PinCheck: c})
	}
	return nil
}

// pinGroup is one pin's one outcome, with the arms whose launches had it.
type pinGroup struct {
	PinView
	arms []string
}

// groupPins groups the launches' pin checks of one status by pin, pinned value and
// reported value, in first-seen order.
func (v *Verdict) groupPins(status store.PinStatus) []pinGroup {
	var out []pinGroup
	for _, p := range v.Pins {
		if p.Status != status {
			continue
		}
		i := slices.IndexFunc(out, func(g pinGroup) bool { return g.Pin == p.Pin && g.Want == p.Want && g.Got == p.Got && g.Why == p.Why })
		if i < 0 {
			out = append(out, pinGroup{PinView: p})
			i = len(out) - 1
		}
		if !slices.Contains(out[i].arms, p.Arm) {
			out[i].arms = append(out[i].arms, p.Arm)
		}
	}
	return out
}

// Refused reports whether an engine reported a pin not in effect: nothing was judged.
func (v *Verdict) Refused() bool {
	return slices.ContainsFunc(v.Pins, func(p PinView) bool { return p.Status == store.PinNotInEffect })
}

// pinText writes a pin as set: OLLAMA_KV_CACHE_TYPE=q4_0, --page-size 64, --enable-x.
func pinText(pin, want string) string {
	switch {
	case !strings.HasPrefix(pin, "-"):
		return pin + "=" + want
	case want == "on":
		return pin
	}
	return pin + " " + want
}

// refusedHeadline says which pins the engines did not hold, what they reported instead
// and where, and that nothing was judged.
func (v *Verdict) refusedHeadline(mark string) string {
	groups := v.groupPins(store.PinNotInEffect)
	lead := "a pin did not take effect"
	if len(groups) > 1 {
		lead = "pins did not take effect"
	}
	s := []string{bold("Not judged: "+lead+".", mark)}
	for _, g := range groups {
		var line string
		switch {
		case g.Common:
			line = fmt.Sprintf("The engine's configuration sets `%s`, and the engines of %s reported `%s`", pinText(g.Pin, g.Want), armsWord(g.arms, mark), g.Got)
		case len(g.arms) == 1:
			line = fmt.Sprintf("Arm %s pinned `%s`, and its engine reported `%s`", bold(g.arms[0], mark), pinText(g.Pin, g.Want), g.Got)
		default:
			line = fmt.Sprintf("Arms %s pinned `%s`, and their engines reported `%s`", armsWord(g.arms, mark), pinText(g.Pin, g.Want), g.Got)
		}
		if g.Evidence != "" {
			line += fmt.Sprintf(" (%s: `%s`)", sourceWord(g.Source, len(g.arms) > 1), g.Evidence)
		}
		line += "."
		if g.Why != "" {
			line += " " + capitalize(g.Why) + "."
		}
		s = append(s, line)
	}
	s = append(s, "No traffic was sent: an A/B of these arms would compare settings that never took effect. Make the engine hold the pin (or drop it) and run again; `arbiter run` exits 5 for this.")
	return strings.Join(s, " ")
}

// armsWord names arms in bold: **a**, **b** and **c**.
func armsWord(names []string, mark string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = bold(n, mark)
	}
	return joinAnd(out)
}

// sourceWord names where a pin was read, for a sentence: "its log", "their server
// info".
func sourceWord(source string, plural bool) string {
	whose := "its "
	if plural {
		whose = "their "
	}
	switch {
	case strings.HasPrefix(source, "log"):
		return whose + "log"
	case strings.HasPrefix(source, "server_info"):
		return whose + "server info"
	case strings.HasPrefix(source, "metric"):
		return whose + "metrics"
	}
	return source
}

// unverifiedPins says, for the caveats, which pins no engine report could confirm.
func (v *Verdict) unverifiedPins() string {
	var parts []string
	for _, g := range v.groupPins(store.PinUnverified) {
		parts = append(parts, fmt.Sprintf("`%s` on %s (%s)", pinText(g.Pin, g.Want), joinAnd(g.arms), g.Why))
	}
	return strings.Join(parts, "; ")
}

// pinsSection lists what the engines reported about every pin, launch by launch.
func (v markdownWriter) pinsSection() {
	b := v.b
	if len(v.Pins) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Pins as the engines reported them\n\n")
	fmt.Fprintf(b, "Once each launch was ready, and before any traffic, arbiter read back what its engine reported about every pin (its server info, metrics or log, by the preset's rules and `engine.attest`). A pin reported otherwise stops the experiment; one nothing reports is unverified.\n\n")
	fmt.Fprintf(b, "| arm | launch | pin | reported | status | where |\n|---|---:|---|---|---|---|\n")
	for _, p := range v.Pins {
		got := p.Got
		if got == "" {
			got = "—"
		}
		status := strings.ReplaceAll(string(p.Status), "_", " ")
		where := p.Source
		switch {
		case p.Status == store.PinUnverified:
			where = p.Why
		case p.Evidence != "":
			where += ": `" + p.Evidence + "`"
		}
		name := pinText(p.Pin, p.Want)
		if p.Common {
			name += " (engine)"
		}
		fmt.Fprintf(b, "| %s | b%d | `%s` | %s | %s | %s |\n", p.Arm, p.Block, mdCell(name), mdCell(got), status, mdCell(where))
	}
}
