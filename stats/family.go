package stats

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// A verdict states several findings at once: each arm against the baseline and, in a
// factorial experiment, each factor's main effect and each two-factor interaction, some
// on two scales. Each is a Claim, and the claims that can reach a headline form one
// Family whose p-values are Holm-adjusted together, so that the chance of headlining
// anything at all when nothing is there (the family-wise error) stays at alpha. Testing
// each claim at alpha on its own would headline a false effect in about one null
// factorial experiment in eight.

// ClaimKind says what a claim compares.
type ClaimKind string

// The kinds of claim a verdict can headline.
const (
	ClaimArm         ClaimKind = "arm"         // one arm against the baseline
	ClaimMainEffect  ClaimKind = "main effect" // one factor, averaged over the others
	ClaimInteraction ClaimKind = "interaction" // how one factor's effect changes with another
)

// The scales a claim's estimate is on.
const (
	ScaleRiskDifference = "risk difference" // a difference of corruption rates
	ScaleLogOdds        = "log odds"        // a log odds ratio (Firth model)
)

// Claim is one finding a verdict may headline.
type Claim struct {
	Kind ClaimKind `json:"kind"`
	// Name is the arm's name, the factor's name, or "A x B" for an interaction.
	Name    string   `json:"name"`
	Factors []string `json:"factors,omitempty"` // the factors of an effect
	Scale   string   `json:"scale"`
	// Test names the test that gave P: "Fisher exact", "MOVER-Wilson" (the
	// interaction's interval inverted), "Firth penalized likelihood ratio", or the
	// caller's test for arms decided on another unit.
	Test string `json:"test"`
	// Estimate is on Scale: rate difference (arm minus baseline; interaction contrast)
	// or log odds ratio.
	Estimate float64 `json:"estimate"`
	// P is the claim's own two-sided p-value; NaN when it could not be computed, and
	// the claim then is not part of the adjustment.
	P float64 `json:"p"`
	// AdjustedP is Holm's adjusted p over every claim of the family with a defined P.
	AdjustedP float64 `json:"adjusted_p"`
	// Reject is Reject(AdjustedP, alpha): only such a claim may be headlined as shown.
	Reject bool `json:"reject"`
}

// MarshalJSON writes the claim with undefined numbers (a claim that could not be
// tested) as null.
func (c Claim) MarshalJSON() ([]byte, error) {
	return coreJSONObject(
		coreJSONField{"kind", c.Kind},
		coreJSONField{"name", c.Name},
		coreJSONField{"factors", c.Factors},
		coreJSONField{"scale", c.Scale},
		coreJSONField{"test", c.Test},
		coreJSONField{"estimate", c.Estimate},
		coreJSONField{"p", c.P},
		coreJSONField{"adjusted_p", c.AdjustedP},
		coreJSONField{"reject", c.Reject},
	)
}

// Family is a declared set of claims judged together at one family-wise alpha.
type Family struct {
	Name string `json:"name"`
	// Description says in words what the family holds, for the verdict to print.
	Description string  `json:"description"`
	Method      string  `json:"method"` // "Holm"
	Alpha       float64 `json:"alpha"`
	// Tested is the number of claims with a defined p: Holm's m.
	Tested int     `json:"tested"`
	Claims []Claim `json:"claims"`
}

// NewFamily Holm-adjusts the claims' p-values as one family at family-wise level alpha
// and marks the claims that may be headlined. Claims with a NaN p stay in the list,
// with a NaN adjusted p and no rejection, and do not count towards the family's size.
func NewFamily(name, description string, alpha float64, claims []Claim) (Family, error) {
	if !(alpha > 0 && alpha < 1) {
		return Family{}, fmt.Errorf("stats: family %s: alpha %g is not in (0, 1)", name, alpha)
	}
	f := Family{Name: name, Description: description, Method: "Holm", Alpha: alpha, Claims: append([]Claim(nil), claims...)}
	var ps []float64
	var idx []int
	for i, c := range f.Claims {
		f.Claims[i].AdjustedP, f.Claims[i].Reject = math.NaN(), false
		if math.IsNaN(c.P) {
			continue
		}
		ps = append(ps, c.P)
		idx = append(idx, i)
	}
	f.Tested = len(ps)
	if len(ps) == 0 {
		return f, nil
	}
	adj, err := Holm(ps)
	if err != nil {
		return Family{}, fmt.Errorf("stats: family %s: %w", name, err)
	}
	for k, i := range idx {
		f.Claims[i].AdjustedP = adj[k]
		f.Claims[i].Reject = Reject(adj[k], alpha)
	}
	return f, nil
}

// Headlined returns the claims that may be headlined, smallest adjusted p first.
func (f Family) Headlined() []Claim {
	var out []Claim
	for _, c := range f.Claims {
		if c.Reject {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].AdjustedP < out[j].AdjustedP })
	return out
}

// Find returns the claim of the given kind, name and scale.
func (f Family) Find(kind ClaimKind, name, scale string) (Claim, bool) {
	for _, c := range f.Claims {
		if c.Kind == kind && c.Name == name && c.Scale == scale {
			return c, true
		}
	}
	return Claim{}, false
}

