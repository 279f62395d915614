#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cache group's placement rule (docs/cluster-cache.md), written
again here, independently of peer/member.c, for the integration tests:
prints how many bytes of the objects named the member OWNER (an index
into the ids) owns, by rendezvous hashing of (key, ETag, 8 MiB run).
Sizes and ETags come from the bucket $B through the aws CLI.

usage: placement.py OWNER KEY[,KEY...] ID [ID...]
       placement.py run KEY RUN ID [ID...]   (prints RUN's owner's index)
"""
import json
import os
import subprocess
import sys

M = (1 << 64) - 1
B0 = 0xcbf29ce484222325
RUN = 8 << 20


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


def owner_of(idh, key, etag, run):
    h = fnv(B0, key.encode() + b"\0")
    h = fnv(h, etag.encode() + b"\0")
    h = mix(h ^ mix(run))
    w = [mix(x ^ h) for x in idh]
    return w.index(max(w))


def main():
    if sys.argv[1] == "run":
        key, run, ids = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
        idh = [mix(fnv(B0, i.encode())) for i in ids]
        print(owner_of(idh, key, head(key)[0], run))
        return
    owner, keys, ids = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3:]
    idh = [mix(fnv(B0, i.encode())) for i in ids]
    total = 0
    for key in keys:
        etag, size = head(key)
        for run in range((size + RUN - 1) // RUN):
            if owner_of(idh, key, etag, run) == owner:
                total += min(RUN, size - run * RUN)
    print(total)


main()
