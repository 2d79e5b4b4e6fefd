#!/usr/bin/env python3
"""bench/compare.py -- compares two results.json files of `make bench`.

    python3 bench/compare.py OLD.json NEW.json      (make bench-compare OLD=... NEW=...)

For every case present in both runs (same region, case and baseline) it compares
the ratio ours/baseline, which cancels machine drift between the runs, and flags
a REGRESSION when the new ratio is worse than the old one by more than the
measured spread: the relative min-max spread of ours plus that of the baseline,
the larger of the two runs' (at least 1%, so that deterministic figures such as
instruction counts and bytes are flagged when they grow by more than 1%).
"Worse" is higher for ns, bytes and instruction counts, lower for units ending
in "/s". Improvements beyond the spread are listed too.

Exit status: 0 no regression, 1 at least one regression, 2 bad input.
"""
import json
import sys

FLOOR = 0.01


def load(path):
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        print(f"bench-compare: cannot read {path}: {e}")
        sys.exit(2)
    cases = data["cases"] if isinstance(data, dict) else data
    out = {}
    for c in cases:
        out[(c["region"], c["case"], c["baseline"]["name"])] = c
    meta = data.get("meta", {}) if isinstance(data, dict) else {}
    return out, meta


def rel_spread(s):
    m = abs(s["median"])
    return (s["max"] - s["min"]) / m if m else 0.0


def ratio_spread(c):
    return rel_spread(c["ours"]) + rel_spread(c["baseline"])


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    old, old_meta = load(sys.argv[1])
    new, new_meta = load(sys.argv[2])
    if old_meta.get("quick") != new_meta.get("quick"):
        print("bench-compare: note: comparing a QUICK run with a full run; spreads are wider")
    rows, regressions, improvements = [], 0, 0
    for key in sorted(set(old) & set(new)):
        o, n = old[key], new[key]
        if not o.get("ratio") or not n.get("ratio"):
            continue
        change = n["ratio"] / o["ratio"] - 1.0
        higher_better = n.get("higher_is_better", False)
        worse = -change if higher_better else change
        tol = max(ratio_spread(o), ratio_spread(n), FLOOR)
        verdict = ""
        if worse > tol:
            verdict = "REGRESSION"
            regressions += 1
        elif -worse > tol:
            verdict = "improved"
            improvements += 1
        rows.append([f"{key[0]}/{key[1]}", n["unit"], f"{o['ratio']:.3g}x", f"{n['ratio']:.3g}x",
                     f"{change * 100:+.1f}%", f"±{tol * 100:.0f}%",
                     f"{o['ours']['median']:.4g} -> {n['ours']['median']:.4g}", verdict])
    head = ["case", "unit", "old ratio", "new ratio", "change", "spread", "ours old -> new", ""]
    table = [head] + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for k, r in enumerate(table):
        print("  " + "  ".join(c.ljust(widths[i]) if i in (0, 1, 7) else c.rjust(widths[i])
                               for i, c in enumerate(r)).rstrip())
        if k == 0:
            print("  " + "  ".join("-" * w for w in widths))
    only_old = sorted(set(old) - set(new))
    only_new = sorted(set(new) - set(old))
    if only_old:
        print("only in OLD: " + ", ".join(f"{k[0]}/{k[1]}" for k in only_old))
    if only_new:
        print("only in NEW: " + ", ".join(f"{k[0]}/{k[1]}" for k in only_new))
    print(f"bench-compare: {len(rows)} cases, {regressions} regression(s), {improvements} improvement(s)")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
