#!/usr/bin/env python3
# check_layers.py: the layer rules of DESIGN.md, checked on the tree: which folder's files may
# include which folder's headers, no two headers of one name, and (given a build folder) no
# two object files of the library that need each other's symbols.
"""usage: check_layers.py [BUILD_DIR]

Prints one line per violation and exits 1 if there is any, else prints a one-line summary.
Without BUILD_DIR only the include rules are checked; with it, also the cycles between the
library's object files (BUILD_DIR/obj/**.o, read with nm)."""
import collections
import glob
import os
import subprocess
import sys

# What each folder's files may include (besides system headers), the arrows of DESIGN.md:
# tools -> include; runtime -> {jit, cache, device}; jit -> kernels (and device's dlopen
# helper, through which the compilers are loaded). tools may read the kernels' parameter
# structs (the kernel ABI) to size benchmark inputs.
ALLOWED = {
    "include": {"include"},
    "kernels": {"kernels"},
    "cache": {"cache"},
    "device": {"device", "include"},
    "jit": {"jit", "kernels", "device"},
    "runtime": {"runtime", "include", "jit", "cache", "device", "kernels"},
    "tools": {"tools", "include", "kernels"},
}
SEARCH = ["include", "runtime", "device", "jit", "cache", "kernels"]  # the Makefile's -I order
EXTS = (".c", ".h", ".cuh")


def sources(root):
    for folder in ALLOWED:
        for f in sorted(glob.glob(os.path.join(root, folder, "*"))):
            if f.endswith(EXTS):
                yield folder, f


def resolve(root, folder, name):
    for d in [folder] + SEARCH + ["tools"]:
        if os.path.exists(os.path.join(root, d, name)):
            return d
    return None


def include_violations(root):
    bad, names = [], collections.defaultdict(list)
    for folder, f in sources(root):
        if f.endswith((".h", ".cuh")):
            names[os.path.basename(f)].append(os.path.relpath(f, root))
        with open(f, errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                s = line.strip()
                if not s.startswith("#include \""):
                    continue
                name = s.split('"')[1]
                to = resolve(root, folder, name)
                if to is None:
                    continue  # generated (build/gen) or a system-style header
                if to not in ALLOWED[folder]:
                    bad.append(f"{os.path.relpath(f, root)}:{n}: {folder}/ includes {to}/{name}")
    for name, where in names.items():
        if len(where) > 1:
            bad.append(f"header {name} exists twice: {', '.join(where)}")
    return bad


def object_cycles(build):
    defs, uses = {}, collections.defaultdict(set)
    for o in glob.glob(os.path.join(build, "obj", "**", "*.o"), recursive=True):
        name = os.path.relpath(o, os.path.join(build, "obj"))[:-2]
        if name.startswith(("tests", "gen")):
            continue
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBRC":
                defs[p[2]] = name
            elif len(p) == 2 and p[0] == "U":
                uses[name].add(p[1])
    need = collections.defaultdict(set)
    for f, syms in uses.items():
        for s in syms:
            if s in defs and defs[s] != f:
                need[f].add(defs[s])
    bad = []
    for a in sorted(need):
        for b in sorted(need[a]):
            if a < b and a in need.get(b, ()):
                sa = sorted(s for s in uses[a] if defs.get(s) == b)
                sb = sorted(s for s in uses[b] if defs.get(s) == a)
                bad.append(f"{a}.c and {b}.c need each other: {a} uses {', '.join(sa[:3])}; "
                           f"{b} uses {', '.join(sb[:3])}")
    return bad, len(defs)


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = include_violations(root)
    what = "include rules"
    if argv:
        cyc, nsyms = object_cycles(argv[0])
        if nsyms == 0:
            bad.append(f"{argv[0]}: no object files with symbols (build first)")
        bad += cyc
        what += " and object cycles"
    for b in bad:
        print(b)
    if not bad:
        print(f"check_layers: {what}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
