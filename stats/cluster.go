package stats

import (
	"fmt"
	"math"
)

// The functions in this file treat a response as the unit of observation and a session as
// the cluster it belongs to. Turns of one session share a KV cache, a schedule and a
// prompt history, so their labels are correlated: counting responses as if they were
// independent overstates the evidence by the design effect. These functions measure that
// correlation and correct the response-level test for it.

// ClusterCounts is one session's tally: how many of its responses were labelled corrupted
// (Events) out of how many it produced (Responses).
type ClusterCounts struct {
	Events    int
	Responses int
}

// ClusterSummary describes one arm's sessions as clusters of responses.
type ClusterSummary struct {
	Sessions  int     // sessions with at least one response
	Responses int     // responses over all sessions
	Events    int     // corrupted responses over all sessions
	Rate      float64 // Events / Responses
	MeanSize  float64 // m̄ = Responses / Sessions
	// WeightedSize is Σm²/Σm, the session size that enters the design effect when
	// sessions differ in length; it equals MeanSize when all sessions have the same size.
	WeightedSize float64
	// ICC is the one-way ANOVA estimate of the intra-session correlation (Fleiss; Donner
	// 1986), which may be negative; NaN when undefined (no events, all events, fewer than
	// two sessions, or one response per session).
	ICC float64
	// DesignEffect is 1 + (WeightedSize − 1)·max(ICC, 0): the factor by which clustering
	// inflates the variance of Rate, in the variance-ratio form for unequal session sizes
	// (Σ m_j(1 + (m_j − 1)ρ) / Σ m_j). With equal sizes it is the textbook 1 + (m̄ − 1)ρ.
	// A negative ICC is truncated to 0 and an undefined one counts as 0.
	DesignEffect float64
	Warnings     []Warning
}

// checkClusters rejects impossible tallies, naming the offending session.
func checkClusters(arm string, sessions []ClusterCounts) error {
	for i, s := range sessions {
		if s.Responses < 0 || s.Events < 0 || s.Events > s.Responses {
			return fmt.Errorf("stats: %s session %d: %d events out of %d responses is not a valid tally", arm, i, s.Events, s.Responses)
		}
	}
	return nil
}

// clusterSums holds the sufficient sums of the one-way ANOVA on 0/1 responses.
type clusterSums struct {
	k        int     // clusters with at least one response
	n        int     // responses
	y        int     // events
	sumY2M   float64 // Σ y_j²/m_j
	sumM2    float64 // Σ m_j²
	skipped  int     // clusters with no responses
	withinFn float64 // Σ m_j²/N_group, summed over groups (for the pooled m0)
}

func sumClusters(sessions []ClusterCounts) clusterSums {
	var s clusterSums
	for _, c := range sessions {
		if c.Responses == 0 {
			s.skipped++
			continue
		}
		s.k++
		s.n += c.Responses
		s.y += c.Events
		s.sumY2M += float64(c.Events) * float64(c.Events) / float64(c.Responses)
		s.sumM2 += float64(c.Responses) * float64(c.Responses)
	}
	if s.n > 0 {
		s.withinFn = s.sumM2 / float64(s.n)
	}
	return s
}

// anovaICC is the ANOVA estimator ρ = (MSB − MSW)/(MSB + (m0 − 1)MSW) for groups of
// clusters; groups is the number of arms whose means are removed (1 for one arm, 2 for the
// pooled within-arm estimate). It returns NaN when the estimate is undefined.
func anovaICC(groups int, k, n int, sumY, sumY2M, sumYbar2N, sumWithin float64) float64 {
	dfB := k - groups
	dfW := n - k
	if dfB <= 0 || dfW <= 0 {
		return math.NaN()
	}
	ssb := sumY2M - sumYbar2N
	ssw := sumY - sumY2M
	msb := ssb / float64(dfB)
	msw := ssw / float64(dfW)
	m0 := (float64(n) - sumWithin) / float64(dfB)
	den := msb + (m0-1)*msw
	if !(den > 0) {
		return math.NaN()
	}
	return (msb - msw) / den
}

// designEffect is Σ m_j(1 + (m_j − 1)ρ)/Σ m_j with ρ truncated at 0.
func designEffect(weightedSize, icc float64) float64 {
	if math.IsNaN(icc) || icc < 0 {
		return 1
	}
	return 1 + (weightedSize-1)*icc
}

// SummarizeClusters computes one arm's rate, intra-session correlation and design effect.
func SummarizeClusters(sessions []ClusterCounts) (ClusterSummary, error) {
	if err := checkClusters("arm", sessions); err != nil {
		return ClusterSummary{}, err
	}
	s := sumClusters(sessions)
	out := ClusterSummary{Sessions: s.k, Responses: s.n, Events: s.y, ICC: math.NaN(), Rate: math.NaN(), DesignEffect: 1}
	if s.skipped > 0 {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("%d sessions produced no responses and were left out of the clustering", s.skipped)))
	}
	if s.n == 0 {
		out.Warnings = append(out.Warnings, "no responses: rate and intra-session correlation are undefined")
		return out, nil
	}
	out.Rate = float64(s.y) / float64(s.n)
	out.MeanSize = float64(s.n) / float64(s.k)
	out.WeightedSize = s.sumM2 / float64(s.n)
	yf := float64(s.y)
	out.ICC = anovaICC(1, s.k, s.n, yf, s.sumY2M, yf*yf/float64(s.n), s.withinFn)
	switch {
	case s.y == 0 || s.y == s.n:
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("all %d responses have the same label: intra-session correlation is undefined; design effect taken as 1", s.n)))
	case math.IsNaN(out.ICC):
		out.Warnings = append(out.Warnings, "intra-session correlation is undefined (fewer than two sessions or one response per session); design effect taken as 1")
	case out.ICC < 0:
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("intra-session correlation estimate %.3g is negative; truncated to 0 for the design effect", out.ICC)))
	}
	out.DesignEffect = designEffect(out.WeightedSize, out.ICC)
	return out, nil
}