// FactorialFamilyInput is a 2^k factorial experiment as the family sees it.
type FactorialFamilyInput struct {
	// Cells are the arms, one cell each, in the order of Arms.
	Cells []FactorialCell
	Arms  []string
	// Baseline indexes the arm the others are compared with.
	Baseline int
	Alpha    float64
	// Model is the Firth model of Cells; nil fits FactorialTests(Cells).
	Model *FactorialResult
	// ArmP, when not nil, gives the p-value that decides each arm against the baseline
	// (a clustered unit's test, say) instead of Fisher's exact test on the cells; a NaN
	// entry leaves that arm out of the family (an arm judged by a sequential boundary,
	// which spends its own alpha). ArmTest names that test.
	ArmP    []float64
	ArmTest string
}

// FactorialFamily is the headline family of a 2^k factorial experiment: every arm
// against the baseline (Fisher's exact test), every factor's main effect (Firth
// penalized likelihood ratio, log odds) and every two-factor interaction on the one scale
// declared for interactions, the risk difference pooled over the other factors (by the
// inverted MOVER-Wilson interval): m = (arms − 1) + k + k(k−1)/2 claims, 13 in a 2^3
// design. The log-odds interaction of the Firth model is reported beside it but is never
// a claim: letting either of two scales headline an interaction would double its chance
// of a false claim, and the odds scale is blind where cells have no corrupted session,
// which is the field's pattern. It is the one function a verdict uses to pick the
// factorial claims it may headline.
func FactorialFamily(in FactorialFamilyInput) (Family, error) {
	if len(in.Cells) != len(in.Arms) {
		return Family{}, fmt.Errorf("stats: factorial family: %d cells for %d arms", len(in.Cells), len(in.Arms))
	}
	if in.Baseline < 0 || in.Baseline >= len(in.Cells) {
		return Family{}, fmt.Errorf("stats: factorial family: baseline %d is not one of %d arms", in.Baseline, len(in.Cells))
	}
	if in.ArmP != nil && len(in.ArmP) != len(in.Cells) {
		return Family{}, fmt.Errorf("stats: factorial family: %d arm p-values for %d arms", len(in.ArmP), len(in.Cells))
	}
	model := in.Model
	if model == nil {
		m := FactorialTests(in.Cells)
		model = &m
	}
	var claims []Claim
	base := in.Cells[in.Baseline]
	arms := 0
	for i, c := range in.Cells {
		if i == in.Baseline {
			continue
		}
		cl := Claim{Kind: ClaimArm, Name: in.Arms[i], Scale: ScaleRiskDifference, Test: "Fisher exact",
			Estimate: coreRate(c.Events, c.N) - coreRate(base.Events, base.N)}
		switch {
		case in.ArmP != nil:
			if math.IsNaN(in.ArmP[i]) {
				continue
			}
			cl.P, cl.Test = in.ArmP[i], in.ArmTest
		case c.N == 0 || base.N == 0:
			cl.P = math.NaN()
		default:
			cl.P = FisherExact(base.Events, base.N, c.Events, c.N).PTwoSided
		}
		claims = append(claims, cl)
		arms++
	}
	for _, t := range model.Terms {
		if len(t.Factors) != 1 {
			continue
		}
		claims = append(claims, Claim{Kind: ClaimMainEffect, Name: t.Factors[0], Factors: t.Factors, Scale: ScaleLogOdds,
			Test: "Firth penalized likelihood ratio", Estimate: t.Estimate, P: t.P})
	}
	factors := model.Factors
	pairs := 0
	for i := 0; i < len(factors); i++ {
		for j := i + 1; j < len(factors); j++ {
			pairs++
			name := factors[i] + " x " + factors[j]
			var table [2][2]Cell
			for _, c := range in.Cells {
				cell := &table[c.Levels[factors[i]]&1][c.Levels[factors[j]]&1]
				cell.Events += c.Events
				cell.N += c.N
			}
			r := Interaction(table, 1-in.Alpha)
			claims = append(claims, Claim{Kind: ClaimInteraction, Name: name, Factors: []string{factors[i], factors[j]},
				Scale: ScaleRiskDifference, Test: "MOVER-Wilson", Estimate: r.Estimate, P: r.P})
		}
	}
	var parts []string
	parts = append(parts, fmt.Sprintf("%d %s against %s", arms, plural(arms, "arm", "arms"), in.Arms[in.Baseline]))
	if k := len(factors); k > 0 {
		parts = append(parts, fmt.Sprintf("%d main %s (log odds)", k, plural(k, "effect", "effects")))
	}
	if pairs > 0 {
		parts = append(parts, fmt.Sprintf("%d two-factor %s (risk difference)", pairs, plural(pairs, "interaction", "interactions")))
	}
	desc := strings.Join(parts, ", ")
	f, err := NewFamily("factorial", desc, in.Alpha, claims)
	if err != nil {
		return Family{}, err
	}
	f.Description = fmt.Sprintf("%d claims, Holm-adjusted together: %s", f.Tested, desc)
	return f, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
