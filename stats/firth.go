package stats

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Firth's penalized logistic regression (Firth 1993; Heinze & Schemper 2002) adds
// ½·log det I(β) (the Jeffreys prior) to the log-likelihood. Unlike ordinary maximum
// likelihood it gives finite estimates when a cell has 0% or 100% events, which is the
// normal case for a control arm of a serving-bug experiment.

// FirthFit is a Firth-penalized logistic regression fit.
type FirthFit struct {
	Coef []float64 // log-odds coefficients, one per column of X
	SE   []float64 // square roots of the diagonal of the inverse penalized information
	// LogLik is the penalized log-likelihood ℓ(β) + ½·log det I(β), with ℓ the
	// log-likelihood of the responses expanded to 0/1 rows (no binomial coefficients).
	LogLik float64
	// LRT is, per coefficient, the penalized likelihood-ratio statistic 2·(LogLik − the
	// maximum with that coefficient fixed at 0 and the full model's penalty kept), as
	// logistf computes it; P is its chi-square (1 df) upper tail.
	LRT        []float64
	P          []float64
	Iterations int
	Warnings   []Warning
}

// ErrFirthSingular is returned when the design matrix does not have full column rank
// among the rows with positive weight, so no coefficient vector is identified.
var ErrFirthSingular = errors.New("stats: design matrix is rank deficient")

// firthData is a validated problem: rows with positive weight only.
type firthData struct {
	x [][]float64
	y []float64 // event proportion of the row
	w []float64 // trials of the row
	p int
}

// firthMaxStep caps a Newton step, as logistf does, so that a quasi-separated start does
// not throw the iteration into the flat tails of the logistic curve.
const firthMaxStep = 5

// Firth fits a logistic regression by Firth's penalized likelihood. X holds one row per
// observation (include a column of ones for an intercept); y[i] is the observed
// proportion of events among weights[i] trials (0 or 1 for ungrouped data), so aggregated
// binomial data are given as y = events/n and weights = n. A nil weights means 1 per row.
func Firth(X [][]float64, y []float64, weights []float64) (FirthFit, error) {
	d, err := newFirthData(X, y, weights)
	if err != nil {
		return FirthFit{}, err
	}
	beta := make([]float64, d.p)
	it, err := d.fit(beta, -1)
	if err != nil {
		return FirthFit{}, err
	}
	ev := d.evaluate(beta)
	if ev.err != nil {
		return FirthFit{}, ev.err
	}
	fit := FirthFit{Coef: beta, SE: make([]float64, d.p), LogLik: ev.loglik, LRT: make([]float64, d.p), P: make([]float64, d.p), Iterations: it}
	cov := choleskyInverse(ev.chol)
	for j := 0; j < d.p; j++ {
		fit.SE[j] = math.Sqrt(cov[j][j])
	}
	for j := 0; j < d.p; j++ {
		b := append([]float64(nil), beta...)
		b[j] = 0
		if _, err := d.fit(b, j); err != nil {
			return FirthFit{}, fmt.Errorf("stats: Firth fit with coefficient %d fixed at 0: %w", j, err)
		}
		fit.LRT[j] = math.Max(2*(ev.loglik-d.evaluate(b).loglik), 0)
		fit.P[j] = chiSquare1Survival(fit.LRT[j])
	}
	return fit, nil
}

