"""Why a factorial verdict's log-odds table can show one p-value for several terms.

An independent Firth (Jeffreys-penalized) logistic fit of grouped binomial cells, with
main effects and two-way interactions coded -1/2 and +1/2, and a penalized likelihood-ratio
test per term (the term's coefficient fixed at 0, every other refitted). It reproduces the
equal p-values the verdict shows when the corrupted sessions sit in few cells: the data are
symmetric in those terms, so dropping any of them costs the same penalized likelihood.
Run: /usr/bin/python3 firth_symmetry.py

Output (scipy 1.10):
  verdict example (2x2: 0/60, 0/60, 1/60, 12/60)
    bf16_index_k  OR 9.753   p = 0.0162
    hicache       OR 3.197   p = 0.3164
    bf16_index_k x hicache  OR 10.22   p = 0.3164
  docs/results H200 run3 (2x2x2, only hicache=on,gate=0 corrupts: 11/60 and 54/60)
    b  OR 3.252    p = 0.7231     h  OR 15.37     p = 0.1686     g  OR 0.06504  p = 0.1686
    bxh OR 10.57   p = 0.7231     bxg OR 0.09457  p = 0.7231     hxg OR 0.004231 p = 0.1686
"""
import itertools

import numpy as np
from scipy.optimize import minimize
from scipy.stats import chi2


def design(cells, k):
    X, y, n = [], [], []
    for levels, events, size in cells:
        c = [l - 0.5 for l in levels]
        X.append([1] + c + [c[i] * c[j] for i in range(k) for j in range(i + 1, k)])
        y.append(events)
        n.append(size)
    return np.array(X, float), np.array(y, float), np.array(n, float)


def penalized_loglik(beta, X, y, n):
    eta = X @ beta
    ll = np.sum(-y * np.logaddexp(0, -eta) - (n - y) * np.logaddexp(0, eta))
    p = 1 / (1 + np.exp(-eta))
    _, logdet = np.linalg.slogdet(X.T @ ((n * p * (1 - p))[:, None] * X))
    return ll + 0.5 * logdet


def fit(X, y, n, fixed=None):
    free = [j for j in range(X.shape[1]) if j != fixed]
    best = None
    for start in (np.zeros(len(free)), np.full(len(free), -1.0), np.random.default_rng(1).normal(size=len(free))):
        def f(b):
            full = np.zeros(X.shape[1])
            full[free] = b
            return -penalized_loglik(full, X, y, n)
        r = minimize(f, start, method="BFGS", options={"gtol": 1e-10, "maxiter": 10000})
        if best is None or r.fun < best.fun:
            best = r
    full = np.zeros(X.shape[1])
    full[free] = best.x
    return full, -best.fun


def report(title, cells, names):
    k = len(names)
    X, y, n = design(cells, k)
    terms = names + [f"{names[i]} x {names[j]}" for i in range(k) for j in range(i + 1, k)]
    beta, top = fit(X, y, n)
    print(title)
    for j, term in enumerate(terms, 1):
        _, constrained = fit(X, y, n, fixed=j)
        lrt = 2 * (top - constrained)
        print(f"  {term:24s} OR {np.exp(beta[j]):<9.4g} p = {chi2.sf(lrt, 1):.4f}")


report("verdict example (2x2: 0/60, 0/60, 1/60, 12/60)",
       [((0, 0), 0, 60), ((0, 1), 0, 60), ((1, 0), 1, 60), ((1, 1), 12, 60)], ["bf16_index_k", "hicache"])
h200 = []
for b, h, g in itertools.product([0, 1], [0, 1], [0, 1]):
    events = (54 if b else 11) if (h == 1 and g == 0) else 0
    h200.append(((b, h, g), events, 60))
report("docs/results H200 run3 (2x2x2, only hicache=on,gate=0 corrupts: 11/60 and 54/60)", h200, ["b", "h", "g"])
