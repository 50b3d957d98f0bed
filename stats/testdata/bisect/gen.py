#!/usr/bin/python3
"""Reference values for a bisection step's two boundaries, written independently of the
Go code (scipy):

  excess_upper   the one-sided upper bound of p_B - p_A that calls a subset clean:
                 Clopper-Pearson's upper bound of p_B minus its lower bound of p_A, each
                 at level/2 in one tail (scipy.stats.beta.ppf), 1 for an empty arm
  fisher         the two-sided Fisher exact p of the same tables (scipy.stats.fisher_exact),
                 which the corrupts boundary compares with a look's threshold

Regenerate with Debian's python (apt-get install python3-scipy):

  cd stats/testdata/bisect && /usr/bin/python3 gen.py > reference.json

Written with scipy 1.10.1. The seed is fixed.
"""
import json
import random

from scipy import stats


def cp_upper(x, n, tail):
    if x == n:
        return 1.0
    return float(stats.beta.ppf(1 - tail, x + 1, n - x))


def cp_lower(x, n, tail):
    if x == 0:
        return 0.0
    return float(stats.beta.ppf(tail, x, n - x + 1))


def excess_upper(a, n1, b, n2, level):
    if n1 == 0 or n2 == 0:
        return 1.0
    return cp_upper(b, n2, level / 2) - cp_lower(a, n1, level / 2)


rng = random.Random(20260313)
cases = []
# The tables a bisection meets: a clean good arm, a subset at 0 or at the culprit's rate.
fixed = [
    (0, 40, 0, 40), (0, 80, 0, 80), (0, 120, 0, 120), (0, 67, 0, 67), (0, 66, 0, 66),
    (0, 80, 12, 80), (1, 80, 0, 80), (2, 100, 3, 100), (0, 50, 50, 50), (50, 50, 0, 50),
    (0, 0, 0, 10), (3, 10, 0, 0),
]
for a, n1, b, n2 in fixed:
    for level in (0.05, 0.0056 / 3, 0.05 / 12 / 3, 1e-4):
        cases.append((a, n1, b, n2, level))
for _ in range(300):
    n1 = rng.randint(1, 300)
    n2 = rng.randint(1, 300)
    a = rng.randint(0, min(n1, max(1, n1 // 5)))
    b = rng.randint(0, min(n2, max(1, n2 // 3)))
    level = 10 ** rng.uniform(-5, -1)
    cases.append((a, n1, b, n2, level))

out = {"excess_upper": [], "fisher": []}
for a, n1, b, n2, level in cases:
    out["excess_upper"].append({"a": a, "n1": n1, "b": b, "n2": n2, "level": level,
                                "upper": excess_upper(a, n1, b, n2, level)})
    if n1 > 0 and n2 > 0:
        _, p = stats.fisher_exact([[a, n1 - a], [b, n2 - b]], alternative="two-sided")
        out["fisher"].append({"a": a, "n1": n1, "b": b, "n2": n2, "p": float(p)})
json.dump(out, __import__("sys").stdout, indent=1)
