#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cache group's placement rule (docs/cluster-cache.md, "Placement"),
written again here, independently of peer/member.c, for the integration
tests: prints how many bytes of the objects named the member OWNER (an
index into the ids) owns.  An object of S bytes is cut into units (1 MiB,
doubled while S is over 64 units, at most 8 MiB), the units into windows
of 64; unit u goes to the member of highest rendezvous weight for (key,
ETag, u) that holds fewer than ceil(1.25 x the window's units / N) units
of the window.  Sizes and ETags come from the bucket $B through the aws
CLI.

usage: placement.py OWNER KEY[,KEY...] ID [ID...]
       placement.py run KEY OFFSET ID [ID...]  (prints the owner's index
                                                 of the byte at OFFSET)
       placement.py moved KEY[,KEY...] NOLD ID [ID...]  (prints the bytes
           whose owner among all the ids is not their owner among the
           first NOLD: what a list that grew makes the bucket serve again)
       placement.py disagree KEY WHO NOLD ID [ID...]  (prints the bytes
           of KEY that the first NOLD ids give to member WHO, and of
           those the bytes that all the ids give to another member)
"""
import json
import os
import subprocess
import sys

M = (1 << 64) - 1
B0 = 0xcbf29ce484222325
UNIT_MIN, UNIT_MAX, WINDOW = 1 << 20, 8 << 20, 64


def mix(x):
    x = (x + 0x9e3779b97f4a7c15) & M
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M
    return x ^ (x >> 31)


def fnv(h, b):
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & M
    return h


def head(key):
    h = json.loads(subprocess.check_output(
        ["aws", "s3api", "head-object", "--bucket", os.environ["B"],
         "--key", key]))
    return h["ETag"].strip('"'), h["ContentLength"]


def unit_bytes(size):
    u = UNIT_MIN
    while size // WINDOW > u and u < UNIT_MAX:
        u *= 2
    return u


def owners(idh, key, etag, size):
    """The owner (an index into idh) of each unit of the object."""
    ub = unit_bytes(size)
    units = -(-size // ub) if size else 1
    h = fnv(B0, key.encode() + b"\0")
    h = fnv(h, etag.encode() + b"\0")
    n, out = len(idh), []
    for w0 in range(0, units, WINDOW):
        w1 = min(units, w0 + WINDOW)
        cap = -(-5 * (w1 - w0) // (4 * n))
        load = [0] * n
        for u in range(w0, w1):
            hu = mix(h ^ mix(u))
            best = max((i for i in range(n) if load[i] < cap),
                       key=lambda i: (mix(idh[i] ^ hu), -i))
            load[best] += 1
            out.append(best)
    return out


def owner_of(idh, key, etag, size, off):
    own = owners(idh, key, etag, size)
    return own[min(off // unit_bytes(size), len(own) - 1)]


def owned(idh, owner, key, etag, size):
    """Bytes of the object that member owner holds."""
    ub = unit_bytes(size)
    return sum(min(ub, size - u * ub)
               for u, o in enumerate(owners(idh, key, etag, size))
               if o == owner)


def main():
    if sys.argv[1] == "run":
        key, off, ids = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
        idh = [mix(fnv(B0, i.encode())) for i in ids]
        etag, size = head(key)
        print(owner_of(idh, key, etag, size, off))
        return
    if sys.argv[1] == "disagree":
        key, who, nold, ids = (sys.argv[2], int(sys.argv[3]),
                               int(sys.argv[4]), sys.argv[5:])
        idh = [mix(fnv(B0, i.encode())) for i in ids]
        etag, size = head(key)
        ub = unit_bytes(size)
        old = owners(idh[:nold], key, etag, size)
        new = owners(idh, key, etag, size)
        asked = sum(min(ub, size - u * ub) for u, o in enumerate(old)
                    if o == who)
        other = sum(min(ub, size - u * ub) for u, o in enumerate(old)
                    if o == who and new[u] != who)
        print(asked, other)
        return
    if sys.argv[1] == "moved":
        keys, nold, ids = sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4:]
        idh = [mix(fnv(B0, i.encode())) for i in ids]
        total = 0
        for key in keys:
            etag, size = head(key)
            ub = unit_bytes(size)
            new = owners(idh, key, etag, size)
            old = owners(idh[:nold], key, etag, size)
            for u, (a, b) in enumerate(zip(new, old)):
                if a != b:
                    total += min(ub, size - u * ub)
        print(total)
        return
    owner, keys, ids = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3:]
    idh = [mix(fnv(B0, i.encode())) for i in ids]
    total = 0
    for key in keys:
        etag, size = head(key)
        total += owned(idh, owner, key, etag, size)
    print(total)


main()
