#!/usr/bin/python3
"""Reference values for the statistics a verdict decides with, written independently of
the Go code (numpy, scipy, statsmodels):

  donner        Donner's adjusted chi-square (Donner & Klar 2000): the pooled
                within-arm one-way ANOVA ICC on the expanded 0/1 responses, each arm's
                correction C_i = sum m(1 + (m - 1) rho) / sum m, and
                X2 = sum_i n_i (p_i - p)^2 / (C_i p (1 - p)); on the clustering cases of
                ../extra/reference.json
  launch_t      the pooled two-sample t test on launch-level corruption rates, by
                scipy.stats.ttest_ind(equal_var=True), and its t interval
  mover_p       the additive interaction's p-value: the alpha at which the MOVER-Wilson
                interval (Wilson limits from statsmodels' proportion_confint) touches 0,
                found by brentq; on the tables of ../interaction/reference.json
  repeated_ci   repeated confidence intervals of a rate difference at the looks of the
                K = 4, alpha = 0.05 Lan-DeMets O'Brien-Fleming design (DeMets & Lan 1994:
                z = 4.3326, 2.9631, 2.3590, 2.0141): statsmodels' Newcombe interval
                (confint_proportions_2indep, method="newcomb") at level 1 - 2(1 - Phi(z))

Fay's mid-p, the other convention decided here, is checked with the Fisher cases of
../core (fay_mid_p in ../core/gen.py).

Regenerate with Debian's python (apt-get install python3-scipy python3-statsmodels):

  cd stats/testdata/decisions && /usr/bin/python3 gen.py > reference.json

Written with scipy 1.10.1, statsmodels 0.13.5, numpy 1.24.2. The seed is fixed.
"""
import json
import math

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.proportion import (confint_proportions_2indep,
                                          proportion_confint)

rng = np.random.default_rng(20261201)


def num(v):
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return None
    return v


# ---------------------------------------------------------------- Donner

def pooled_icc(arms):
    """Within-arm one-way ANOVA estimate of the ICC over the expanded 0/1 responses."""
    y, cluster, arm_of = [], [], []
    cid = 0
    for ai, arm in enumerate(arms):
        for e, m in arm:
            if m == 0:
                continue
            y += [1.0] * e + [0.0] * (m - e)
            cluster += [cid] * m
            arm_of.append(ai)
            cid += 1
    y, cluster, arm_of = np.array(y), np.array(cluster), np.array(arm_of)
    k, n = cid, len(y)
    if k - len(arms) <= 0 or n - k <= 0:
        return float("nan")
    sizes = np.bincount(cluster, minlength=k).astype(float)
    means = np.bincount(cluster, weights=y, minlength=k) / sizes
    ssb, sum_within = 0.0, 0.0
    for ai in range(len(arms)):
        sel = arm_of == ai
        arm_mean = (means[sel] * sizes[sel]).sum() / sizes[sel].sum()
        ssb += (sizes[sel] * (means[sel] - arm_mean) ** 2).sum()
        sum_within += (sizes[sel] ** 2).sum() / sizes[sel].sum()
    ssw = ((y - means[cluster]) ** 2).sum()
    msb, msw = ssb / (k - len(arms)), ssw / (n - k)
    m0 = (n - sum_within) / (k - len(arms))
    den = msb + (m0 - 1) * msw
    if not den > 1e-12:
        return float("nan")
    return (msb - msw) / den


def donner(a, b):
    rho = pooled_icc([a, b])
    r = 0.0 if math.isnan(rho) or rho < 0 else rho
    out = {"a": a, "b": b, "icc": num(rho)}
    ys, ns, cs = [], [], []
    for arm, name in ((a, "a"), (b, "b")):
        m = np.array([mm for _, mm in arm if mm > 0], dtype=float)
        c = float((m * (1 + (m - 1) * r)).sum() / m.sum())
        out["correction_" + name] = c
        ys.append(sum(e for e, _ in arm))
        ns.append(sum(mm for _, mm in arm))
        cs.append(c)
    p = sum(ys) / sum(ns)
    if p in (0.0, 1.0):
        out["adjusted"], out["p"] = 0.0, 1.0
        return out
    x2 = sum(n * (y / n - p) ** 2 / (c * p * (1 - p)) for y, n, c in zip(ys, ns, cs))
    out["adjusted"], out["p"] = x2, float(stats.chi2.sf(x2, 1))
    return out


# ---------------------------------------------------------------- launch t test

def launch_case():
    ka, kb = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    mu = float(rng.choice([0.0, 0.02, 0.05, 0.1, 0.2, 0.5]))
    shift = float(rng.choice([0.0, 0.0, 0.05, 0.15]))
    rho = float(rng.choice([0.0, 0.02, 0.1]))

    def arm(k, mean):
        out = []
        for _ in range(k):
            m = int(rng.integers(20, 81))
            p = mean if rho == 0 or mean in (0.0, 1.0) else rng.beta(mean * (1 / rho - 1), (1 - mean) * (1 / rho - 1))
            out.append([int(rng.binomial(m, p)), m])
        return out

    return arm(ka, mu), arm(kb, min(1.0, mu + shift))


