#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bucketcheck.py - compare a bucket prefix with an fsx.py manifest.

    bucketcheck.py MANIFEST.json --bucket B [--prefix P]
                   [--allow-extra PATTERN]... [--endpoint URL]

MANIFEST.json is {name: {"size": n, "sha256": hex}} as written by
tests/fsx.py --manifest.  Each name must exist as the object P+name with
the same size (in the listing and in the bytes fetched) and sha256, and no
other object may exist under P, except keys matching an --allow-extra shell
pattern (fnmatch, tried against the key relative to P and against the whole
key, so `--allow-extra 'fsx/'` admits a directory marker object for P=fsx/).

Uses the aws CLI the way tests/lib/common.sh's awsx does: `aws
--endpoint-url "$RGW_ENDPOINT" ...`, credentials and region from the
environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION,
as exported by the gateway's env file).  --endpoint overrides RGW_ENDPOINT.

Exit 0: the prefix matches; 1: differences (listed on stderr, one a line);
2: bad usage, unreadable manifest, or the aws CLI could not list the bucket.
"""

import argparse
import fnmatch
import hashlib
import json
import os
import subprocess
import sys
import tempfile


def aws(endpoint, *args):
    """Run the aws CLI; returns (rc, stdout, stderr)."""
    p = subprocess.run(["aws", "--endpoint-url", endpoint] + list(args),
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr.strip()


def list_prefix(endpoint, bucket, prefix):
    """{key: size} of every object under prefix (the CLI paginates)."""
    args = ["s3api", "list-objects-v2", "--bucket", bucket, "--output",
            "json"]
    if prefix:
        args += ["--prefix", prefix]
    rc, out, err = aws(endpoint, *args)
    if rc != 0:
        raise RuntimeError("aws s3api list-objects-v2 --bucket %s --prefix "
                           "'%s' failed (exit %d): %s"
                           % (bucket, prefix, rc, err))
    if not out.strip():
        return {}
    doc = json.loads(out)
    return {o["Key"]: int(o["Size"]) for o in (doc.get("Contents") or [])}


def fetch_sha256(endpoint, bucket, key, tmpdir):
    """(size, sha256) of the object's bytes, or raises RuntimeError."""
    path = os.path.join(tmpdir, "obj")
    rc, _, err = aws(endpoint, "s3api", "get-object", "--bucket", bucket,
                     "--key", key, path)
    if rc != 0:
        raise RuntimeError("get-object failed (exit %d): %s" % (rc, err))
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            n += len(b)
    os.unlink(path)
    return n, h.hexdigest()


def main():
    ap = argparse.ArgumentParser(
        description="check a bucket prefix against an fsx.py manifest")
    ap.add_argument("manifest", metavar="MANIFEST.json")
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", default="",
                    help="key prefix the manifest's names live under "
                         "(e.g. fsx/)")
    ap.add_argument("--allow-extra", action="append", default=[],
                    metavar="PATTERN",
                    help="extra keys matching this fnmatch pattern are not "
                         "differences (repeatable)")
    ap.add_argument("--endpoint", default=os.environ.get("RGW_ENDPOINT"),
                    help="S3 endpoint URL (default: $RGW_ENDPOINT)")
    a = ap.parse_args()
    if not a.endpoint:
        ap.error("no endpoint: set RGW_ENDPOINT (tests/lib/rgw.sh's env "
                 "file) or give --endpoint")
    try:
        with open(a.manifest) as f:
            man = json.load(f)
        if not isinstance(man, dict):
            raise ValueError("not a JSON object")
        for name, v in man.items():
            int(v["size"])
            str(v["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("bucketcheck: cannot use manifest %s: %s" % (a.manifest, e),
              file=sys.stderr)
        return 2

    where = "s3://%s/%s" % (a.bucket, a.prefix)
    try:
        listed = list_prefix(a.endpoint, a.bucket, a.prefix)
    except (RuntimeError, ValueError) as e:
        print("bucketcheck: %s" % e, file=sys.stderr)
        return 2

    diffs = []
    with tempfile.TemporaryDirectory(prefix="bucketcheck.") as tmp:
        for name in sorted(man):
            want = man[name]
            key = a.prefix + name
            if key not in listed:
                diffs.append("missing: %s (want %d bytes, sha256 %s)"
                             % (key, want["size"], want["sha256"]))
                continue
            if listed[key] != want["size"]:
                diffs.append("size: %s is %d bytes in the listing, manifest "
                             "%d" % (key, listed[key], want["size"]))
            try:
                n, sha = fetch_sha256(a.endpoint, a.bucket, key, tmp)
            except (RuntimeError, OSError) as e:
                diffs.append("unreadable: %s: %s" % (key, e))
                continue
            if n != listed[key]:
                diffs.append("size: %s: fetched %d bytes, listing says %d"
                             % (key, n, listed[key]))
            if n != want["size"]:
                if listed[key] == want["size"]:
                    diffs.append("size: %s: fetched %d bytes, manifest %d"
                                 % (key, n, want["size"]))
            elif sha != want["sha256"]:
                diffs.append("content: %s: sha256 %s, manifest %s (size %d "
                             "matches)" % (key, sha, want["sha256"], n))
    expected = {a.prefix + n for n in man}
    for key in sorted(set(listed) - expected):
        rel = key[len(a.prefix):]
        if any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(key, p)
               for p in a.allow_extra):
            continue
        diffs.append("extra: %s (%d bytes) is not in the manifest"
                     % (key, listed[key]))

    if diffs:
        print("bucketcheck: %s differs from %s: %d difference(s)"
              % (where, a.manifest, len(diffs)), file=sys.stderr)
        for d in diffs:
            print("  " + d, file=sys.stderr)
        return 1
    print("bucketcheck: %s matches %s (%d objects)"
          % (where, a.manifest, len(man)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
