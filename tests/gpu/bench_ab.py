#!/usr/bin/env python3
# bench_ab.py: fi-bench's --json lines of two or more builds, measured on one card in
# one call, side by side: every row of every section, each build's median against the first's.
"""usage: bench_ab.py NAME=GLOB [NAME=GLOB ...]

Each NAME is a build; GLOB (quoted, expanded here) matches the JSON-lines files of its
fi-bench runs. A row is a measurement line's section ("bench") and its integer and text
fields (the shape, the variant); its figure is the first of us, fi_us, ms, tflops, tbs
present (times: lower is better; rates: higher is better). Per build: the median of the
runs (and the range when there are several); for each build after the first, the
change against the first, as a speed ratio (>1: faster), marked '*' when the runs' ranges
do not overlap. Lines that are not measurements are named on stderr and left out; exit
status 1 then, or when a glob matches nothing."""
import glob
import json
import statistics
import sys

TIMES = ("us", "fi_us", "ms")
RATES = ("tflops", "tbs")


def load(pattern, bad):
    rows = {}
    files = sorted(glob.glob(pattern))
    if not files:
        bad.append(f"{pattern}: no file matches")
    for f in files:
        with open(f, errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    j = json.loads(line)
                except json.JSONDecodeError as e:
                    bad.append(f"{f}:{n}: not JSON ({e.msg})")
                    continue
                if not isinstance(j, dict) or "bench" not in j:
                    continue
                metric = next((m for m in TIMES + RATES if isinstance(j.get(m), (int, float))), None)
                if metric is None:
                    continue
                key = tuple(sorted((k, v) for k, v in j.items()
                                   if isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))))
                rows.setdefault((key, metric), []).append(float(j[metric]))
    return rows


def label(key):
    d = dict(key)
    bench = d.pop("bench", "?")
    return bench + " " + " ".join(f"{k}={v}" for k, v in d.items())


def main(argv):
    if not argv or any("=" not in a for a in argv) or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    names, data, bad = [], [], []
    for a in argv:
        name, pattern = a.split("=", 1)
        names.append(name)
        data.append(load(pattern, bad))
    for b in bad:
        print(f"bench_ab.py: {b}", file=sys.stderr)
    keys = []
    for rows in data:
        keys += [k for k in rows if k not in keys]
    print("| row | figure |" + "".join(f" {n} |" for n in names) + "".join(f" {n}/{names[0]} |" for n in names[1:]))
    print("|" + "---|" * (2 + 2 * len(names) - 1))
    worst = []
    for k in keys:
        key, metric = k
        cells = [label(key), metric]
        base = data[0].get(k)
        for rows in data:
            xs = rows.get(k)
            if not xs:
                cells.append("-")
            else:
                med = statistics.median(xs)
                cells.append(f"{med:.4g}" + (f" ({min(xs):.4g}-{max(xs):.4g})" if len(xs) > 1 else ""))
        for rows in data[1:]:
            xs = rows.get(k)
            if not xs or not base:
                cells.append("-")
                continue
            b, x = statistics.median(base), statistics.median(xs)
            if b <= 0 or x <= 0:
                cells.append("-")
                continue
            speed = b / x if metric in TIMES else x / b
            apart = max(xs) < min(base) or min(xs) > max(base)
            cells.append(f"{speed:.3f}{'*' if apart else ''}")
            worst.append((speed, label(key)))
        print("| " + " | ".join(cells) + " |")
    if worst:
        worst.sort()
        print(f"\nslowest {min(5, len(worst))} against {names[0]} (speed ratio):")
        for s, l in worst[:5]:
            print(f"  {s:.3f}  {l}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
