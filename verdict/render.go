package verdict

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/inert"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/store"
)

// Files are the files WriteFiles may write for path: the markdown, then its charts
// (PATH-rates.svg, PATH-rounds.svg, PATH-wedges.svg, PATH-throughput.svg, PATH without its
// extension).
func Files(path string) []string {
	stem := strings.TrimSuffix(path, filepath.Ext(path))
	files := []string{path}
	for _, s := range chartSuffixes {
		files = append(files, stem+s)
	}
	return files
}

// WriteFiles writes the markdown verdict to path and its SVG charts beside it (Files),
// each atomically through keep, which also keeps the experiment's own spec; when keep
// refuses any of them, nothing is written.
func (v *Verdict) WriteFiles(path string, keep outfile.Guard) error {
	keep.Specs = append(slices.Clip(keep.Specs), v.Experiment.SpecPath)
	for _, f := range Files(path) {
		if err := keep.Check(f); err != nil {
			return err
		}
	}
	charts, err := v.writeCharts(strings.TrimSuffix(path, filepath.Ext(path)), keep)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := v.markdown(&buf, charts); err != nil {
		return err
	}
	return keep.Write(path, buf.Bytes())
}

// Command is an arbiter command line the verdict suggests, naming its database: words
// are what follows "arbiter", e.g. "verdict 3".
func Command(words, db string) string {
	if db == "" {
		return "arbiter " + words
	}
	return "arbiter " + words + " --db " + shellWord(db)
}

// shellWord quotes s for a POSIX shell where it needs quoting.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@+,%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// footer is a verdict's last line; Complete looks for it.
func footer(id int64, db string) string {
	return fmt.Sprintf("\n---\nQuery the raw data with `%s`; re-judge with `%s`.\n",
		Command(fmt.Sprintf("query \"SELECT ... FROM turns WHERE experiment_id = %d\"", id), db), Command(fmt.Sprintf("verdict %d", id), db))
}

// Complete reports whether md is the whole markdown verdict of experiment id, as every
// arbiter has written it: its title first, its footer last. A file cut short (an arbiter
// killed while writing, a full disk) is not.
func Complete(md []byte, id int64) bool {
	i := bytes.LastIndex(md, []byte("\n---\n"))
	if !bytes.HasPrefix(md, []byte("# Verdict: ")) || i < 0 {
		return false
	}
	// The footer names the database as the run that wrote it was given it.
	last := string(md[i:])
	head := footer(id, "")
	head = head[:strings.Index(head, "`;")]
	return strings.HasPrefix(last, head) && strings.HasSuffix(last, "`.\n") && strings.Count(last, "\n") == 3 &&
		strings.Contains(last, fmt.Sprintf("re-judge with `arbiter verdict %d", id))
}

// Markdown writes the verdict without charts (WriteFiles writes it with them).
func (v *Verdict) Markdown(w io.Writer) error { return v.markdown(w, nil) }

// markdownWriter is the markdown writer of a verdict: it reads the model (the judged
// Verdict) and writes its sections; it decides nothing.
type markdownWriter struct {
	*Verdict
	b *strings.Builder
}

func (v *Verdict) markdown(w io.Writer, charts []chartRef) error {
	return markdownWriter{Verdict: v, b: &strings.Builder{}}.write(w, charts)
}

