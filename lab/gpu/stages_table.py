#!/usr/bin/env python3
# stages_table.py: the table lab/gpu/decode_stages.sh ends with: fi-bench's decode rows
# (its --json lines) of several builds side by side, each against the first build.
"""usage: stages_table.py NAME=GLOB [NAME=GLOB ...]

Each NAME is a build; GLOB matches the JSON-lines files of its fi-bench runs (quoted, so
that this script expands it). A row is a decode case and variant; per build it shows the
median time in us with the range of the samples, the median TB/s, and, for every build
after the first, the change of the median time against the first build's. A change whose
sample ranges do not overlap is marked '*'. The read probe's TB/s per build comes first.
Exit status 1 when a glob matches nothing, a file cannot be read or holds a line that is not
a measurement (such as the last line of a run its timeout killed mid-write); each is named
on stderr and left out, and the table is printed all the same."""
import glob
import json
import statistics
import sys


def load(pattern, bad):
    """A build's decode samples by case and its read probe's TB/s; what cannot be read is
    appended to bad (one run killed mid-line must not cost the whole table)."""
    rows, reads = {}, []
    files = sorted(glob.glob(pattern))
    if not files:
        bad.append(f"{pattern}: no file matches")
    for f in files:
        try:
            with open(f) as fh:
                lines = fh.readlines()
        except (OSError, UnicodeDecodeError) as e:
            bad.append(f"{f}: {e}")
            continue
        for n, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
                if j.get("bench") == "read":
                    reads.append(float(j["tbs"]))
                elif j.get("bench") == "decode":
                    key = (j["label"], j["batch"], j["kv_len"], j["qo_heads"], j["kv_heads"], j["layout"], j["kv"])
                    sample = (float(j["us"]), float(j["tbs"]))
                    rows.setdefault(key, []).append(sample)
            except json.JSONDecodeError as e:
                bad.append(f"{f}:{n}: not JSON ({e.msg})")
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                bad.append(f"{f}:{n}: not a measurement ({type(e).__name__}: {e})")
    return rows, reads


def span(xs, fmt):
    lo, hi = min(xs), max(xs)
    return fmt % lo if lo == hi else (fmt + "-" + fmt) % (lo, hi)


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
        print(f"stages_table.py: {b}", file=sys.stderr)
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
            if m is None or med[0] is None or med[0][0] <= 0:
                cells.append("-")
                continue
            apart = m[2] < med[0][1] or m[1] > med[0][2]
            cells.append(f"{100.0 * (m[0] / med[0][0] - 1.0):+.1f}%{' *' if apart else ''}")
        print("| " + " | ".join(cells) + " |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
