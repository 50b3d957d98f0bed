package orchestrator

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins/detectors"
	"github.com/arbiterlab/arbiter/store"
)

// labelDivergence is the divergence pass: once every arm has run, it compares each arm's
// sessions with the baseline arm's sessions of the same index (the same conversation; at
// temperature 0 a deterministic engine writes the same tokens) and records where each
// first departs, with detectors.FirstDivergence, in the divergences table.
//
// Divergence is informational unless the spec lists "divergence" among its detectors:
// an arm that changes numerics (another dtype, another kernel) is expected to diverge
// somewhere without being wrong, so by default it is recorded and counts as nothing.
// Listed, it also labels turns (detector "divergence"): a diverging session is corrupted
// at its first diverging turn, the turns and sessions flags follow, and every other turn
// compared (the baseline's, an arm's before and after its divergence) gets a clean label.
// Sessions the baseline lacks, turns from a failed or aborted request on (either side),
// and sessions with no turn left to compare, are not compared; the verdict counts them
// beside.
//
// The pass runs at temperature 0 only, and not when the experiment was interrupted
// (resume runs it). It runs after the last block, so the looks of a sequential design do
// not see divergence counted as corruption.
func (e *experiment) labelDivergence(ctx context.Context) error {
	if e.spec.Workload.Temperature != 0 || len(e.arms) < 2 || ctx.Err() != nil {
		return nil
	}
	decisive := slices.Contains(e.spec.Detectors, detectors.DivergenceName)
	turns, err := e.store.OutputTurns(ctx, e.id)
	if err != nil {
		return err
	}
	baseline := e.armIDs[e.baselineIndex()]
	baseName := e.arms[e.baselineIndex()].Name
	sessions := map[int64]map[int][]store.OutputTurn{} // arm -> session -> turns in order
	for _, t := range turns {
		if sessions[t.ArmID] == nil {
			sessions[t.ArmID] = map[int][]store.OutputTurn{}
		}
		sessions[t.ArmID][t.Session] = append(sessions[t.ArmID][t.Session], t)
	}
	var rows []store.SessionDivergence
	var labels []store.DivergenceLabel
	diverged := 0
	for _, armID := range e.armIDs {
		for idx, armTurns := range sessions[armID] {
			armOut := comparable(armTurns)
			if armID == baseline {
				if decisive {
					for _, t := range armTurns[:len(armOut)] {
						labels = append(labels, store.DivergenceLabel{RunID: t.RunID, Session: idx, Turn: t.Index})
					}
				}
				continue
			}
			baseTurns, ok := sessions[baseline][idx]
			if !ok {
				continue
			}
			baseOut := comparable(baseTurns)
			n := min(len(armOut), len(baseOut))
			if n == 0 {
				// Aborted on purpose, cut off or failed before either side completed a
				// turn: nothing the two engines answered alike can be compared.
				continue
			}
			d, differs := detectors.FirstDivergence(baseOut, armOut)
			row := store.SessionDivergence{RunID: armTurns[0].RunID, Session: idx, BaselineRunID: baseTurns[0].RunID, Compared: n}
			if differs {
				diverged++
				row.Turn = sql.NullInt64{Int64: int64(d.Turn), Valid: true}
				row.Field = sql.NullString{String: d.Field, Valid: true}
				row.Rune = sql.NullInt64{Int64: int64(d.Rune), Valid: true}
				row.BaselineExcerpt = sql.NullString{String: d.Baseline, Valid: true}
				row.ArmExcerpt = sql.NullString{String: d.Arm, Valid: true}
			}
			rows = append(rows, row)
			if !decisive {
				continue
			}
			for k, t := range armTurns[:n] {
				l := store.DivergenceLabel{RunID: t.RunID, Session: idx, Turn: t.Index}
				switch {
				case !differs || k < d.Turn:
				case k == d.Turn:
					l.Corrupted = true
					l.Reason = fmt.Sprintf("diverges from %s at %s", baseName, d)
				default:
					l.Reason = fmt.Sprintf("follows the divergence at turn %d (the conversations differ from there)", d.Turn)
				}
				labels = append(labels, l)
			}
		}
	}
	if err := e.store.WriteDivergence(ctx, e.id, rows, labels); err != nil {
		return err
	}
	e.log.Info("divergence from the baseline", "baseline", baseName, "sessions_compared", len(rows),
		"sessions_diverged", diverged, "counted_as_corruption", decisive)
	return nil
}

// comparable turns a session's stored turns into the outputs FirstDivergence compares,
// up to the first turn whose request failed or was aborted: what follows a failure is
// not the engine's answer to the same conversation, and a reply aborted mid-stream (an
// abort cascade's, on purpose) stops wherever the abort caught it, which differs from
// arm to arm without the engines differing.
func comparable(turns []store.OutputTurn) []detectors.TurnOutput {
	out := make([]detectors.TurnOutput, 0, len(turns))
	for i, t := range turns {
		if t.Index != i || t.Error.Valid || t.StatusCode != 200 || t.FinishReason == "abort" {
			break
		}
		o := detectors.TurnOutput{Content: t.Content, FinishReason: t.FinishReason}
		if t.ToolCalls.Valid && t.ToolCalls.String != "" {
			var calls []openai.ToolCall
			if json.Unmarshal([]byte(t.ToolCalls.String), &calls) != nil {
				break
			}
			o.ToolCalls = calls
		}
		out = append(out, o)
	}
	return out
}