func (v markdownWriter) write(w io.Writer, charts []chartRef) error {
	e := v.Experiment
	b := v.b
	fmt.Fprintf(b, "# Verdict: %s (experiment %d)\n\n", e.Name, e.ID)
	fmt.Fprintf(b, "%s\n", v.headline("**"))
	if v.Refused() {
		// Nothing was judged: what the engines reported, what was asked of them, and
		// how their launches ended, folded below the headline.
		first := b.Len()
		v.pinsSection()
		v.comparedSection()
		v.runsSection()
		if u := v.unverifiedPins(); u != "" {
			fmt.Fprintf(b, "\n## Caveats\n\n- Pins not verified: no report of the engines confirmed %s.\n", u)
		}
		v.fold(first)
		b.WriteString(footer(e.ID, v.DB))
		_, err := io.WriteString(w, b.String())
		return err
	}

	// One screen first: the decision and its evidence, the claims that were decided and
	// what would decide the rest. Everything after it is folded, each section in a
	// <details> block that GitHub and GitLab render closed.
	v.claimsSection()
	v.verifySection()
	first := b.Len()
	v.caveatsSection()
	v.claimsMethodSection()

	fmt.Fprintf(b, "\n## Results by arm\n\n")
	fmt.Fprintf(b, "| arm | analysed | corrupted | rate | 95%% CI (Wilson) | 95%% CI (exact) | lost | corrupted, then lost |\n|---|---:|---:|---:|---|---|---:|---:|\n")
	for _, a := range v.Arms {
		lost := fmt.Sprintf("%d of %d", a.Lost, a.Planned)
		if len(a.Problems) > 0 {
			lost += " ⚠"
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s | %s | %d |\n", a.Name, a.Sessions, a.Corrupted, pct(a.Rate),
			ci(a.Wilson.Lo, a.Wilson.Hi), ci(a.Exact.Lo, a.Exact.Hi), lost, a.CorruptedThenLost)
	}
	// An abort-cascade experiment's own outcome comes first: how often each arm wedged.
	for _, kind := range []string{"wedges", "rates"} {
		for _, c := range charts {
			if c.kind == kind {
				fmt.Fprintf(b, "\n![%s](%s)\n", c.title, c.file)
			}
		}
	}

	v.comparedSection()
	v.pinsSection()

	if len(v.Arms) > 1 {
		fmt.Fprintf(b, "\n## Against the baseline (%s)\n\n", v.Arms[v.Baseline].Name)
		fmt.Fprintf(b, "Each arm's launches are compared with %s's: every launch counts once, with its share of corrupted sessions, and the randomization test on the launches decides, at the claim's share of alpha (the claims above). The sessions' own difference, interval and Fisher p describe these launches only: they would call a difference between two launches a finding.\n\n", v.Arms[v.Baseline].Name)
		fmt.Fprintf(b, "| arm | launches | difference | 95%% CI (sessions, Newcombe) | Fisher p (sessions) | launch p | tested at | decision |\n|---|---:|---:|---|---:|---:|---:|---|\n")
		for i, a := range v.Arms {
			c := a.Compare
			if i == v.Baseline {
				continue
			}
			if c == nil {
				fmt.Fprintf(b, "| %s | – | – | – | – | – | – | no comparison: no analysed session |\n", a.Name)
				continue
			}
			launches, lp, level := "–", "–", "–"
			if lc := c.Launch; lc != nil {
				launches = fmt.Sprintf("%d vs %d", lc.LaunchesArm, lc.LaunchesBase)
				level = levelText(lc.Level)
				lp = "not testable"
				if lc.Testable {
					lp = pval(lc.P)
				}
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", a.Name, launches, points(c.Difference),
				pointsInterval(c.DiffCI.Lo, c.DiffCI.Hi), pval(c.FisherP), lp, level, v.decision(a))
		}
		// The legend explains the words the table used, and no other.
		used := map[string]bool{}
		for i, a := range v.Arms {
			if i != v.Baseline && a.Compare != nil {
				used[v.decision(a)] = true
			}
		}
		var legend []string
		for _, l := range []struct{ word, means string }{
			{"~", "no difference between the arms' launches shown"},
			{"not attributable", "too few launches per arm for the test to reach its level at all"},
			{"inconclusive", "the arm crashed, wedged or lost too many sessions, so what survived is not a fair sample"},
			{"not compared", "the baseline crashed, wedged or lost too many sessions, so it has no fair sample to compare with"},
		} {
			if used[l.word] {
				legend = append(legend, fmt.Sprintf("%s: %s", map[bool]string{true: "`~`", false: l.word}[l.word == "~"], l.means))
			}
		}
		if len(legend) > 0 {
			fmt.Fprintf(b, "\n%s.\n", capitalize(strings.Join(legend, "; ")))
		}
	}

	v.designSections()

	if len(v.Rounds) > 0 {
		fmt.Fprintf(b, "\n## Corruption by round\n\nCorrupted sessions in each round, of the sessions that reached it. Rounds count from 0, as `turns.round` does in the database.\n\n")
		v.armColumns("round", "---:", "")
		for _, r := range v.Rounds {
			fmt.Fprintf(b, "| %d |", r.Round)
			for i := range v.Arms {
				fmt.Fprintf(b, " %d/%d |", r.Corrupted[i], r.Sessions[i])
			}
			fmt.Fprintf(b, "\n")
		}
		for _, c := range charts {
			if c.kind == "rounds" {
				fmt.Fprintf(b, "\n![%s](%s)\n", c.title, c.file)
			}
		}
	}

	if len(v.Detectors) > 0 {
		fmt.Fprintf(b, "\n## Corruption by detector\n\nSessions with at least one flagged response (flagged responses in brackets).\n\n")
		v.armColumns("detector", "---", "example")
		for _, d := range v.Detectors {
			fmt.Fprintf(b, "| %s |", d.Detector)
			for i := range v.Arms {
				fmt.Fprintf(b, " %d (%d) |", d.Sessions[i], d.Turns[i])
			}
			fmt.Fprintf(b, " %s |\n", mdText(d.Example))
		}
	}

	v.detectorHealthSection()
	v.divergenceSection()

	if rv := v.Responses; rv != nil && rv.Available {
		fmt.Fprintf(b, "\n## Why sessions, not responses\n\n")
		fmt.Fprintf(b, "Counted as independent responses (%d of %d against %d of %d), the same data would give Fisher p %s. ",
			rv.Corrupted[1], rv.Responses[1], rv.Corrupted[0], rv.Responses[0], pEq(rv.FisherP))
		if rv.Clustered {
			fmt.Fprintf(b, "But the responses of a session are correlated (intra-session correlation %.2f, design effect %.2f): ", rv.ICC, rv.DesignEffect)
			fmt.Fprintf(b, "adjusted for that clustering (Donner's adjusted chi-square), p %s. Responses are not independent evidence; the session-level test above is the honest one.\n", pEq(rv.DonnerP))
		} else {
			fmt.Fprintf(b, "Here the responses of a session were barely correlated (intra-session correlation %.2f, design effect %.2f; Donner's adjusted chi-square p %s), so the two views agree; the session remains the unit the spec declared.\n", rv.ICC, rv.DesignEffect, pEq(rv.DonnerP))
		}
	}

	if !v.outcomeSections(charts) {
		fmt.Fprintf(b, "\n## Latency and throughput\n\nOver completed responses; tokens per second are per request, after the first token.\n\n")
		fmt.Fprintf(b, "| arm | responses | failed | TTFT p50 | TTFT p95 | end-to-end p50 | end-to-end p95 | tok/s p50 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, a := range v.Arms {
			tps := "–"
			if !math.IsNaN(a.TokensPerSecond) {
				tps = fmt.Sprintf("%.0f", a.TokensPerSecond)
			}
			fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s | %s | %s |\n", a.Name, a.Turns, a.FailedTurns,
				ms(a.TTFTp50), ms(a.TTFTp95), ms(a.Latencyp50), ms(a.Latencyp95), tps)
		}
	}

	v.conditionsSection()

	v.runsSection()
	v.fold(first)
	b.WriteString(footer(e.ID, v.DB))
	_, err := io.WriteString(w, b.String())
	return err
}

