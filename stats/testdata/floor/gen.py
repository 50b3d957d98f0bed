#!/usr/bin/python3
"""Reference values for the noise floor's statistics, written independently of the Go code
(numpy and scipy):

  icc      the one-way ANOVA intra-launch correlation of launches' counts (0/1 sessions,
           truncated at 0); its upper bound is a bootstrap, checked by its coverage instead
  spread   the pooled standard deviation of groups of values and its one-sided upper bound
           sqrt(SS / chi2.ppf(1 - conf, df))
  welch    Welch's t: Satterthwaite's df, p = 2 t.sf(|d| / se, df) and the interval from
           scipy.stats.t.ppf
  contrast the MOVER-Wilson interval of sum coef * x/n for fractional counts, and its
           p found by scipy.optimize.brentq on the critical value at which the bound on
           the estimate's side touches 0
  effective  a launch set pooled to effective counts: rate sum x / sum m on
           (sum m)^2 / sum m (1 + (m - 1) icc) sessions

Regenerate with Debian's python (apt-get install python3-scipy):

  cd stats/testdata/floor && /usr/bin/python3 gen.py > reference.json

The seed is fixed.
"""
import json
import math
import random

import numpy as np
from scipy import optimize, stats

rng = random.Random(20261205)


def icc_case(counts, sizes):
    k = len(counts)
    n = sum(sizes)
    y = sum(counts)
    ybar = y / n
    ssb = sum(m * (c / m - ybar) ** 2 for c, m in zip(counts, sizes))
    ssw = sum(c * (1 - c / m) for c, m in zip(counts, sizes))
    msb = ssb / (k - 1)
    msw = ssw / (n - k)
    m0 = (n - sum(m * m for m in sizes) / n) / (k - 1)
    est = max(0.0, (msb - msw) / (msb + (m0 - 1) * msw))
    return {"counts": counts, "sizes": sizes, "est": est}


def beta_binomial(m, p, icc):
    if icc == 0:
        q = p
    else:
        s = 1 / icc - 1
        q = rng.betavariate(p * s, (1 - p) * s)
    return sum(1 for _ in range(m) if rng.random() < q)


def wilson(x, n, z):
    p = x / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo, hi = max(0.0, center - half), min(1.0, center + half)
    if x == 0:
        lo = 0.0
    if x >= n:
        hi = 1.0
    return lo, hi


def mover(terms, z):
    est = lo2 = hi2 = 0.0
    for c, x, n in terms:
        p = x / n
        l, u = wilson(x, n, z)
        est += c * p
        if c > 0:
            lo2 += c * c * (p - l) ** 2
            hi2 += c * c * (u - p) ** 2
        else:
            lo2 += c * c * (u - p) ** 2
            hi2 += c * c * (p - l) ** 2
    return est, est - math.sqrt(lo2), est + math.sqrt(hi2)


def mover_p(terms):
    est, _, _ = mover(terms, 0)
    if est == 0:
        return 1.0

    def gap(z):
        _, lo, hi = mover(terms, z)
        return lo if est > 0 else -hi

    if gap(30) > 0:
        return None
    z = optimize.brentq(gap, 0, 30, xtol=1e-14, rtol=1e-14)
    return 2 * stats.norm.sf(z)


cases = {"icc": [], "spread": [], "welch": [], "contrast": [], "effective": []}

for _ in range(60):
    k = rng.choice([2, 3, 4, 8, 12, 16])
    p = rng.choice([0.02, 0.1, 0.3, 0.5])
    icc = rng.choice([0, 0.02, 0.1, 0.3])
    sizes = [rng.choice([30, 60, 60, 61, 120]) for _ in range(k)]
    counts = [beta_binomial(m, p, icc) for m in sizes]
    if sum(counts) == 0 or sum(counts) == sum(sizes):
        continue
    ssw = sum(c * (1 - c / m) for c, m in zip(counts, sizes))
    if ssw == 0:
        continue
    cases["icc"].append(icc_case(counts, sizes))
    rng.choice([0.9, 0.95, 0.99])

for _ in range(40):
    groups = [[rng.gauss(0, 0.05) for _ in range(rng.choice([1, 2, 3, 6]))] for _ in range(rng.choice([1, 2, 3]))]
    df = sum(len(g) - 1 for g in groups)
    if df == 0:
        continue
    ss = sum(sum((x - np.mean(g)) ** 2 for x in g) for g in groups)
    conf = rng.choice([0.9, 0.95, 0.99])
    cases["spread"].append({"groups": groups, "conf": conf, "sd": math.sqrt(ss / df),
                            "upper": math.sqrt(ss / stats.chi2.ppf(1 - conf, df)), "df": df})

for _ in range(60):
    a = [rng.choice([0, 1, 2, 5, 9, 14]) / 60 for _ in range(rng.choice([2, 3, 4]))]
    b = [rng.choice([0, 3, 7, 12, 20, 31]) / 60 for _ in range(rng.choice([2, 3, 5]))]
    if np.var(a) == 0 and np.var(b) == 0:
        continue
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    conf = rng.choice([0.9, 0.95, 0.97])
    d = np.mean(b) - np.mean(a)
    q = stats.t.ppf(1 - (1 - conf) / 2, df)
    se = math.sqrt(va + vb)
    p = 2 * stats.t.sf(abs(d) / se, df)
    cases["welch"].append({"a": a, "b": b, "conf": conf, "p": float(p), "df": float(df),
                           "lo": d - q * se, "hi": d + q * se})

for _ in range(60):
    nterms = rng.choice([2, 2, 4, 8])
    terms = []
    for i in range(nterms):
        n = rng.choice([7.3, 13.3, 60, 120, 240.5])
        x = rng.choice([0.0, 0.5, 1.7, n * 0.1, n * 0.5, n])
        c = rng.choice([-1, 1, -0.5, 0.5, 0.25, -0.25])
        terms.append([c, x, n])
    conf = rng.choice([0.95, 0.97, 0.99])
    est, lo, hi = mover(terms, stats.norm.ppf(1 - (1 - conf) / 2))
    p = mover_p(terms)
    if p is None:
        continue
    cases["contrast"].append({"terms": terms, "conf": conf, "est": est, "lo": lo, "hi": hi, "p": p})

for _ in range(30):
    sizes = [rng.choice([30, 60, 120]) for _ in range(rng.choice([1, 2, 4]))]
    counts = [rng.randint(0, m) for m in sizes]
    icc = rng.choice([0, 0.02, 0.1, 0.5])
    m = sum(sizes)
    w = sum(s * (1 + (s - 1) * icc) for s in sizes)
    n = m * m / w
    cases["effective"].append({"counts": counts, "sizes": sizes, "icc": icc, "events": sum(counts) / m * n, "sessions": n})

print(json.dumps(cases, indent=1))
