#!/usr/bin/python3
"""Reference values for stats.Interaction, the MOVER-Wilson interval of the additive
interaction contrast (p11 - p10) - (p01 - p00) of a 2x2 factorial table.

Independent of the Go code: Wilson limits come from statsmodels' proportion_confint, and
the MOVER combination (Zou & Donner 2008) is written out here from the paper's formulas.

Regenerate with Debian's python (scipy/statsmodels: apt-get install python3-statsmodels):
    /usr/bin/python3 stats/testdata/interaction/gen.py > stats/testdata/interaction/reference.json
"""
import json
import math
import random

from statsmodels.stats.proportion import proportion_confint


def mover(cells, conf):
    alpha = 1 - conf
    est, lo2, hi2 = 0.0, 0.0, 0.0
    for (a, b), (x, n) in cells.items():
        c = 1.0 if a == b else -1.0
        p = x / n
        l, u = proportion_confint(x, n, alpha=alpha, method="wilson")
        est += c * p
        if c > 0:
            lo2 += (p - l) ** 2
            hi2 += (u - p) ** 2
        else:
            lo2 += (u - p) ** 2
            hi2 += (p - l) ** 2
    return est, est - math.sqrt(lo2), est + math.sqrt(hi2)


def main():
    rng = random.Random(20261130)
    cases = []
    fixed = [
        [[0, 60], [0, 60], [0, 60], [14, 60]],
        [[0, 120], [8, 120], [0, 120], [49, 120]],
        [[0, 1], [0, 1], [0, 1], [1, 1]],
        [[5, 5], [0, 5], [0, 5], [5, 5]],
        [[0, 40], [0, 40], [0, 40], [0, 40]],
    ]
    for cell in fixed:
        cases.append(cell)
    while len(cases) < 240:
        cell = []
        for _ in range(4):
            n = rng.choice([1, 2, 5, 10, 30, 60, 200, 1000, rng.randint(1, 500)])
            p = rng.choice([0.0, 0.01, 0.05, 0.12, 0.5, 0.9, 1.0, rng.random()])
            x = sum(1 for _ in range(n) if rng.random() < p) if n <= 1000 else int(n * p)
            cell.append([x, n])
        cases.append(cell)
    out = []
    for cell in cases:
        for conf in (0.95, 0.9):
            cells = {(0, 0): cell[0], (0, 1): cell[1], (1, 0): cell[2], (1, 1): cell[3]}
            est, lo, hi = mover(cells, conf)
            out.append({"cells": cell, "conf": conf, "estimate": est, "lo": lo, "hi": hi})
    json.dump({"mover_interaction": out}, __import__("sys").stdout, indent=1)


if __name__ == "__main__":
    main()
