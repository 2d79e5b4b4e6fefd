#!/usr/bin/env python3
"""bench/run.py -- runs every hheap benchmark and prints one table per region.

Called by `make bench` (see mk/bench.mk); Python 3 standard library only.

What it runs, one program at a time (the machine has 2 cores: parallel runs
would disturb each other's timings):
  1. build/bench/bench_heap (this harness's own cases);
  2. for every other bench/bench_<name>.c: the `bench-<name>` target if some
     mk/*.mk defines one (so a module's own peers and flags come with it), else
     `make build/bench/bench_<name>` (the generic rule of mk/bench.mk) and the
     program itself;
  3. every other `bench-*` target that a mk/*.mk fragment defines;
  4. the callgrind instruction counts (build/bench/bench_instr), if valgrind exists.
Every program prints BENCH lines (format in bench/bench_util.h) and free-form
notes; the notes are echoed, the BENCH lines are collected into tables and into
the JSON file given with --out (one object per case).

A program that fails to build, exits non-zero or runs past its time limit is
reported and the run goes on; the exit status is then 1.
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

# Targets of mk/bench.mk itself, never run as a benchmark.
OWN_TARGETS = {"bench", "bench-instr", "bench-compare", "bench-smoke"}
# Programs the runner handles specially (not run as ordinary benchmarks).
SPECIAL_PROGRAMS = {"heap", "instr", "util"}

# The issues' targets. A number is a ratio to the same-run baseline; ("abs",
# n) bounds our own median (instruction counts: the baseline is context).
GOALS = {
    ("heap", "deref_seq"): 1.2,
    ("heap", "deref_shuffled"): 2.0,
    ("heap", "alloc_free_churn"): 1.0,
    ("heap", "alloc_free_churn_16_1024"): 1.2,
    ("heap", "alloc_free_64B_lifo"): 1.2,
    ("heap", "mem_total_32B"): 1.1,
    ("heap", "mem_overhead_mix"): ("abs", 16),
    ("heap", "hh_alloc_64B"): ("abs", 110),
    ("heap", "hh_free_64B"): ("abs", 90),
    ("binned", "hh_bmalloc+hh_bfree_64B_pair"): ("abs", 70),
}


def goal_check(r):
    """(text for the goal column, miss description or None) of result r."""
    goal = GOALS.get((r["region"], r["case"]))
    if goal is None:
        return "", None
    if isinstance(goal, tuple):
        # Judged as printed, to two decimals: an instruction count holds the
        # framing of its one call (the loop's entry and exit, about 13
        # instructions per 10,000 ops), which is no op's.
        value, bound, what = round(r["ours"]["median"], 2), goal[1], f"<={goal[1]:g}"
    elif r["ratio"] is not None:
        value, bound, what = r["ratio"], goal, f"<={goal:g}x"
    else:
        return "", None
    if value <= bound:
        return what + " ok", None
    return what + " MISSED", f"{r['region']}/{r['case']} {value:.2f} > {what[2:]}"


def quick():
    q = os.environ.get("QUICK", "")
    return q not in ("", "0")


def note(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# BENCH lines
# ---------------------------------------------------------------------------
def parse_bench(line, source):
    """One BENCH line -> dict, or None if it does not follow the format."""
    f = line.split()
    if len(f) != 11 or f[0] != "BENCH":
        return None
    try:
        ours = [float(x) for x in f[4:7]]
        base = [float(x) for x in f[8:11]]
    except ValueError:
        return None
    ratio = ours[0] / base[0] if base[0] != 0 else None
    return {
        "region": f[1], "case": f[2], "unit": f[3],
        "ours": {"median": ours[0], "min": ours[1], "max": ours[2]},
        "baseline": {"name": f[7], "median": base[0], "min": base[1], "max": base[2]},
        "ratio": ratio,
        "higher_is_better": f[3].endswith("/s"),
        "source": source,
    }


def run_capture(cmd, timeout, env=None, cwd=None):
    """Runs cmd, echoing notes as they come; returns (rc, [BENCH lines], seconds)."""
    import threading
    t0 = time.monotonic()
    benches = []
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, cwd=cwd, errors="replace", start_new_session=True)
    except OSError as e:
        note(f"  cannot run {cmd[0]}: {e}")
        return 127, benches, 0.0

    def reader():
        for line in p.stdout:
            handle_line(line.rstrip("\n"), benches)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, 9)        # the program and anything make started for it
        except OSError:
            p.kill()
        p.wait()
        th.join(5)
        note(f"  TIMEOUT after {timeout:.0f} s: {' '.join(cmd)}")
        return 124, benches, time.monotonic() - t0
    th.join()
    return rc, benches, time.monotonic() - t0


def handle_line(line, benches):
    if line.startswith("BENCH "):
        benches.append(line)
    elif line.strip() and not re.match(r"^make(\[\d+\])?: (Entering|Leaving) directory", line):
        note("  | " + line)


# ---------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------
def fragment_targets():
    """bench-* targets defined by mk/*.mk fragments other than mk/bench.mk."""
    found = []
    for mk in sorted(glob.glob("mk/*.mk")):
        if os.path.basename(mk) == "bench.mk":
            continue
        with open(mk, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = re.match(r"^(bench-[A-Za-z0-9_.-]+)\s*:(?!=)", line)
                if m and m.group(1) not in OWN_TARGETS and m.group(1) not in found:
                    found.append(m.group(1))
    return found


def bench_programs():
    names = []
    for src in sorted(glob.glob("bench/bench_*.c")):
        name = os.path.basename(src)[len("bench_"):-2]
        if name not in SPECIAL_PROGRAMS:
            names.append(name)
    return names


# ---------------------------------------------------------------------------
# Instruction counts under callgrind
# ---------------------------------------------------------------------------
def run_instr(build, timeout):
    """Runs bench_instr under callgrind; returns BENCH lines built from the dumps."""
    exe = os.path.join(build, "bench", "bench_instr")
    if not shutil.which("valgrind"):
        note("  valgrind not found: no instruction counts")
        return 0, []
    if not os.path.exists(exe):
        note(f"  {exe} missing: no instruction counts")
        return 1, []
    tmp = tempfile.mkdtemp(prefix="hh-instr-")
    try:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no",
               f"--callgrind-out-file={tmp}/cg.out", exe]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        if p.returncode != 0:
            note(f"  bench_instr under callgrind failed (exit {p.returncode}):")
            for line in p.stderr.splitlines()[-10:]:
                note("  | " + line)
            return 1, []
        # The driver prints "INSTR <region> <case> <ops> <dump-name> <baseline> <ops> <dump-name>".
        counts = {}
        for path in glob.glob(os.path.join(tmp, "cg.out*")):
            name, total = None, None
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("desc: Trigger: Client Request: "):
                        name = line.split(": ", 2)[2].replace("Client Request: ", "").strip()
                    elif line.startswith("summary:") or line.startswith("totals:"):
                        total = int(line.split()[1])
            if name is not None and total is not None:
                counts[name] = total
        out = []
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) == 8 and f[0] == "INSTR":
                _, region, case, ops, dump, base, bops, bdump = f
                if dump not in counts or bdump not in counts:
                    note(f"  instr: no callgrind dump for {case}")
                    continue
                ours = counts[dump] / float(ops)
                theirs = counts[bdump] / float(bops)
                out.append(f"BENCH {region} {case} Ir/op {ours:.6g} {ours:.6g} {ours:.6g} "
                           f"{base} {theirs:.6g} {theirs:.6g} {theirs:.6g}")
            elif line.strip():
                note("  | " + line)
        return 0, out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------
def fmt(x):
    if x is None:
        return "-"
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def spread(s):
    if s["median"] == 0:
        return f"{fmt(s['min'])}-{fmt(s['max'])}"
    rel = (s["max"] - s["min"]) / abs(s["median"]) * 100
    return f"{fmt(s['min'])}-{fmt(s['max'])} ({rel:.0f}%)"


def print_tables(results):
    regions = []
    for r in results:
        if r["region"] not in regions:
            regions.append(r["region"])
    for region in regions:
        rows = [r for r in results if r["region"] == region]
        head = ["case", "unit", "ours", "baseline", "base", "ratio", "goal", "ours min-max", "base min-max"]
        table = [head]
        for r in rows:
            gtxt = goal_check(r)[0]
            ratio = fmt(r["ratio"]) + ("x" if r["ratio"] is not None else "")
            if r["higher_is_better"]:
                ratio += " (higher better)"
            table.append([r["case"], r["unit"], fmt(r["ours"]["median"]), r["baseline"]["name"],
                          fmt(r["baseline"]["median"]), ratio, gtxt, spread(r["ours"]), spread(r["baseline"])])
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        print()
        print(f"== {region}")
        for k, row in enumerate(table):
            cells = []
            for i, c in enumerate(row):
                cells.append(c.ljust(widths[i]) if i in (0, 1, 3, 6) else c.rjust(widths[i]))
            print("  " + "  ".join(cells).rstrip())
            if k == 0:
                print("  " + "  ".join("-" * w for w in widths))
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="out/bench/results.json")
    ap.add_argument("--instr-only", action="store_true", help="only the callgrind instruction counts")
    ap.add_argument("--no-instr", action="store_true")
    args = ap.parse_args()

    make = os.environ.get("MAKE", "make") or "make"
    is_quick = quick()
    limit = 60.0 if is_quick else 200.0
    t_start = time.monotonic()
    failures = []
    lines = []          # (BENCH line, source)

    if args.instr_only:
        note("== instruction counts (callgrind)")
        rc, out = run_instr(args.build, 300)
        results = [parse_bench(l, "bench_instr") for l in out]
        print_tables([r for r in results if r])
        return rc

    def account(source, rc, benches, secs):
        note(f"  ({source}: {secs:.1f} s, {len(benches)} cases{'' if rc == 0 else f', EXIT {rc}'})")
        if rc != 0:
            failures.append(f"{source} (exit {rc})")
        for b in benches:
            lines.append((b, source))

    env = dict(os.environ)
    env["QUICK"] = "1" if is_quick else "0"

    # 1. our own cases
    note(f"== bench_heap{' (QUICK)' if is_quick else ''}")
    exe = os.path.join(args.build, "bench", "bench_heap")
    rc, benches, secs = run_capture([exe], limit, env=env)
    account("bench_heap", rc, benches, secs)

    # 1b. a recorded frame workload replayed by hh-replay, then any other trace
    #     under out/ (e.g. the demo's), at most 3
    replay = os.path.join(args.build, "hh-replay")
    if os.path.exists(replay):
        trace = os.path.join(os.path.dirname(args.out) or ".", "frames.hhtrace")
        note(f"== hh-replay {trace}")
        rc, benches, secs = run_capture([exe, "--record", trace], limit, env=env)
        account("bench_heap --record", rc, benches, secs)
        traces = [trace] if rc == 0 else []
        # Only traces recorded by this build: placement is a property of the
        # library version, so a trace older than hh-replay may have been
        # recorded by another one and would replay as DIFFERS.
        built = os.path.getmtime(replay)
        others = sorted(t for t in glob.glob("out/**/*.hhtrace", recursive=True)
                        if os.path.abspath(t) != os.path.abspath(trace))
        stale = [t for t in others if os.path.getmtime(t) < built]
        if stale:
            note(f"  hh-replay: {len(stale)} trace(s) under out/ older than {replay} skipped (another build may have recorded them)")
        traces += [t for t in others if t not in stale][:3]
        for t in traces:
            if t != trace:
                note(f"== hh-replay {t}")
            rc, benches, secs = run_capture([replay, t], limit, env=env)
            account(f"hh-replay {os.path.basename(t)}", rc, benches, secs)

    # 2. + 3. every other program and bench-* target
    targets = fragment_targets()
    done_targets = set()
    for name in bench_programs():
        target = f"bench-{name}"
        if target in targets:
            note(f"== make {target}")
            rc, benches, secs = run_capture([make, "--no-print-directory", "-s", target], limit, env=env)
            done_targets.add(target)
            account(target, rc, benches, secs)
            continue
        exe = os.path.join(args.build, "bench", f"bench_{name}")
        note(f"== bench_{name}")
        b = subprocess.run([make, "--no-print-directory", "-s", exe], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)
        if b.returncode != 0:
            note(f"  build of {exe} failed:")
            for line in b.stdout.splitlines()[-8:]:
                note("  | " + line)
            failures.append(f"bench_{name} (build)")
            continue
        rc, benches, secs = run_capture([exe], limit, env=env)
        account(f"bench_{name}", rc, benches, secs)
    for target in targets:
        if target in done_targets:
            continue
        note(f"== make {target}")
        # A target whose sources do not exist yet (a module still being written)
        # is skipped with a note; a dry run tells without building anything.
        dry = subprocess.run([make, "--no-print-directory", "-n", target], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env)
        if dry.returncode != 0:
            note(f"  skipped: {target} cannot be made here ({dry.stdout.strip().splitlines()[-1:]})")
            continue
        rc, benches, secs = run_capture([make, "--no-print-directory", "-s", target], limit, env=env)
        account(target, rc, benches, secs)

    # 4. instruction counts
    if not args.no_instr:
        note("== instruction counts (callgrind)")
        t0 = time.monotonic()
        rc, out = run_instr(args.build, 120)
        account("bench_instr", rc, out, time.monotonic() - t0)

    results = []
    for line, source in lines:
        r = parse_bench(line, source)
        if r is None:
            note(f"  malformed BENCH line from {source}: {line}")
            failures.append(f"{source} (malformed line)")
        else:
            results.append(r)

    print_tables(results)
    total = time.monotonic() - t_start
    meta = {
        "quick": is_quick, "seconds": round(total, 1),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
        "machine": platform.machine(), "cpus": os.cpu_count(),
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"meta": meta, "cases": results}, fh, indent=1)
        fh.write("\n")
    print()
    print(f"bench: {len(results)} cases in {total:.0f} s -> {args.out}")
    misses = [m for m in (goal_check(r)[1] for r in results) if m]
    if misses:
        print("goals missed (reported, not failed): " + "; ".join(misses))
    if failures:
        print("bench: FAILED: " + ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
