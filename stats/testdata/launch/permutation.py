#!/usr/bin/env python3
"""Reference values for stats.LaunchPermutation, computed independently by brute force.

For each case, every way of relabelling the pooled launch values as A (len(a) of them)
or B is enumerated with itertools.combinations, and the two-sided p-value is the share
of relabellings whose |mean(B) - mean(A)| is at least the observed one (with a relative
tolerance of 1e-9 for ties). Launch values are corruption rates k/60 and a few log
tok/s values. Run: /usr/bin/python3 permutation.py > permutation.json
"""
import itertools
import json
import math
import random

def pvalue(a, b):
    pooled = a + b
    nb = len(b)
    obs = abs(sum(b) / len(b) - sum(a) / len(a))
    tol = 1e-9 * (1 + obs + abs(sum(pooled)) / len(pooled))
    extreme = total = 0
    idx = range(len(pooled))
    for chosen in itertools.combinations(idx, nb):
        s = set(chosen)
        bb = [pooled[i] for i in chosen]
        aa = [pooled[i] for i in idx if i not in s]
        d = abs(sum(bb) / len(bb) - sum(aa) / len(aa))
        total += 1
        if d >= obs - tol:
            extreme += 1
    return extreme / total

rng = random.Random(20261202)
cases = []
fixed = [
    ([0 / 60, 0 / 60], [1 / 60, 1 / 60]),
    ([0.0] * 4, [0.1] * 4),
    ([0.0] * 4, [0.1, 0.1, 0.1, 0.0]),
    ([0.05, 0.1, 0.0], [0.2, 0.15, 0.3]),
    ([0.0], [0.5]),
    ([1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]),
]
for a, b in fixed:
    cases.append({"a": a, "b": b, "p": pvalue(a, b)})
while len(cases) < 120:
    na, nb = rng.randint(1, 6), rng.randint(1, 6)
    if rng.random() < 0.6:
        rate = rng.choice([0.0, 0.02, 0.1, 0.3])
        shift = rng.choice([0.0, 0.0, 0.05, 0.15])
        a = [sum(rng.random() < rate for _ in range(60)) / 60 for _ in range(na)]
        b = [sum(rng.random() < rate + shift for _ in range(60)) / 60 for _ in range(nb)]
    else:
        a = [math.log(rng.gauss(100, 3)) for _ in range(na)]
        b = [math.log(rng.gauss(rng.choice([100, 104, 110]), 3)) for _ in range(nb)]
    cases.append({"a": a, "b": b, "p": pvalue(a, b)})
print(json.dumps({"cases": cases}, indent=1))
