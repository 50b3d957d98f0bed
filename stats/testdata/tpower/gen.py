#!/usr/bin/python3
"""Reference values for planning a speed claim, written independently of the Go code
(scipy):

  survival  P(T > x) of the noncentral t, scipy.stats.nct.sf(x, df, delta)
  power     the one-sided pooled t test on k launches per arm at a level, launches' logs
            of standard deviation sd, the true difference clearing the threshold by
            shift: nct.sf(t.ppf(1 - level, 2k - 2), 2k - 2, shift / (sd * sqrt(2 / k)))
  zpower    the one-sided z test against a noise floor on k launches per arm: the
            difference weighed with the floor's bound b, the launches truly of sd:
            norm.sf((norm.ppf(1 - level) * b * sqrt(2 / k) - shift) / (sd * sqrt(2 / k)))
  needed    the fewest k from 2 up to 64 whose power reaches the target (0: none)

Regenerate with Debian's python (apt-get install python3-scipy):

  cd stats/testdata/tpower && /usr/bin/python3 gen.py > reference.json
"""
import json
import math

import warnings

from scipy import stats

# scipy warns on its way to some far tails; the values it returns are finite and checked.
warnings.simplefilter("ignore", RuntimeWarning)


def power(k, sd, shift, level):
    df = 2 * k - 2
    return float(stats.nct.sf(stats.t.ppf(1 - level, df), df, shift / (sd * math.sqrt(2 / k))))


survival = []
for df in [1, 2, 3, 6, 10, 30, 62]:
    for delta in [-2.0, 0.0, 0.5, 1.7, 4.0, 9.0]:
        for x in [-3.0, 0.0, 1.0, 2.9, 6.0]:
            survival.append({"df": df, "delta": delta, "x": x, "p": float(stats.nct.sf(x, df, delta))})

pw = []
for k in [2, 3, 4, 6, 10, 25]:
    for sd in [0.01, 0.03, 0.075]:
        for shift in [-0.01, 0.0, -math.log(0.95), -math.log(0.9)]:
            for level in [0.01, 0.025, 0.05]:
                pw.append({"k": k, "sd": sd, "shift": shift, "level": level, "power": power(k, sd, shift, level)})

zpower = []
for k in [1, 2, 3]:
    for sd, b in [(0.01, 0.02), (0.03, 0.03), (0.075, 0.05)]:
        for shift in [0.0, -math.log(0.95), -math.log(0.9)]:
            for level in [0.01, 0.05]:
                se = math.sqrt(2 / k)
                p = float(stats.norm.sf((stats.norm.ppf(1 - level) * b * se - shift) / (sd * se)))
                zpower.append({"k": k, "sd": sd, "bound": b, "shift": shift, "level": level, "power": p})

needed = []
for sd in [0.005, 0.012, 0.03, 0.075, 0.2]:
    for shift in [-math.log(0.95), -math.log(0.9)]:
        for level, target in [(0.01, 0.8), (0.05, 0.9)]:
            n = 0
            for k in range(2, 65):
                if power(k, sd, shift, level) >= target:
                    n = k
                    break
            needed.append({"sd": sd, "shift": shift, "level": level, "power": target, "needed": n})

json.dump({"survival": survival, "power": pw, "zpower": zpower, "needed": needed}, __import__("sys").stdout, indent=1)