// launchTable compares, when any launch crashed, wedged or failed, how the arms'
// launches ended: a crash or a wedge is an outcome in itself.
func (v markdownWriter) launchTable() {
	b := v.b
	bad := false
	for _, a := range v.Arms {
		bad = bad || a.Launches.Faulted()+a.Launches.Failed > 0
	}
	if !bad {
		return
	}
	base := v.Arms[v.Baseline]
	fmt.Fprintf(b, "A crash, a wedge, an engine that keeps failing requests or lets them time out is an outcome in itself: each arm's faulted launches against %s's, by Fisher's exact test on launches (launches a user interrupted are left out).\n\n", base.Name)
	fmt.Fprintf(b, "| arm | launches | done | crashed | wedged | erroring | timed out | failed to start | Fisher p (faulted) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range v.Arms {
		p := "–"
		if c := a.Compare; c != nil && !math.IsNaN(c.Faults.FisherP) {
			p = pval(c.Faults.FisherP)
			if c.Faults.Launches+c.Faults.BaseLaunches <= 2 {
				p += " (one launch each cannot show a difference)"
			}
		}
		l := a.Launches
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %d | %d | %s |\n", a.Name, l.Total, l.Done, l.Crashed, l.Wedged, l.Erroring, l.TimedOut, l.Failed, p)
	}
	fmt.Fprintf(b, "\n")
}

func dash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// mdCell makes text safe for one markdown table cell.
func mdCell(s string) string {
	s = inert.Text(s, 4<<10) // no escape sequence or control character reaches a reader
	s = strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "`", "'").Replace(s)
	if r := []rune(s); len(r) > 90 {
		s = string(r[:89]) + "…"
	}
	return s
}

// launchSpecific are server settings that differ between any two launches (the port
// each was given), so comparing them says nothing about the arms.
var launchSpecific = map[string]bool{"port": true, "pid": true, "start_time": true}

// infoValue prints one server setting; nested values as compact JSON.
func infoValue(x any) string {
	switch x.(type) {
	case map[string]any, []any:
		b, err := json.Marshal(x)
		if err == nil {
			return string(b)
		}
	case nil:
		return "–"
	}
	return fmt.Sprint(x)
}

