#!/usr/bin/python3
"""Reference values for stats/rank.go: the Mann-Whitney U test (scipy), the
Hodges-Lehmann shift and its distribution-free (Moses) interval, computed here
independently of the Go code.

Regenerate (Debian's python3 with python3-scipy and python3-numpy):

    /usr/bin/python3 stats/testdata/rank/gen.py > stats/testdata/rank/reference.json

Written with scipy 1.10.1 and numpy 1.24.2.

Conventions, the same as arbiter's:
- U is the statistic of sample b (pairs with b > a, ties one half).
- The p-value is two-sided, from scipy.stats.mannwhitneyu with method="exact" when the
  pooled sample has no ties and n1 + n2 <= 100, else method="asymptotic" (tie
  correction, continuity correction), as arbiter chooses.
- The interval of the shift is [D(k), D(mn+1-k)] over the sorted differences b - a,
  with k the largest integer whose exact lower tail P(U <= k-1) is at most (1-conf)/2,
  or floor(mn/2 - z*sigma) (sigma tie-corrected) under the normal approximation; k < 1
  leaves the interval unbounded (null here). The exact null distribution is computed
  from the Gaussian binomial coefficient [m+n choose m]_q with exact integers, not from
  the recurrence the Go code uses.
- The ratio is the same estimate on log values, exponentiated.
"""
import json
import math

import numpy as np
import scipy
from scipy import stats

rng = np.random.default_rng(20261201)


def q_binomial(m, n):
    """Coefficients of [m+n choose m]_q: counts of arrangements with U = u."""
    # prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i), as exact integer polynomials.
    num = [1]
    for i in range(1, m + 1):
        term = [0] * (n + i + 1)
        term[0], term[n + i] = 1, -1
        num = poly_mul(num, term)
    for i in range(1, m + 1):
        num = poly_div_1_minus_qk(num, i)
    return num[: m * n + 1]


def poly_mul(a, b):
    out = [0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                out[i + j] += x * y
    return out


def poly_div_1_minus_qk(p, k):
    """p / (1 - q^k), exact (the division leaves no remainder here)."""
    out = list(p)
    for i in range(k, len(out)):
        out[i] += out[i - k]
    return out


def reference(a, b, conf):
    m, n = len(a), len(b)
    pooled = np.concatenate([a, b])
    ties = len(np.unique(pooled)) < len(pooled)
    exact = (not ties) and m + n <= 100
    res = stats.mannwhitneyu(b, a, alternative="two-sided", method="exact" if exact else "asymptotic")
    u = float(res.statistic)  # scipy's U of its first argument, b
    diffs = np.sort(np.subtract.outer(np.asarray(b, float), np.asarray(a, float)).ravel())
    mn = m * n
    half = (1 - conf) / 2
    if exact:
        counts = q_binomial(m, n)
        total = sum(counts)
        k, cum = 0, 0
        for u_ in range(mn + 1):
            cum += counts[u_]
            if cum / total > half * (1 + 1e-12):
                break
            k = u_ + 1
    else:
        _, t = np.unique(pooled, return_counts=True)
        N = m + n
        sigma = math.sqrt(m * n / 12 * ((N + 1) - float(np.sum(t ** 3 - t)) / (N * (N - 1))))
        k = math.floor(mn / 2 - stats.norm.ppf(1 - half) * sigma)

    def interval(d):
        lo = float(d[k - 1]) if 1 <= k <= len(d) else None
        hi = float(d[mn - k]) if 1 <= k <= len(d) else None
        return [lo, hi]

    out = {
        "a": [float(x) for x in a], "b": [float(x) for x in b], "conf": conf,
        "u": u, "p": float(res.pvalue), "exact": exact,
        "median_a": float(np.median(a)), "median_b": float(np.median(b)),
        "shift": float(np.median(diffs)), "shift_ci": interval(diffs),
    }
    if min(pooled) > 0:
        ld = np.sort(np.subtract.outer(np.log(np.asarray(b, float)), np.log(np.asarray(a, float))).ravel())
        lo, hi = interval(ld)
        out["ratio"] = math.exp(float(np.median(ld)))
        out["ratio_ci"] = [None if lo is None else math.exp(lo), None if hi is None else math.exp(hi)]
    return out


cases = []
# Hand-picked: tiny samples, a clear shift, identical samples, ties, negatives.
cases.append(reference([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], 0.95))
cases.append(reference([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], 0.95))
cases.append(reference([10.0], [12.0, 13.0], 0.95))
cases.append(reference([1.0, 2.0, 2.0, 3.0], [2.0, 3.0, 3.0, 4.0], 0.95))
cases.append(reference([-3.0, -1.0, 0.5, 2.0, 4.0], [-2.0, 1.0, 3.0, 5.0, 6.0, 7.0], 0.9))
cases.append(reference([5.0, 5.0, 5.0], [5.0, 5.0, 5.0], 0.95))
for m, n, shift, rounding, conf in [
    (5, 7, 0.5, None, 0.95), (8, 8, 0.0, None, 0.95), (12, 10, 1.0, None, 0.9),
    (20, 25, 0.3, None, 0.95), (30, 30, 0.0, 1, 0.95), (40, 45, 0.2, None, 0.95),
    (60, 60, 0.1, None, 0.95), (32, 32, 0.05, 2, 0.9), (16, 16, 0.0, None, 0.9),
    (50, 50, 0.5, None, 0.99), (3, 40, 1.0, None, 0.95), (100, 80, 0.02, 3, 0.95),
]:
    a = rng.lognormal(3.0, 0.4, size=m)
    b = rng.lognormal(3.0 + shift, 0.4, size=n)
    if rounding is not None:
        a, b = np.round(a, rounding), np.round(b, rounding)
    cases.append(reference(list(a), list(b), conf))

print(json.dumps({"scipy": scipy.__version__, "numpy": np.__version__, "cases": cases}, indent=1))
