"""Reference tipping points for verdict's TestTippingPointMatchesABruteForceSearch.

For a comparison of an arm with the baseline in which sessions were lost, the tipping point
re-runs the two-sided Fisher exact test with every lost session counted, labelled against
the decision: the fewest lost sessions of one side that must be corrupted (every other
lost session counted clean) to change the decision taken on the analysed sessions.
This is an independent brute force with scipy. Run: /usr/bin/python3 tipping.py
"""
from scipy.stats import fisher_exact

ALPHA = 0.05


def decide(b, nb, a, na):
    p = fisher_exact([[b, nb - b], [a, na - a]]).pvalue
    if p > ALPHA * (1 + 1e-9):
        return "none", p
    return ("higher" if a / na > b / nb else "lower"), p


def tipping(b, nb, lb, a, na, la):
    frm, p = decide(b, nb, a, na)
    NB, NA = nb + lb, na + la

    def search(arm_side, stop):
        lost = la if arm_side else lb
        for k in range(lost + 1):
            d = decide(b, NB, a + k, NA)[0] if arm_side else decide(b + k, NB, a, NA)[0]
            if stop(d):
                return k, d
        return -1, ""

    if frm == "higher":
        k, to = search(False, lambda d: d != "higher")
        side = "control"
    elif frm == "lower":
        k, to = search(True, lambda d: d != "lower")
        side = "treatment"
    else:
        ka, da = search(True, lambda d: d == "higher")
        kb, db = search(False, lambda d: d == "lower")
        if ka >= 0 and (kb < 0 or ka <= kb):
            k, to, side = ka, da, "treatment"
        elif kb >= 0:
            k, to, side = kb, db, "control"
        else:
            k, to, side = -1, "", ""
    if k < 0:
        side, to = "", ""
    return frm, p, k, side, to


CASES = {
    "significant, robust": (0, 60, 0, 8, 50, 10),
    "not significant, control lost": (0, 50, 10, 5, 60, 0),
    "not significant, treatment lost": (1, 60, 0, 5, 52, 8),
    "significant, control lost": (2, 45, 15, 12, 60, 0),
}

for name, c in CASES.items():
    frm, p, k, side, to = tipping(*c)
    print(f"{name}: analysed p = {p:.4g}, from {frm}: {k} of {side or '-'}'s lost sessions -> {to or '-'}")