func newFirthData(X [][]float64, y []float64, weights []float64) (*firthData, error) {
	if len(X) == 0 {
		return nil, errors.New("stats: Firth: no observations")
	}
	if len(y) != len(X) || (weights != nil && len(weights) != len(X)) {
		return nil, fmt.Errorf("stats: Firth: %d rows of X, %d responses, %d weights", len(X), len(y), len(weights))
	}
	d := &firthData{p: len(X[0])}
	if d.p == 0 {
		return nil, errors.New("stats: Firth: X has no columns")
	}
	for i, row := range X {
		if len(row) != d.p {
			return nil, fmt.Errorf("stats: Firth: row %d has %d columns, want %d", i, len(row), d.p)
		}
		w := 1.0
		if weights != nil {
			w = weights[i]
		}
		if !(w >= 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("stats: Firth: row %d: weight %g is not a finite non-negative number", i, w)
		}
		if !(y[i] >= 0 && y[i] <= 1) {
			return nil, fmt.Errorf("stats: Firth: row %d: response %g is not a proportion in [0, 1]", i, y[i])
		}
		for j, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("stats: Firth: X[%d][%d] = %g", i, j, v)
			}
		}
		if w == 0 {
			continue
		}
		d.x = append(d.x, row)
		d.y = append(d.y, y[i])
		d.w = append(d.w, w)
	}
	if len(d.x) == 0 {
		return nil, errors.New("stats: Firth: every row has zero weight")
	}
	return d, nil
}

// firthEval is the state of the penalized likelihood at one β.
type firthEval struct {
	loglik float64
	score  []float64   // modified score U*(β)
	info   [][]float64 // Fisher information X'WX
	chol   [][]float64 // its lower Cholesky factor
	err    error
}

// logSigmoid returns log σ(η) and log(1 − σ(η)) without overflow.
func logSigmoid(eta float64) (logP, logQ float64) {
	if eta >= 0 {
		e := math.Exp(-eta)
		return -math.Log1p(e), -eta - math.Log1p(e)
	}
	e := math.Exp(eta)
	return eta - math.Log1p(e), -math.Log1p(e)
}

func (d *firthData) evaluate(beta []float64) firthEval {
	p := d.p
	info := newSquare(p)
	prob := make([]float64, len(d.x))
	var ll float64
	for i, row := range d.x {
		var eta float64
		for j, v := range row {
			eta += v * beta[j]
		}
		lp, lq := logSigmoid(eta)
		ll += d.w[i] * (d.y[i]*lp + (1-d.y[i])*lq)
		pi := math.Exp(lp)
		prob[i] = pi
		wi := d.w[i] * pi * math.Exp(lq)
		for a := 0; a < p; a++ {
			xa := row[a] * wi
			for b := 0; b <= a; b++ {
				info[a][b] += xa * row[b]
			}
		}
	}
	for a := 0; a < p; a++ {
		for b := 0; b < a; b++ {
			info[b][a] = info[a][b]
		}
	}
	chol, ok := cholesky(info)
	if !ok {
		return firthEval{err: ErrFirthSingular}
	}
	var logdet float64
	for a := 0; a < p; a++ {
		logdet += 2 * math.Log(chol[a][a])
	}
	score := make([]float64, p)
	z := make([]float64, p)
	for i, row := range d.x {
		pi := prob[i]
		// Hat value w_i·π(1−π)·x'I⁻¹x = w_i·π(1−π)·|L⁻¹x|², by forward substitution.
		var q float64
		for a := 0; a < p; a++ {
			t := row[a]
			for k := 0; k < a; k++ {
				t -= chol[a][k] * z[k]
			}
			z[a] = t / chol[a][a]
			q += z[a] * z[a]
		}
		h := q * d.w[i] * pi * (1 - pi)
		r := d.w[i]*(d.y[i]-pi) + h*(0.5-pi)
		for a := 0; a < p; a++ {
			score[a] += row[a] * r
		}
	}
	return firthEval{loglik: ll + 0.5*logdet, score: score, info: info, chol: chol}
}