// DonnerResult is Donner's adjusted chi-square test of equal corruption rates between two
// arms that counts responses but corrects for their clustering in sessions.
type DonnerResult struct {
	A, B ClusterSummary
	// ICC is the pooled within-arm ANOVA estimate (each arm's mean removed), which stays
	// defined when one arm has no events at all.
	ICC float64
	// CorrectionA and CorrectionB are each arm's variance inflation under the pooled
	// ICC, C_i = Σ_j m_ij(1 + (m_ij − 1)·max(ICC, 0)) / Σ_j m_ij: they differ when the
	// arms' clusters differ in size.
	CorrectionA, CorrectionB float64
	// DesignEffect is the pooled design effect 1 + (Σm²/Σm − 1)·max(ICC, 0) over both
	// arms, the response-weighted mean of the two corrections; it is descriptive.
	DesignEffect float64
	ChiSquare    float64 // Pearson chi-square on responses, as if they were independent
	NaiveP       float64 // its p-value, overstating the evidence
	Adjusted     float64 // Donner's adjusted chi-square
	P            float64 // upper tail of chi-square with 1 df at Adjusted
	Warnings     []Warning
}

// DonnerAdjusted tests equal response-level corruption rates in two arms with Donner's
// adjusted chi-square (Donner, Birkett and Buck 1981; Donner and Klar, Design and
// Analysis of Cluster Randomization Trials, 2000):
//
//	X²_A = Σ_i n_i (p̂_i − p̂)² / (C_i · p̂(1 − p̂)),
//
// the Pearson chi-square with each arm's term divided by that arm's variance inflation
// C_i under one pooled intra-cluster correlation, referred to chi-square with 1 df. It
// is not the Rao-Scott test, which estimates each arm's design effect from its own
// between-cluster variance: that variance is 0/0 in an arm without events, the usual
// control arm of a serving-bug experiment, whereas the pooled within-arm ANOVA
// correlation stays defined. With clusters of equal size in both arms it is the Pearson
// chi-square divided by the design effect. The chi-square reference needs many
// clusters; for a few launches per arm see LaunchTTest.
func DonnerAdjusted(a, b []ClusterCounts) (DonnerResult, error) {
	if err := checkClusters("arm A", a); err != nil {
		return DonnerResult{}, err
	}
	if err := checkClusters("arm B", b); err != nil {
		return DonnerResult{}, err
	}
	var out DonnerResult
	out.A, _ = SummarizeClusters(a)
	out.B, _ = SummarizeClusters(b)
	sa, sb := sumClusters(a), sumClusters(b)
	if sa.n == 0 || sb.n == 0 {
		return out, fmt.Errorf("stats: Donner's adjusted chi-square needs responses in both arms (got %d and %d)", sa.n, sb.n)
	}
	k, n, y := sa.k+sb.k, sa.n+sb.n, sa.y+sb.y
	yaf, ybf := float64(sa.y), float64(sb.y)
	between := yaf*yaf/float64(sa.n) + ybf*ybf/float64(sb.n)
	out.ICC = anovaICC(2, k, n, float64(y), sa.sumY2M+sb.sumY2M, between, sa.withinFn+sb.withinFn)
	out.CorrectionA = designEffect(sa.sumM2/float64(sa.n), out.ICC)
	out.CorrectionB = designEffect(sb.sumM2/float64(sb.n), out.ICC)
	out.DesignEffect = designEffect((sa.sumM2+sb.sumM2)/float64(n), out.ICC)
	switch {
	case y == 0 || y == n:
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("all %d responses in both arms have the same label: no difference can be tested", n)))
		out.NaiveP, out.P = 1, 1
		return out, nil
	case math.IsNaN(out.ICC):
		out.Warnings = append(out.Warnings, "pooled intra-session correlation is undefined; no clustering correction applied")
	case out.ICC < 0:
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("pooled intra-session correlation %.3g is negative; truncated to 0", out.ICC)))
	}
	out.ChiSquare = pearson2x2(sa.y, sa.n, sb.y, sb.n)
	out.NaiveP = chiSquare1Survival(out.ChiSquare)
	pbar := float64(y) / float64(n)
	pq := pbar * (1 - pbar)
	term := func(ev, size int, c float64) float64 {
		d := float64(ev)/float64(size) - pbar
		return float64(size) * d * d / (c * pq)
	}
	out.Adjusted = term(sa.y, sa.n, out.CorrectionA) + term(sb.y, sb.n, out.CorrectionB)
	out.P = chiSquare1Survival(out.Adjusted)
	if out.DesignEffect > 1.5 {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("responses within a session are correlated (design effect %.2f): the session, not the response, is the honest unit", out.DesignEffect)))
	}
	return out, nil
}

// pearson2x2 is the uncorrected Pearson chi-square of events a of n1 against b of n2.
func pearson2x2(a, n1, b, n2 int) float64 {
	n := float64(n1 + n2)
	ev := float64(a + b)
	ne := n - ev
	if ev == 0 || ne == 0 || n1 == 0 || n2 == 0 {
		return 0
	}
	d := float64(a)*float64(n2-b) - float64(b)*float64(n1-a)
	return n * d * d / (ev * ne * float64(n1) * float64(n2))
}

// chiSquare1Survival is P(X > x) for a chi-square variable with one degree of freedom,
// computed through erfc so that tiny p-values keep their relative precision.
func chiSquare1Survival(x float64) float64 {
	if x <= 0 {
		return 1
	}
	return math.Erfc(math.Sqrt(x / 2))
}
