#!/usr/bin/env python3
# cubin_diff.py: compares the machine code (.text sections) of the kernels two cache
# databases hold for the same keys: shows whether a template change leaves kernels' SASS alone.
"""usage: cubin_diff.py OLD.db NEW.db [IGNORED_KEY_SUFFIX_REGEX]

Both databases are fi_runtime caches filled for the same configurations (for example
`fi-cache --cache DB prewarm --arch sm_90 --op batch_decode` from two builds). Keys are
matched after removing the regex (default: none) from the new database's keys, so a key
parameter added with its neutral value (say ";newparam=0") still matches. Prints SAME or DIFF
a key with the .text bytes of each side and the 16-byte instruction words that differ;
exits 1 if any key differs or is missing. Only machine code is compared: a change of
parameter size, shared memory or register count alone still prints SAME."""
import re
import sqlite3
import struct
import sys


def load(db, strip):
    """key|arch -> the newest binary of the installed templates (a cache may keep older rows)."""
    out = {}
    q = "select key, arch, binary from kernels order by created"
    for key, arch, b in sqlite3.connect(db).execute(q):
        out["%s|%s" % (re.sub(strip, "", key) if strip else key, arch)] = b
    return out


def text(b):
    """The concatenated .text* sections of an ELF64 (cubin) image."""
    if b[:4] != b"\x7fELF":
        return None
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    stro = hdrs[shstrndx][4]
    out = b""
    for h in hdrs:
        name = b[stro + h[0]:b.index(b"\0", stro + h[0])].decode()
        if name.startswith(".text") and h[1] != 8:
            out += b[h[4]:h[4] + h[5]]
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = load(sys.argv[1], None), load(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    bad = 0
    for k in sorted(old):
        if k not in new:
            print("MISSING", k)
            bad += 1
            continue
        a, b = text(old[k]), text(new[k])
        if a is None or b is None:
            print("NOT-ELF", k)
            bad += 1
            continue
        words = sum(1 for i in range(0, min(len(a), len(b)), 16) if a[i:i + 16] != b[i:i + 16])
        same = a == b
        bad += not same
        print("%s %s: %d / %d bytes, %d words differ" % ("SAME" if same else "DIFF", k, len(a), len(b), words))
    sys.exit(1 if bad else 0)


main()