// fit maximizes the penalized likelihood from the start in beta (updated in place). With
// fixed ≥ 0 that coefficient stays at its start value and the others are profiled, the
// penalty still being that of the full model.
func (d *firthData) fit(beta []float64, fixed int) (int, error) {
	free := make([]int, 0, d.p)
	for j := 0; j < d.p; j++ {
		if j != fixed {
			free = append(free, j)
		}
	}
	cur := d.evaluate(beta)
	if cur.err != nil {
		return 0, cur.err
	}
	if len(free) == 0 {
		return 0, nil
	}
	next := make([]float64, d.p)
	for it := 1; it <= 500; it++ {
		sub := newSquare(len(free))
		for a, ja := range free {
			for b, jb := range free {
				sub[a][b] = cur.info[ja][jb]
			}
		}
		chol, ok := cholesky(sub)
		if !ok {
			return it, ErrFirthSingular
		}
		rhs := make([]float64, len(free))
		var maxScore float64
		for a, ja := range free {
			rhs[a] = cur.score[ja]
			maxScore = math.Max(maxScore, math.Abs(rhs[a]))
		}
		delta := choleskySolve(chol, rhs)
		if it > firthNewtonAfter {
			// The modified-score step uses the Fisher information, not the Hessian of
			// the penalty, and converges only linearly when cells have extreme
			// leverage; a Newton step on the exact Hessian finishes the job.
			if nd, ok := d.newtonStep(beta, free, cur.score); ok {
				delta = nd
			}
		}
		var maxDelta float64
		for _, v := range delta {
			maxDelta = math.Max(maxDelta, math.Abs(v))
		}
		if maxDelta > firthMaxStep {
			for a := range delta {
				delta[a] *= firthMaxStep / maxDelta
			}
		}
		if maxDelta < 1e-10 && maxScore < 1e-8 {
			return it, nil
		}
		// Step halving keeps the penalized likelihood from decreasing.
		step := 1.0
		var ev firthEval
		for h := 0; h < 60; h++ {
			copy(next, beta)
			for a, ja := range free {
				next[ja] += step * delta[a]
			}
			ev = d.evaluate(next)
			if ev.err == nil && ev.loglik >= cur.loglik-1e-12*math.Abs(cur.loglik) {
				break
			}
			step /= 2
		}
		if ev.err != nil {
			return it, ev.err
		}
		copy(beta, next)
		cur = ev
		if maxDelta*step < 1e-13 {
			return it, nil
		}
	}
	return 500, errors.New("stats: Firth: no convergence in 500 iterations")
}

// firthNewtonAfter is the number of modified-score iterations after which fit switches
// to Newton steps on a numerically differentiated Hessian. Most fits converge long
// before; keeping the plain iteration that long makes the path, and so the maximum it
// reaches when sparse cells make the penalized likelihood multimodal, that of the
// textbook algorithm.
const firthNewtonAfter = 30

// newtonStep solves H·δ = −U* on the free coefficients, with H the Hessian of the
// penalized log-likelihood obtained by central differences of its gradient U*. It
// reports false when −H is not positive definite (far from a maximum).
func (d *firthData) newtonStep(beta []float64, free []int, score []float64) ([]float64, bool) {
	n := len(free)
	neg := newSquare(n)
	probe := append([]float64(nil), beta...)
	for b, jb := range free {
		h := 1e-5 * math.Max(1, math.Abs(beta[jb]))
		probe[jb] = beta[jb] + h
		up := d.evaluate(probe)
		probe[jb] = beta[jb] - h
		down := d.evaluate(probe)
		probe[jb] = beta[jb]
		if up.err != nil || down.err != nil {
			return nil, false
		}
		for a, ja := range free {
			neg[a][b] = -(up.score[ja] - down.score[ja]) / (2 * h)
		}
	}
	for a := 0; a < n; a++ {
		for b := 0; b < a; b++ {
			m := (neg[a][b] + neg[b][a]) / 2
			neg[a][b], neg[b][a] = m, m
		}
	}
	chol, ok := cholesky(neg)
	if !ok {
		return nil, false
	}
	rhs := make([]float64, n)
	for a, ja := range free {
		rhs[a] = score[ja]
	}
	return choleskySolve(chol, rhs), true
}

func newSquare(p int) [][]float64 {
	m := make([][]float64, p)
	buf := make([]float64, p*p)
	for i := range m {
		m[i] = buf[i*p : (i+1)*p]
	}
	return m
}

