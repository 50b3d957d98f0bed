#!/usr/bin/python3
"""Reference values for arbiter's stats core (exact tests, intervals, strata, paired,
multiplicity, power), computed with scipy and statsmodels, independently of the Go code.

Regenerate (Debian's python3 with python3-scipy python3-statsmodels python3-numpy):

    /usr/bin/python3 stats/testdata/core/gen.py > stats/testdata/core/reference.json

Written with scipy 1.10.1, statsmodels 0.13.5, numpy 1.24.2. Conventions that differ
from the libraries on purpose are marked "arbiter:" below.
"""
import json
import math
import sys
from functools import lru_cache

import numpy as np
import scipy
import statsmodels
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable, mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import (confint_proportions_2indep,
                                          proportion_confint)

rng = np.random.default_rng(20261130)


def num(v):
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return None
    return v


def random_pairs(count, nmax):
    """(a, n1, b, n2) tables: arm sizes up to nmax, rates from rare to common."""
    out = []
    for _ in range(count):
        n1 = int(rng.integers(1, nmax + 1))
        n2 = int(rng.integers(1, nmax + 1))
        r1, r2 = rng.choice([0.01, 0.05, 0.12, 0.3, 0.5, 0.8, 0.97], size=2)
        out.append((int(rng.binomial(n1, r1)), n1, int(rng.binomial(n2, r2)), n2))
    return out


EDGE = [
    (0, 240, 29, 240), (0, 60, 7, 60), (0, 60, 11, 60), (0, 60, 0, 60), (60, 60, 60, 60),
    (0, 1, 1, 1), (1, 1, 0, 1), (1, 1, 1, 1), (0, 1, 0, 1), (0, 2, 2, 2), (1, 2, 1, 3),
    (0, 5, 5, 5), (3, 5, 0, 4), (5, 5, 0, 5), (0, 10, 10, 10), (2, 10, 8, 10),
    (0, 5, 40, 5000), (3, 5000, 2, 5), (1, 3, 700, 1000), (50, 100, 50, 100),
    (10, 20, 10, 20), (7, 14, 7, 14), (0, 100000, 30, 100000), (100, 100000, 160, 100000),
    (12, 100000, 12, 100000), (500, 100000, 430, 100000), (50000, 100000, 50400, 100000),
    (99990, 100000, 100000, 100000), (0, 30, 30, 30), (30, 30, 0, 30), (1, 200, 15, 200),
    (0, 10000, 1, 10000), (4, 12, 4, 12), (9, 1000, 21, 1000), (0, 200, 0, 1),
]


def fisher_cases():
    out = []
    for a, n1, b, n2 in EDGE + random_pairs(240, 400) + random_pairs(20, 20000):
        t = [[a, n1 - a], [b, n2 - b]]
        p2 = stats.fisher_exact(t, "two-sided")[1]
        out.append({
            "a": a, "n1": n1, "b": b, "n2": n2,
            "two_sided": p2,
            "less": stats.fisher_exact(t, "less")[1],
            "greater": stats.fisher_exact(t, "greater")[1],
            "mid_p": fay_mid_p(a, n1, b, n2),
        })
    return out


def fay_mid_p(a, n1, b, n2):
    """Two-sided mid-p in Fay's convention (R exact2x2, tsmethod="minlike", midp=TRUE):
    the mass of the tables less likely than the observed one plus half the mass of every
    table as likely as it, with exact2x2's relative tolerance 1 + 1e-7. None (null) when
    the margins allow a single table."""
    k = a + b
    lo, hi = max(0, k - n2), min(k, n1)
    if lo == hi:
        return None
    # arm A's events given the total: hypergeom(M=n1+n2, n=n1, N=k), over the support
    d = stats.hypergeom.pmf(np.arange(lo, hi + 1), n1 + n2, n1, k)
    pobs = d[a - lo]
    rel = 1 + 1e-7
    less = d[d < pobs / rel].sum()
    tie = d[(d >= pobs / rel) & (d <= pobs * rel)].sum()
    return float(min(1.0, less + 0.5 * tie))