// flattenInfo writes the settings of info into out under dotted names, objects opened
// down to their leaves; lists stay whole.
func flattenInfo(prefix string, info map[string]any, out map[string]any) {
	for k, x := range info {
		name := prefix + k
		if m, ok := x.(map[string]any); ok && len(m) > 0 {
			flattenInfo(name+".", m, out)
			continue
		}
		out[name] = x
	}
}

// serverFacts lists the server settings that differed between runs, which is where a
// reader checks that the arms really ran as pinned.
func (v *Verdict) serverFacts() string {
	// Nested settings are compared leaf by leaf (refserve_faults.mass_abort_wedge), so
	// that the column of a differing one shows what differed, not the first characters
	// of a whole object.
	infos := make([]map[string]any, len(v.Runs))
	keys := map[string]bool{}
	for i, r := range v.Runs {
		if r.ServerInfo == nil {
			continue
		}
		infos[i] = map[string]any{}
		flattenInfo("", r.ServerInfo, infos[i])
		for k := range infos[i] {
			keys[k] = true
		}
	}
	if len(keys) == 0 {
		return ""
	}
	var differing, same []string
	for k := range keys {
		if launchSpecific[k] {
			continue
		}
		vals := map[string]bool{}
		for _, info := range infos {
			if info != nil { // a launch that never answered reported nothing
				vals[infoValue(info[k])] = true
			}
		}
		if len(vals) > 1 {
			differing = append(differing, k)
		} else {
			same = append(same, k)
		}
	}
	sort.Strings(differing)
	sort.Strings(same)
	b := &strings.Builder{}
	fmt.Fprintf(b, "Server settings reported by the engines (`get_server_info`): %d identical across runs", len(same))
	if len(differing) == 0 {
		fmt.Fprintf(b, ", none differing.\n")
		return b.String()
	}
	fmt.Fprintf(b, "; these differed:\n\n| run | %s |\n|---|%s\n", strings.Join(differing, " | "), strings.Repeat("---|", len(differing)))
	for i, r := range v.Runs {
		if infos[i] == nil {
			continue
		}
		fmt.Fprintf(b, "| %s |", store.LaunchName(r.Arm, r.Block))
		for _, k := range differing {
			fmt.Fprintf(b, " %s |", mdCell(infoValue(infos[i][k])))
		}
		fmt.Fprintf(b, "\n")
	}
	return b.String()
}

// comparedSection says what the experiment compared: the spec, its design and the arms' pins.
func (v markdownWriter) comparedSection() {
	b := v.b
	e := v.Experiment
	fmt.Fprintf(b, "\n## What was compared\n\n")
	fmt.Fprintf(b, "- Spec: `%s`; status **%s**; started %s", e.SpecPath, e.State(), When(e.CreatedAt))
	if e.FinishedAt.Valid {
		fmt.Fprintf(b, ", finished %s (%s)", When(e.FinishedAt.String), span(elapsed(e.CreatedAt, e.FinishedAt.String)))
	}
	fmt.Fprintf(b, ".\n")
	if v.Design.Runtime == string(arms.RuntimeExternal) {
		fmt.Fprintf(b, "%s", v.externalNote())
	}
	if v.Design.AA {
		fmt.Fprintf(b, "- An A/A check: every arm runs the same pins, so a significant difference is the pipeline's (load, placement, detectors, the engine's own nondeterminism), not the pins'.\n")
	} else {
		fmt.Fprintf(b, "- Arms differ only in their pins; everything else in the engine's command and environment was identical.\n")
	}
	fmt.Fprintf(b, "- Unit of analysis: **%s**; a session counts as corrupted when any detector flagged any of its responses. Baseline: **%s**; alpha = %g, two-sided.\n", v.Unit, v.Arms[v.Baseline].Name, v.Alpha)
	fmt.Fprintf(b, "- A session is analysed when it finished every round; lost sessions are counted beside the analysis. An arm whose engine crashed or wedged, or that lost more than %s of its sessions (`analysis.max_loss`), gets no corruption decision: it is inconclusive; when that arm is the baseline, the others are not compared with it.\n", pct(v.MaxLoss))
	fmt.Fprintf(b, "- Workload seed %d: every arm received the same sessions", e.Seed)
	if d := v.Design; d.Workload != "" {
		fmt.Fprintf(b, " (%s; %d sessions per arm and block; %d block%s)", d.Workload, d.Sessions, d.Blocks, plural(d.Blocks))
	} else if d.Sessions > 0 {
		fmt.Fprintf(b, " (%d sessions x %d rounds per arm and block, %d at once; %d block%s)", d.Sessions, d.Rounds, d.Concurrency, d.Blocks, plural(d.Blocks))
	}
	fmt.Fprintf(b, ".\n")
	if e.Error.Valid {
		fmt.Fprintf(b, "- The experiment ended with an error: %s\n", strings.ReplaceAll(e.Error.String, "\n", "; "))
	}
	fmt.Fprintf(b, "\n| arm | pins |\n|---|---|\n")
	for _, a := range v.Arms {
		fmt.Fprintf(b, "| %s | `%s` |\n", a.Name, a.Pins)
	}

}