// cholesky returns the lower factor L of a symmetric positive-definite matrix, or false
// when the matrix is not numerically positive definite.
func cholesky(a [][]float64) ([][]float64, bool) {
	p := len(a)
	l := newSquare(p)
	var scale float64
	for i := 0; i < p; i++ {
		scale = math.Max(scale, math.Abs(a[i][i]))
	}
	for j := 0; j < p; j++ {
		s := a[j][j]
		for k := 0; k < j; k++ {
			s -= l[j][k] * l[j][k]
		}
		if !(s > 1e-13*scale) {
			return nil, false
		}
		l[j][j] = math.Sqrt(s)
		for i := j + 1; i < p; i++ {
			t := a[i][j]
			for k := 0; k < j; k++ {
				t -= l[i][k] * l[j][k]
			}
			l[i][j] = t / l[j][j]
		}
	}
	return l, true
}

func choleskySolve(l [][]float64, b []float64) []float64 {
	p := len(l)
	z := make([]float64, p)
	for i := 0; i < p; i++ {
		s := b[i]
		for k := 0; k < i; k++ {
			s -= l[i][k] * z[k]
		}
		z[i] = s / l[i][i]
	}
	x := make([]float64, p)
	for i := p - 1; i >= 0; i-- {
		s := z[i]
		for k := i + 1; k < p; k++ {
			s -= l[k][i] * x[k]
		}
		x[i] = s / l[i][i]
	}
	return x
}

func choleskyInverse(l [][]float64) [][]float64 {
	p := len(l)
	inv := newSquare(p)
	e := make([]float64, p)
	for j := 0; j < p; j++ {
		for i := range e {
			e[i] = 0
		}
		e[j] = 1
		col := choleskySolve(l, e)
		for i := 0; i < p; i++ {
			inv[i][j] = col[i]
		}
	}
	return inv
}

// FactorialCell is one cell of a 2^k design: the level of every factor (0 for the
// reference level, 1 for the other), and its corrupted sessions out of N.
type FactorialCell struct {
	Levels map[string]int
	Events int
	N      int
}

// FactorialTerm is a main effect or a two-way interaction of a factorial design.
type FactorialTerm struct {
	Name     string   // "BF16_INDEX_K" or "BF16_INDEX_K x HiCache"
	Factors  []string // the factors of the term, in name order
	Estimate float64  // log odds (see FactorialResult for the coding)
	SE       float64
	CI       Interval // 95%
	// CIMethod is "profile" (profile penalized likelihood) or "wald" when the profile
	// could not be bracketed; empty (and CI NaN) from FactorialTests.
	CIMethod string
	LRT      float64 // penalized likelihood-ratio statistic, 1 df
	P        float64
}

// FactorialResult is a Firth logistic model of a 2^k factorial experiment with all main
// effects and all two-way interactions.
//
// Coding: every factor is centered, −½ at level 0 and +½ at level 1. A main effect is
// then the log odds ratio of the factor averaged over the levels of the other factors, and
// a two-way interaction A x B is the difference between A's log odds ratio at B = 1 and at
// B = 0 (the same number 0/1 coding gives for the interaction of a 2x2 design). The
// Jeffreys penalty is invariant to the coding, so fitted rates do not depend on it.
type FactorialResult struct {
	Factors   []string // in name order
	Intercept float64  // log odds at the centre of the design
	Terms     []FactorialTerm
	Fit       FirthFit
	Warnings  []Warning
}

// factorialChi2 is the 95% quantile of chi-square with 1 df, used by the profile CIs.
const factorialChi2 = 3.841458820694124

// Factorial fits the main effects and two-way interactions of a 2^k design by Firth's
// penalized likelihood on the aggregated cells, with profile-likelihood 95% intervals and
// penalized likelihood-ratio tests, so that a verdict can name an interaction with an
// honest interval even when some cells have no events.
func Factorial(cells []FactorialCell) FactorialResult { return factorial(cells, true) }

// FactorialTests is Factorial without the profile intervals (CI is NaN, CIMethod empty)
// and without the search for a second maximum: the same fit, estimates and p-values at
// a fraction of the cost, for simulations that only need the decisions.
func FactorialTests(cells []FactorialCell) FactorialResult { return factorial(cells, false) }