def boschloo_cases():
    out = []
    cases = [(0, 10, 5, 10), (0, 30, 6, 30), (1, 1, 0, 1), (0, 3, 3, 3), (2, 7, 5, 9),
             (0, 20, 0, 20), (20, 20, 20, 20), (4, 15, 4, 15), (1, 30, 10, 12)]
    cases += [c for c in random_pairs(200, 30)][:55]
    for a, n1, b, n2 in cases:
        # scipy's table has the two samples as columns. A denser shgo sampling than
        # the default 32 points keeps the maximisation over the nuisance rate honest.
        p = stats.boschloo_exact([[a, b], [n1 - a, n2 - b]], "two-sided", n=128).pvalue
        out.append({"a": a, "n1": n1, "b": b, "n2": n2, "p": num(p)})
    return out


def boschloo_large_cases():
    """A few tables at arbiter's BoschlooMaxN scale (200 per arm); slow in scipy."""
    out = []
    for a, n1, b, n2 in [(3, 200, 14, 200), (0, 150, 6, 180), (40, 200, 58, 200)]:
        p = stats.boschloo_exact([[a, b], [n1 - a, n2 - b]], "two-sided", n=128).pvalue
        out.append({"a": a, "n1": n1, "b": b, "n2": n2, "p": num(p)})
    return out


def interval_cases():
    out = []
    pts = [(0, 240), (0, 1), (1, 1), (0, 60), (11, 60), (60, 60), (1, 2), (3, 7),
           (0, 100000), (5, 100000), (50000, 100000), (99999, 100000), (29, 240)]
    for _ in range(200):
        n = int(rng.choice([1, 3, 10, 30, 60, 100, 500, 5000]))
        n = int(rng.integers(1, n + 1))
        pts.append((int(rng.binomial(n, rng.choice([0.01, 0.1, 0.3, 0.5, 0.9]))), n))
    for x, n in pts:
        for conf in (0.95, 0.9, 0.99):
            alpha = 1 - conf
            row = {"x": x, "n": n, "conf": conf}
            for key, meth in (("wilson", "wilson"), ("clopper_pearson", "beta"), ("jeffreys", "jeffreys")):
                lo, hi = proportion_confint(x, n, alpha=alpha, method=meth)
                row[key] = [num(lo), num(hi)]
            out.append(row)
    return out