def launch_t(a, b, conf):
    ra = np.array([e / m for e, m in a])
    rb = np.array([e / m for e, m in b])
    df = len(ra) + len(rb) - 2
    diff = rb.mean() - ra.mean()
    sp = (((ra - ra.mean()) ** 2).sum() + ((rb - rb.mean()) ** 2).sum()) / df
    se = math.sqrt(sp * (1 / len(ra) + 1 / len(rb)))
    out = {"a": a, "b": b, "conf": conf, "df": df, "difference": float(diff), "se": se}
    if se == 0:
        return None  # the degenerate case is checked by hand in the Go tests
    res = stats.ttest_ind(rb, ra, equal_var=True)
    q = stats.t.ppf(1 - (1 - conf) / 2, df)
    out.update({"t": float(res.statistic), "p": float(res.pvalue), "lo": diff - q * se, "hi": diff + q * se})
    return out


# ---------------------------------------------------------------- MOVER p

def mover_bounds(cells, alpha):
    est, lo2, hi2 = 0.0, 0.0, 0.0
    for (i, j), (x, n) in cells.items():
        c = 1.0 if i == j else -1.0
        p = x / n
        l, u = proportion_confint(x, n, alpha=alpha, method="wilson")
        if x == 0:
            l = 0.0
        if x == n:
            u = 1.0
        est += c * p
        if c > 0:
            lo2 += (p - l) ** 2
            hi2 += (u - p) ** 2
        else:
            lo2 += (u - p) ** 2
            hi2 += (p - l) ** 2
    return est, est - math.sqrt(lo2), est + math.sqrt(hi2)


def mover_p(cell):
    cells = {(0, 0): cell[0], (0, 1): cell[1], (1, 0): cell[2], (1, 1): cell[3]}
    est, _, _ = mover_bounds(cells, 0.05)
    if est == 0:
        return 1.0

    def gap(log_alpha):
        _, lo, hi = mover_bounds(cells, math.exp(log_alpha))
        return lo if est > 0 else -hi

    # The interval excludes 0 at large alpha (narrow) and includes it at small alpha.
    lo, hi = math.log(1e-300), math.log(1 - 1e-12)
    if gap(lo) > 0:
        return None  # beyond double precision; not a reference case
    if gap(hi) <= 0:
        return 1.0
    return math.exp(optimize.brentq(gap, lo, hi, xtol=1e-14, rtol=1e-13))


# ---------------------------------------------------------------- repeated CIs

OBF4 = [4.3326, 2.9631, 2.3590, 2.0141]


def repeated_ci(a, na, b, nb, z):
    nominal = math.erfc(z / math.sqrt(2))
    lo, hi = confint_proportions_2indep(b, nb, a, na, method="newcomb", compare="diff", alpha=nominal)
    return {"a": a, "na": na, "b": b, "nb": nb, "nominal_p": nominal, "lo": float(lo), "hi": float(hi)}


def main():
    with open("../extra/reference.json") as f:
        clusters = json.load(f)["cluster"]
    with open("../interaction/reference.json") as f:
        tables = json.load(f)["mover_interaction"]
    ref = {"donner": [donner(c["a"], c["b"]) for c in clusters]}

    launches = []
    while len(launches) < 240:
        a, b = launch_case()
        c = launch_t(a, b, float(rng.choice([0.95, 0.9])))
        if c is not None:
            launches.append(c)
    ref["launch_t"] = launches

    seen, movers = set(), []
    for t in tables:
        key = json.dumps(t["cells"])
        if key in seen:
            continue
        seen.add(key)
        if any(n == 0 for _, n in t["cells"]):
            continue
        p = mover_p(t["cells"])
        if p is not None:
            movers.append({"cells": t["cells"], "p": p})
    ref["mover_p"] = movers

    rcis = []
    for z in OBF4:
        for a, na, b, nb in [(0, 60, 9, 60), (0, 120, 20, 120), (3, 180, 25, 180), (12, 240, 30, 240),
                             (0, 15, 2, 15), (5, 45, 5, 45), (60, 60, 0, 60)]:
            rcis.append(repeated_ci(a, na, b, nb, z))
    for _ in range(100):
        n = int(rng.integers(5, 300))
        z = float(rng.choice(OBF4))
        rcis.append(repeated_ci(int(rng.binomial(n, 0.05)), n, int(rng.binomial(n, 0.15)), n, z))
    ref["repeated_ci"] = rcis
    print(json.dumps(ref, separators=(",", ":")))


if __name__ == "__main__":
    main()