func factorial(cells []FactorialCell, intervals bool) FactorialResult {
	var out FactorialResult
	names := map[string]bool{}
	for _, c := range cells {
		for f := range c.Levels {
			names[f] = true
		}
	}
	for f := range names {
		out.Factors = append(out.Factors, f)
	}
	sort.Strings(out.Factors)
	k := len(out.Factors)
	if k == 0 {
		out.Warnings = append(out.Warnings, "factorial design has no factors")
		return out
	}
	type column struct {
		name    string
		factors []string
	}
	var cols []column
	for _, f := range out.Factors {
		cols = append(cols, column{f, []string{f}})
	}
	for i := 0; i < k; i++ {
		for j := i + 1; j < k; j++ {
			f, g := out.Factors[i], out.Factors[j]
			cols = append(cols, column{f + " x " + g, []string{f, g}})
		}
	}
	var X [][]float64
	var y, w []float64
	seen := map[string]bool{}
	for ci, c := range cells {
		if c.N < 0 || c.Events < 0 || c.Events > c.N {
			out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("cell %d: %d events out of %d is not a valid tally; left out", ci, c.Events, c.N)))
			continue
		}
		code := make(map[string]float64, k)
		var key strings.Builder
		valid := true
		for _, f := range out.Factors {
			lv, ok := c.Levels[f]
			if !ok || (lv != 0 && lv != 1) {
				valid = false
				break
			}
			code[f] = float64(lv) - 0.5
			fmt.Fprintf(&key, "%d", lv)
		}
		if !valid {
			out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("cell %d: every factor needs level 0 or 1; left out", ci)))
			continue
		}
		if seen[key.String()] {
			out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("cell %d repeats levels %s; its counts are fitted as a separate row", ci, key.String())))
		}
		seen[key.String()] = true
		if c.N == 0 {
			continue
		}
		row := []float64{1}
		for _, col := range cols {
			v := 1.0
			for _, f := range col.factors {
				v *= code[f]
			}
			row = append(row, v)
		}
		X = append(X, row)
		y = append(y, float64(c.Events)/float64(c.N))
		w = append(w, float64(c.N))
	}
	if missing := (1 << k) - len(seen); missing > 0 {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("%d of %d cells of the 2^%d design are missing", missing, 1<<k, k)))
	}
	fit, err := Firth(X, y, w)
	if err != nil {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("factorial model cannot be fitted: %v", err)))
		return out
	}
	out.Fit = fit
	out.Intercept = fit.Coef[0]
	d, _ := newFirthData(X, y, w)
	// A second start only adds a warning, no p-value: decisions-only fits skip it.
	if intervals {
		if alt, ok := d.fitFromCellLogits(); ok {
			var moved float64
			for j := range alt {
				moved = math.Max(moved, math.Abs(alt[j]-fit.Coef[j]))
			}
			if ll := d.evaluate(alt).loglik; moved > 1e-4 && ll > fit.LogLik-1e-6*math.Abs(fit.LogLik) {
				out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("the penalized likelihood has more than one maximum (cells with very few sessions and 0%% or 100%% events): estimates are not unique, coefficients move by up to %.2g between them", moved)))
			}
		}
	}
	zeroCells := 0
	for i := range y {
		if y[i] == 0 || y[i] == 1 {
			zeroCells++
		}
	}
	if zeroCells > 0 {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("%d cells have 0%% or 100%% events: estimates are Firth-penalized, not plain maximum likelihood", zeroCells)))
	}
	for i, col := range cols {
		j := i + 1
		t := FactorialTerm{Name: col.name, Factors: col.factors, Estimate: fit.Coef[j], SE: fit.SE[j], LRT: fit.LRT[j], P: fit.P[j]}
		if !intervals {
			t.CI = Interval{math.NaN(), math.NaN()}
			out.Terms = append(out.Terms, t)
			continue
		}
		lo, errLo := d.profileBound(fit.Coef, fit.LogLik, j, -1, fit.SE[j])
		hi, errHi := d.profileBound(fit.Coef, fit.LogLik, j, +1, fit.SE[j])
		if errLo == nil && errHi == nil {
			t.CI, t.CIMethod = Interval{Lo: lo, Hi: hi}, "profile"
		} else {
			z := math.Sqrt(factorialChi2)
			t.CI, t.CIMethod = Interval{Lo: t.Estimate - z*t.SE, Hi: t.Estimate + z*t.SE}, "wald"
			out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("%s: profile interval not found (%v); Wald interval shown", col.name, errors.Join(errLo, errHi))))
		}
		out.Terms = append(out.Terms, t)
	}
	return out
}

