#!/usr/bin/env python3
# stages_table.py: the table tests/gpu/decode_stages.sh ends with: fi-bench's decode rows
# (its --json lines) of several builds side by side, each against the first build.
"""usage: stages_table.py NAME=GLOB [NAME=GLOB ...]

Each NAME is a build; GLOB matches the JSON-lines files of its fi-bench runs (quoted, so
that this script expands it). A row is a decode case and variant; per build it shows the
median time in us with the range of the samples, the median TB/s, and, for every build
after the first, the change of the median time against the first build's. A change whose
sample ranges do not overlap is marked '*'. The read probe's TB/s per build comes first.
Exit status 1 when a glob matches nothing or a file holds a line that is not JSON."""
import glob
import json
import statistics
import sys


def load(pattern):
    files = sorted(glob.glob(pattern))
    if not files:
        raise ValueError(f"{pattern}: no file matches")
    rows, reads = {}, []
    for f in files:
        with open(f) as fh:
            for n, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    j = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{f}:{n}: not JSON ({e.msg})") from None
                if j.get("bench") == "read":
                    reads.append(j["tbs"])
                elif j.get("bench") == "decode":
                    key = (j["label"], j["batch"], j["kv_len"], j["qo_heads"], j["kv_heads"], j["layout"], j["kv"])
                    rows.setdefault(key, []).append((j["us"], j["tbs"]))
    return rows, reads


def span(xs, fmt):
    lo, hi = min(xs), max(xs)
    return fmt % lo if lo == hi else (fmt + "-" + fmt) % (lo, hi)


def main(argv):
    if not argv or any("=" not in a for a in argv) or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    names, data = [], []
    try:
        for a in argv:
            name, pattern = a.split("=", 1)
            names.append(name)
            data.append(load(pattern))
    except (OSError, ValueError, KeyError) as e:
        print(f"stages_table.py: {e}", file=sys.stderr)
        return 1
    print("read probe, TB/s: " + "; ".join(
        f"{n} {span(r, '%.2f')} ({len(r)})" if r else f"{n} none" for n, (_, r) in zip(names, data)))
    keys = []
    for rows, _ in data:
        keys += [k for k in rows if k not in keys]
    head = "| case | variant |" + "".join(f" {n} us | {n} TB/s |" for n in names)
    head += "".join(f" {n} vs {names[0]} |" for n in names[1:])
    print("\n" + head)
    print("|" + "---|" * (2 + 2 * len(names) + len(names) - 1))
    for k in keys:
        label, b, l, hq, hkv, lay, kv = k
        cells = [f"B={b} L={l} {hq}/{hkv} {lay} {kv}", label]
        med = []
        for rows, _ in data:
            s = rows.get(k)
            if not s:
                cells += ["-", "-"]
                med.append(None)
                continue
            us = [x for x, _ in s]
            m = statistics.median(us)
            med.append((m, min(us), max(us)))
            cells += [f"{m:.1f} ({span(us, '%.1f')}, {len(us)})", f"{statistics.median(t for _, t in s):.2f}"]
        for m in med[1:]:
            if m is None or med[0] is None:
                cells.append("-")
                continue
            apart = m[2] < med[0][1] or m[1] > med[0][2]
            cells.append(f"{100.0 * (m[0] / med[0][0] - 1.0):+.1f}%{' *' if apart else ''}")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