// runsSection lists every launch: where it ran, how it ended, and what its engine said.
func (v markdownWriter) runsSection() {
	b := v.b
	fmt.Fprintf(b, "\n## Runs\n\n")
	v.launchTable()
	if len(v.nodes()) > 0 {
		fmt.Fprintf(b, "| arm | block | slot | instance | status | startup | duration | exit | note |\n|---|---:|---|---|---|---:|---:|---:|---|\n")
		for _, r := range v.Runs {
			fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.Arm, r.Block, mdCell(placementCell(r)), mdCell(dash(r.Instance)),
				r.Status, dash(span(r.Startup)), dash(span(r.Duration)), dash(exitCode(r.ExitCode)), mdCell(r.Error))
		}
	} else {
		// Recorded before placement was: nothing to say about slots.
		fmt.Fprintf(b, "| arm | block | status | startup | duration | exit | note |\n|---|---:|---|---:|---:|---:|---|\n")
		for _, r := range v.Runs {
			fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s |\n", r.Arm, r.Block, r.Status, dash(span(r.Startup)), dash(span(r.Duration)),
				dash(exitCode(r.ExitCode)), mdCell(r.Error))
		}
	}
	if lines := v.placementLines(); len(lines) > 0 {
		fmt.Fprintf(b, "\nThe arms of a wave start together on their slots and get the workload at the same moment, once all of them are ready; a block with a slot for each of its arms is one wave, and a block with fewer runs its waves one after the other.\n\n%s\n", strings.Join(lines, "\n"))
	}
	if info := v.serverFacts(); info != "" {
		fmt.Fprintf(b, "\n%s", info)
	}

}

// caveatsSection lists the caveats.
func (v markdownWriter) caveatsSection() {
	b := v.b
	var cs []Caveat
	for _, c := range v.Caveats {
		// What the launches could not test is said under the claims, on the first screen.
		if c.Kind != CaveatUntested || v.Claims == nil {
			cs = append(cs, c)
		}
	}
	fmt.Fprintf(b, "\n## Caveats (%d)\n\n", len(cs))
	if len(cs) == 0 {
		fmt.Fprintf(b, "None found.\n")
	}
	for _, c := range cs {
		fmt.Fprintf(b, "- %s\n", c.Text)
	}
}

// fold wraps every section written from offset first on (each opens with a "## " title)
// in a <details> block, closed, whose summary is the section's title. The blank lines
// after the summary and before </details> let GitHub and GitLab render the markdown inside.
func (v markdownWriter) fold(first int) {
	b := v.b
	all := b.String()
	rest := all[first:]
	b.Reset()
	b.WriteString(all[:first])
	open := false
	var body []string
	flush := func() {
		if !open {
			return
		}
		for len(body) > 0 && strings.TrimSpace(body[0]) == "" {
			body = body[1:]
		}
		for len(body) > 0 && strings.TrimSpace(body[len(body)-1]) == "" {
			body = body[:len(body)-1]
		}
		fmt.Fprintf(b, "%s\n\n</details>\n", strings.Join(body, "\n"))
		body = body[:0]
	}
	for _, line := range strings.Split(rest, "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			fmt.Fprintf(b, "\n<details><summary>%s</summary>\n\n", html.EscapeString(title))
			open = true
			continue
		}
		if open {
			body = append(body, line)
		} else if line != "" {
			b.WriteString(line + "\n")
		}
	}
	flush()
}

// armColumns writes the header of a table with a column per arm (right-aligned, for
// numbers) between a first column, aligned as align says, and an optional last one.
func (v markdownWriter) armColumns(first, align, last string) {
	b := v.b
	fmt.Fprintf(b, "| %s |", first)
	for _, a := range v.Arms {
		fmt.Fprintf(b, " %s |", a.Name)
	}
	tail := ""
	if last != "" {
		fmt.Fprintf(b, " %s |", last)
		tail = "---|"
	}
	fmt.Fprintf(b, "\n|%s|%s%s\n", align, strings.Repeat("---:|", len(v.Arms)), tail)
}