// fitFromCellLogits fits from a second start, the weighted least-squares projection of
// the cells' half-corrected empirical logits, to detect a second maximum.
func (d *firthData) fitFromCellLogits() ([]float64, bool) {
	p := d.p
	xtx := newSquare(p)
	xtz := make([]float64, p)
	for i, row := range d.x {
		ev := d.y[i] * d.w[i]
		z := math.Log((ev + 0.5) / (d.w[i] - ev + 0.5))
		for a := 0; a < p; a++ {
			xtz[a] += d.w[i] * row[a] * z
			for b := 0; b < p; b++ {
				xtx[a][b] += d.w[i] * row[a] * row[b]
			}
		}
	}
	chol, ok := cholesky(xtx)
	if !ok {
		return nil, false
	}
	beta := choleskySolve(chol, xtz)
	if _, err := d.fit(beta, -1); err != nil {
		return nil, false
	}
	return beta, true
}

// profileBound finds the coefficient value on side dir (−1 or +1) of the estimate where
// the profile penalized log-likelihood has dropped by half the 95% chi-square quantile.
// The profile's slope at b is the score of coefficient j at the constrained maximum (the
// envelope theorem), so a Newton iteration kept inside the bracket converges in a few
// constrained fits.
func (d *firthData) profileBound(coef []float64, llMax float64, j int, dir float64, se float64) (float64, error) {
	target := llMax - factorialChi2/2
	start := make([]float64, len(coef))
	profile := func(b float64) (f, slope float64, err error) {
		// Each point starts from the estimate, not from the previous point: with
		// sparse cells the constrained likelihood can have more than one maximum, and a
		// warm start from far along the profile may settle in a lower one.
		copy(start, coef)
		start[j] = b
		if _, err := d.fit(start, j); err != nil {
			return 0, 0, err
		}
		ev := d.evaluate(start)
		return ev.loglik - target, ev.score[j], nil
	}
	inner := coef[j]
	step := math.Max(se, 0.1)
	var outer, fOuter, sOuter float64
	found := false
	for i := 0; i < 60 && step <= 1e4; i++ {
		outer = coef[j] + dir*step
		f, sl, err := profile(outer)
		if err != nil {
			return 0, err
		}
		if f < 0 {
			fOuter, sOuter, found = f, sl, true
			break
		}
		inner = outer
		step *= 2
	}
	if !found {
		return 0, fmt.Errorf("profile of coefficient %d does not fall below the 95%% level", j)
	}
	// Invariant: f(in) ≥ 0 > f(out).
	in, out := inner, outer
	x, f, sl := outer, fOuter, sOuter
	for i := 0; i < 100; i++ {
		next := x - f/sl
		lo, hi := math.Min(in, out), math.Max(in, out)
		if !(next > lo && next < hi) || sl == 0 {
			next = (in + out) / 2
		}
		if math.Abs(next-x) <= 1e-11*math.Max(1, math.Abs(x)) || hi-lo <= 1e-12*math.Max(1, math.Abs(x)) {
			return next, nil
		}
		var err error
		x = next
		f, sl, err = profile(x)
		if err != nil {
			return 0, err
		}
		if f >= 0 {
			in = x
		} else {
			out = x
		}
	}
	return x, nil
}
