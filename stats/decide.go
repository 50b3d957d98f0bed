package stats

// rejectTolerance is the relative slack under which a p-value equal to alpha counts as
// reaching it. Exact tail sums are computed in floating point, so a p that is exactly 1/20
// can come out as 0.05000000000000001 or 0.04999999999999999; without the slack, which of
// two tables that are equally extreme is called significant would depend on rounding.
const rejectTolerance = 1e-9

// Reject is the one significance rule of arbiter: a hypothesis is rejected when p <= alpha,
// with a relative tolerance of 1e-9 on p. Every decision (verdicts, power, plans,
// sequential looks) goes through it, so that no two places disagree on a tie.
func Reject(p, alpha float64) bool {
	return p <= alpha*(1+rejectTolerance)
}