def koopman_by_inversion(a, n1, b, n2, alpha):
    """Koopman's (1984) interval for p_B/p_A: the ratios theta whose Pearson chi-square,
    at the maximum-likelihood rates restricted to p_B = theta p_A, stays below the
    critical value. The restricted MLE solves the score equation numerically."""
    from scipy.optimize import brentq
    crit = stats.chi2.isf(alpha, 1)

    def chi2(theta):
        top = min(1.0, 1.0 / theta)

        def dlogl(p):  # derivative of the log-likelihood in p_A = p, p_B = theta p
            return ((a + b) / p - (n1 - a) / (1 - p) - (n2 - b) * theta / (1 - theta * p))

        eps = 1e-15 * top
        if dlogl(top - eps) >= 0:
            p = top
        else:
            p = brentq(dlogl, eps, top - eps, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
        pa, pb = p, theta * p
        s = 0.0
        for x, n, q in ((a, n1, pa), (b, n2, pb)):
            if q >= 1:
                if x != n:
                    return np.inf
                continue
            s += (x - n * q) ** 2 / (n * q * (1 - q))
        return s

    est = (b / n2) / (a / n1)
    f = lambda lt: chi2(math.exp(lt)) - crit
    lo = brentq(f, math.log(est) - 30, math.log(est), xtol=1e-14)
    hi = brentq(f, math.log(est), math.log(est) + 30, xtol=1e-14)
    return math.exp(lo), math.exp(hi)


def two_sample_cases():
    out = []
    for a, n1, b, n2 in EDGE + random_pairs(230, 500):
        for conf in (0.95, 0.9):
            alpha = 1 - conf
            row = {"a": a, "n1": n1, "b": b, "n2": n2, "conf": conf}
            # statsmodels' first sample is arm B: differences and ratios are B vs A.
            lo, hi = confint_proportions_2indep(b, n2, a, n1, method="newcomb", compare="diff", alpha=alpha)
            row["newcombe"] = [num(lo), num(hi)]
            if a > 0 and b > 0 and not (a == n1 and b == n2):
                if a == n1 or b == n2:
                    # statsmodels' cubic (Nam 1995) degenerates when an arm is all
                    # events; invert Koopman's chi-square directly there.
                    lo, hi = koopman_by_inversion(a, n1, b, n2, alpha)
                else:
                    with np.errstate(all="ignore"):
                        lo, hi = confint_proportions_2indep(b, n2, a, n1, method="score", compare="ratio",
                                                            alpha=alpha, correction=False)
                row["koopman"] = [num(np.real(lo)), num(np.real(hi))]
                lo, hi = confint_proportions_2indep(b, n2, a, n1, method="log", compare="ratio", alpha=alpha)
                row["katz"] = [num(lo), num(hi)]
            out.append(row)
    return out


def strata_cases():
    out = []
    fixed = [
        [(0, 30, 4, 30), (1, 30, 6, 30)],
        [(0, 60, 7, 60), (0, 60, 11, 60), (1, 60, 9, 60)],
        [(5, 50, 5, 50), (10, 50, 10, 50)],
        [(3, 20, 12, 20), (15, 20, 4, 20), (8, 40, 8, 40)],
        [(1, 2, 1, 2), (0, 3, 2, 3)],
    ]
    while len(fixed) < 260:
        k = int(rng.integers(2, 7))
        base = rng.choice([0.02, 0.1, 0.3, 0.5])
        shift = rng.choice([0.0, 0.05, 0.15])
        nmax = int(rng.choice([5, 20, 100, 1000]))
        strata = []
        for _ in range(k):
            n1, n2 = int(rng.integers(2, nmax + 2)), int(rng.integers(2, nmax + 2))
            pa = min(1.0, base * rng.uniform(0.5, 1.5))
            pb = min(1.0, pa + shift)
            strata.append((int(rng.binomial(n1, pa)), n1, int(rng.binomial(n2, pb)), n2))
        fixed.append(strata)
    for strata in fixed:
        # rows: arm B then arm A; columns: event, no event (odds ratios are B vs A)
        tables = [np.array([[b, n2 - b], [a, n1 - a]]) for a, n1, b, n2 in strata]
        # Strata whose margins are zero carry nothing and make statsmodels divide by
        # zero; arbiter leaves them out, and so does the reference.
        if any(t.sum(0).min() == 0 or t.sum(1).min() == 0 for t in tables):
            continue
        st = StratifiedTable(tables)
        row = {"strata": [list(s) for s in strata]}
        with np.errstate(all="ignore"):
            r0 = st.test_null_odds(correction=False)
            r1 = st.test_null_odds(correction=True)
            dev = sum(t[0, 0] - t[0].sum() * t[:, 0].sum() / t.sum() for t in tables)
            row["cmh"] = num(r0.statistic)
            row["cmh_p"] = num(stats.chi2.sf(r0.statistic, 1))
            # arbiter: no continuity correction when |sum(a - E a)| < 0.5 (as R);
            # statsmodels would square a negative number there.
            corr = r1.statistic if abs(dev) >= 0.5 else r0.statistic
            row["cmh_corrected"] = num(corr)
            row["cmh_corrected_p"] = num(stats.chi2.sf(corr, 1))
            row["or"] = num(st.oddsratio_pooled)
            lo, hi = st.oddsratio_pooled_confint(alpha=0.05)
            row["or_ci"] = [num(lo), num(hi)]
            if 0 < st.oddsratio_pooled < np.inf and st.oddsratio_pooled != 1:
                bd0, bd1 = st.test_equal_odds(adjust=False), st.test_equal_odds(adjust=True)
                row["bd"], row["bd_p"] = num(bd0.statistic), num(bd0.pvalue)
                row["tarone"], row["tarone_p"] = num(bd1.statistic), num(bd1.pvalue)
        # Mantel-Haenszel risk difference with Sato's (1989) variance, written out
        # from the published formula (statsmodels has no MH risk difference).
        w = num_ = sp = sq = 0.0
        for a, n1, b, n2 in strata:
            x1, m1, x0, m0 = b, n2, a, n1
            n = m1 + m0
            w += m1 * m0 / n
            num_ += (x1 * m0 - x0 * m1) / n
            sp += (m1 * m1 * x0 - m0 * m0 * x1 + m1 * m0 * (m0 - m1) / 2) / n ** 2
            sq += (x1 * (m0 - x0) + x0 * (m1 - x1)) / (2 * n)
        rd = num_ / w
        var = (rd * sp + sq) / w ** 2
        z = stats.norm.isf(0.025)
        row["rd"] = rd
        row["rd_ci"] = [rd - z * math.sqrt(var), rd + z * math.sqrt(var)] if var >= 0 else None
        out.append(row)
    return out


def mcnemar_cases():
    out = []
    pairs = [(0, 0), (0, 1), (1, 0), (0, 7), (7, 0), (5, 5), (3, 12), (40, 60), (500, 560), (0, 30), (2000, 2100)]
    while len(pairs) < 210:
        n = int(rng.choice([3, 20, 100, 1000]))
        pairs.append((int(rng.integers(0, n)), int(rng.integers(0, n))))
    for a_only, b_only in pairs:
        r = mcnemar([[10, a_only], [b_only, 10]], exact=True)
        out.append({"a_only": a_only, "b_only": b_only, "p": float(r.pvalue)})
    return out


def multiple_cases():
    out = []
    vecs = [[0.01, 0.04, 0.03, 0.005], [1.0, 0.0, 0.5], [0.05], [0.02, 0.02, 0.02], [0.0, 0.0, 1.0, 1.0]]
    while len(vecs) < 210:
        m = int(rng.integers(1, 21))
        v = rng.uniform(0, 1, size=m) ** rng.choice([1, 3, 6])
        if rng.uniform() < 0.3 and m > 1:
            v[1] = v[0]  # ties
        vecs.append([float(x) for x in v])
    for v in vecs:
        holm = multipletests(v, method="holm")[1]
        bh = multipletests(v, method="fdr_bh")[1]
        out.append({"p": v, "holm": [float(x) for x in holm], "bh": [float(x) for x in bh]})
    return out


def power_cases():
    @lru_cache(maxsize=None)
    def fisher_p(a, n1, b, n2):
        return stats.fisher_exact([[a, n1 - a], [b, n2 - b]])[1]

    def power(p0, p1, n1, n2, alpha):
        total = 0.0
        for x in range(n1 + 1):
            px = stats.binom.pmf(x, n1, p0)
            for y in range(n2 + 1):
                # p == alpha rejects; the tolerance keeps rounding (0.1 computed as
                # 0.10000000000000002) from deciding a table that sits on the boundary.
                if fisher_p(x, n1, y, n2) <= alpha * (1 + 1e-12):
                    total += px * stats.binom.pmf(y, n2, p1)
        return total

    cases = [(0, 0.12, 60, 60, 0.05), (0, 0.18, 60, 60, 0.05), (0.02, 0.12, 60, 60, 0.05),
             (0, 0.12, 30, 30, 0.05), (0.1, 0.1, 20, 20, 0.05), (0.5, 0.5, 10, 30, 0.1),
             (0, 1, 3, 3, 0.05), (0.3, 0.6, 1, 1, 0.5)]
    while len(cases) < 200:
        n1, n2 = int(rng.integers(1, 41)), int(rng.integers(1, 41))
        if rng.uniform() < 0.5:
            n2 = n1
        p0 = float(rng.choice([0.0, 0.01, 0.05, 0.1, 0.3, 0.5]))
        p1 = float(min(1.0, p0 + rng.choice([0.0, 0.05, 0.12, 0.3, 0.5])))
        cases.append((p0, p1, n1, n2, float(rng.choice([0.01, 0.05, 0.1]))))
    return [{"p0": p0, "p1": p1, "n1": n1, "n2": n2, "alpha": al, "power": power(p0, p1, n1, n2, al)}
            for p0, p1, n1, n2, al in cases]


def main():
    ref = {
        "generator": "stats/testdata/core/gen.py",
        "versions": {"scipy": scipy.__version__, "statsmodels": statsmodels.__version__, "numpy": np.__version__},
        "fisher": fisher_cases(),
        "boschloo": boschloo_cases() + boschloo_large_cases(),
        "intervals": interval_cases(),
        "two_sample": two_sample_cases(),
        "strata": strata_cases(),
        "mcnemar": mcnemar_cases(),
        "multiple": multiple_cases(),
        "power": power_cases(),
    }
    # One case per line: diffs of a regenerated file stay readable.
    out = sys.stdout
    out.write("{\n")
    for i, (key, val) in enumerate(ref.items()):
        out.write(json.dumps(key) + ": ")
        if isinstance(val, list):
            out.write("[\n" + ",\n".join(json.dumps(v, allow_nan=False) for v in val) + "\n]")
        else:
            out.write(json.dumps(val, allow_nan=False))
        out.write(",\n" if i < len(ref) - 1 else "\n")
    out.write("}\n")


if __name__ == "__main__":
    main()
