#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""cachedamage.py - random damage to a mount's cache dir, then the contract.

    cachedamage.py --fmfs PATH --work DIR --seed N --trials N
                   [--store file | --store s3 --bucket B --rgw-dir D]
                   [--per-gen K] [--only ID] [--part I/K] [-v]

Each trial starts from a cache dir left by a real mount (a *generation*):
files written through the mount and uploaded, evicted and read back (so
objects/ holds blocks fetched from the store and index.sqlite lists them),
then files written and closed but still pending in the write-back queue
(--async-delay 3600), sometimes one that overwrites an uploaded file,
sometimes one over the multipart threshold; then the daemon is stopped
either by kill -9 or by `fmfs umount` while the store refuses every write,
so the pending uploads stay in the cache dir.  Some generations first
kill -9 the daemon with a file still open and mount again, which moves
that file to lost+found/.

The trial damages one file of that cache dir (sometimes two or three),
chosen among every file `find -type f` lists there, whatever it is:
truncated to a random length, random bits flipped, a random range zeroed,
or removed.  Then it mounts again on the damaged dir and checks, against
a model of what the workload wrote and an independent view of the store
(the store's directory for file://, the aws CLI for s3://):

 1. reads of uploaded files give exactly their bytes, or EIO; reads of
    pending files give their acknowledged bytes or an error, never the
    damaged ones;
 2. `fmfs flush --wait` exits 0 and the store then holds exactly the
    acknowledged bytes of every pending file, or exits non-zero naming
    each key it did not upload, and after `fmfs umount` the bytes of that
    file (as acknowledged, or as damaged) are still in dirty/ or
    lost+found/;
 3. the store holds only bytes the workload wrote and closed (no damaged
    bytes, nothing of a file never closed), and every uploaded file is
    still there;
 4. a refused mount exits non-zero naming the damaged file, and deletes
    no pending data.

A daemon that dies (ENOTCONN), hangs past a time limit, or leaves a
sanitizer report in fmfs.log fails the trial too.

For file:// a generation is made once and copied (cp -a) for each of
--per-gen trials (the store and the cache dir at fixed paths, since the
cache dir records the store's URL); for s3:// each trial is its own
generation under the prefix sID/ of the bucket.  Everything random comes
from (seed, trial) or (seed, generation), so --seed S --only ID replays
trial ID (f12, s3) on a new generation made from the same seed.

Prints one line per failure (seed, trial, damage, what went wrong), then
the counts by class (damaged file, damage, problem) with the first trial
that shows each, and a summary.  Exit 0 if every trial passed, 1 if any
failed, 2 for bad usage or a workload that could not be set up.
"""

import argparse
import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

MIB = 1 << 20
CMD_TIMEOUT_S = 60
WAIT_S = 15  # --timeout of flush --wait and umount in a trial
SANITIZER_RE = re.compile(rb"ERROR: AddressSanitizer|runtime error:|"
                          rb"ERROR: LeakSanitizer")


class SetupError(Exception):
    """The workload could not be set up: not a finding about damage."""


def sha(b):
    return hashlib.sha256(b).hexdigest()


def run(cmd, timeout=CMD_TIMEOUT_S):
    """Run CMD; return (rc, stdout+stderr as text).  rc 124 on timeout."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if e.stdout else ""
        return 124, out + "\n(timed out after %d s)" % timeout


class Alarm(Exception):
    pass


def _on_alarm(signum, frame):
    raise Alarm()


def read_path(path, timeout=20):
    """Whole file through the mount; OSError on failure, Alarm on a hang."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    try:
        with open(path, "rb") as f:
            return f.read()
    finally:
        signal.alarm(0)


def write_path(path, data):
    with open(path, "wb") as f:
        f.write(data)


def is_mounted(path):
    return os.path.ismount(path)


# --- the store, seen without fmfs ---------------------------------------

class FileStore:
    """file:///DIR: key a/b is the file DIR/a/b; DIR/.fmfs is fmfs's own."""

    def __init__(self, root):
        self.root = root

    def url(self):
        return "file://" + self.root

    def keys(self):
        return set(self.snapshot())

    def snapshot(self):
        objs = {}
        for d, dirs, files in os.walk(self.root):
            if d == self.root and ".fmfs" in dirs:
                dirs.remove(".fmfs")
            for n in files:
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    objs[os.path.relpath(p, self.root)] = f.read()
        return objs


class S3Store:
    """s3://BUCKET/PREFIX, read back with the aws CLI."""

    def __init__(self, bucket, prefix, scratch):
        self.bucket, self.prefix, self.scratch = bucket, prefix, scratch
        self.aws = ["aws"]
        ep = os.environ.get("RGW_ENDPOINT") or os.environ.get(
            "AWS_ENDPOINT_URL")
        if ep:
            self.aws += ["--endpoint-url", ep]

    def url(self):
        return "s3://%s/%s" % (self.bucket, self.prefix)

    def keys(self):
        return {o["Key"][len(self.prefix) + 1:] for o in self.list()}

    def list(self):
        rc, out = run(self.aws + ["s3api", "list-objects-v2", "--bucket",
                       self.bucket, "--prefix", self.prefix + "/",
                       "--output", "json"])
        if rc != 0:
            raise SetupError("aws cannot list the bucket: " + out)
        return json.loads(out or "{}").get("Contents", [])

    def snapshot(self):
        # one aws call: every object, directory markers ("d/") left out
        shutil.rmtree(self.scratch, ignore_errors=True)
        os.makedirs(self.scratch)
        rc, out = run(self.aws + ["s3", "cp", "--quiet", "--recursive",
                                  "s3://%s/%s/" % (self.bucket, self.prefix),
                                  self.scratch])
        if rc != 0:
            raise SetupError("aws cannot copy the bucket: " + out)
        return FileStore(self.scratch).snapshot()


# --- one generation: the workload and the cache dir it leaves ------------

class Gen:
    """What a generation's workload wrote, and how the mount was stopped.

    uploaded: key -> bytes, in the store and read back before the stop
    pending:  key -> bytes, closed (acknowledged) but not uploaded
    old:      key -> bytes, the uploaded version of a pending overwrite
    unclosed: key -> bytes, written, never closed (must never be uploaded)
    """

    def __init__(self):
        self.uploaded, self.pending, self.old, self.unclosed = {}, {}, {}, {}
        self.stop = ""
        self.dirty_key = {}   # dirty/ or lost+found/ path -> key

    def allowed(self, key):
        """Store contents acceptable for KEY at any time."""
        out = []
        for m in (self.uploaded, self.pending):
            if key in m:
                out.append(m[key])
        return out


class Driver:
    def __init__(self, a):
        self.a = a
        self.fmfs = a.fmfs
        self.work = os.path.abspath(a.work)
        self.mnt = os.path.join(self.work, "mnt")
        self.cache = os.path.join(self.work, "cache")
        self.gold = os.path.join(self.work, "gold")
        os.makedirs(self.mnt, exist_ok=True)
        self.failures = []
        self.refusals = {}
        self.trials_run = 0
        self.damaged_counts = {}
        self.chattr_ok = None
        self.outcomes = {}

    def count(self, what):
        self.outcomes[what] = self.outcomes.get(what, 0) + 1

    def log(self, *msg):
        if self.a.verbose:
            print("  ", *msg, flush=True)

    # -- mounting --

    def mount(self, store):
        return run([self.fmfs, "mount", store.url(), self.mnt,
                    "--cache-dir", self.cache, "--async-delay", "3600",
                    "--no-keeper",  # kill -9 ends the mount
                    "--part-size", "5M"])

    def daemon_pid(self, store):
        rc, out = run(["pgrep", "-f", "fmfs mount %s %s " %
                       (store.url(), self.mnt)])
        pids = [int(x) for x in out.split()]
        return pids[0] if rc == 0 and pids else None

    def force_unmount(self):
        if is_mounted(self.mnt) or self.dead_mount():
            run([self.fmfs, "umount", self.mnt, "--timeout", "5"])
        if is_mounted(self.mnt) or self.dead_mount():
            run(["fusermount3", "-u", "-z", self.mnt])

    def dead_mount(self):
        try:
            os.stat(self.mnt)
            return False
        except OSError as e:
            return e.errno == errno.ENOTCONN

    # -- the store refusing writes, for `fmfs umount` with uploads pending --

    def store_offline(self, store, on):
        if isinstance(store, FileStore):
            paths = [store.root, os.path.join(store.root, ".fmfs", "tmp"),
                     os.path.join(store.root, ".fmfs", "uploads")]
            paths = [p for p in paths if os.path.isdir(p)]
            rc, _ = run(["chattr", "+i" if on else "-i"] + paths)
            return rc == 0
        rgw = os.path.join(self.a.top, "tests", "lib", "rgw.sh")
        rc, out = run([rgw, "stop-gw" if on else "start-gw", self.a.rgw_dir],
                      timeout=120)
        if rc != 0 and not on:
            raise SetupError("cannot restart the gateway: " + out)
        return rc == 0

    def can_chattr(self):
        if self.chattr_ok is None:
            d = os.path.join(self.work, "chattr-probe")
            os.makedirs(d, exist_ok=True)
            self.chattr_ok = run(["chattr", "+i", d])[0] == 0
            run(["chattr", "-i", d])
            os.rmdir(d)
        return self.chattr_ok

    # -- a generation --

    def make_gen(self, store, rng):
        g = Gen()
        shutil.rmtree(self.cache, ignore_errors=True)
        rc, out = self.mount(store)
        if rc != 0:
            raise SetupError("mount failed: " + out)
        try:
            self._workload(store, rng, g)
        except Exception:
            self.force_unmount()
            raise
        return g

    def _content(self, rng, lo, hi):
        # a unique head, so no two files (or versions) have the same bytes
        head = b"%016x" % rng.getrandbits(64)
        return head + rng.randbytes(max(0, rng.randint(lo, hi) - len(head)))

    def _workload(self, store, rng, g):
        m = self.mnt
        os.mkdir(os.path.join(m, "d"))
        # uploaded files: small, a few blocks, sometimes empty
        names = ["u0", "u1", "d/u2", "u3"][:rng.randint(2, 4)]
        for k in names:
            r = rng.random()
            if r < 0.1:
                data = b""
            elif r < 0.45:
                data = self._content(rng, 1, 6000)
            else:
                data = self._content(rng, MIB - 100, 3 * MIB + 5000)
            g.uploaded[k] = data
            write_path(os.path.join(m, k), data)
        rc, out = run([self.fmfs, "flush", m, "--wait", "--timeout", "60"])
        if rc != 0:
            raise SetupError("flush --wait of the uploaded files: " + out)
        # evict, then read back whole or in part: blocks fetched from the
        # store, listed in the index
        rc, out = run([self.fmfs, "evict", m] +
                      [os.path.join(m, k) for k in g.uploaded])
        if rc != 0:
            raise SetupError("evict: " + out)
        for k, data in g.uploaded.items():
            with open(os.path.join(m, k), "rb") as f:
                if rng.random() < 0.5 or len(data) < 2:
                    got, want = f.read(), data
                else:
                    off = rng.randrange(len(data))
                    f.seek(off)
                    got = f.read(rng.randint(1, 2 * MIB))
                    want = data[off:off + len(got)] if got else b"?"
            if got != want:
                raise SetupError("reading back %s before any damage gave "
                                 "wrong bytes" % k)
        # sometimes a file still open at a kill -9, then a remount that
        # moves it to lost+found/
        if rng.random() < 0.3:
            k = "x0"
            g.unclosed[k] = self._content(rng, 1, 300 * 1024)
            self._kill(store, g.unclosed[k])
            rc, out = self.mount(store)
            if rc != 0:
                raise SetupError("remount after kill -9: " + out)
            g.stop = "kill -9 with x0 open, remount, "
        # pending files: closed, queued, not uploaded (--async-delay 3600)
        pnames = ["p0", "d/p1", "p2"][:rng.randint(1, 3)]
        for k in pnames:
            big = rng.random() < 0.5
            g.pending[k] = (self._content(rng, 100 * 1024, 2 * MIB + 77)
                            if big else self._content(rng, 1, 5000))
        if rng.random() < 0.2:
            g.pending["big"] = self._content(rng, 5 * MIB + 1, 6 * MIB)
        over = [k for k, v in g.uploaded.items() if v]
        if over and rng.random() < 0.5:
            k = rng.choice(over)
            g.old[k] = g.uploaded[k]
            g.pending[k] = self._content(rng, 1, 3 * MIB)
        for k, data in g.pending.items():
            write_path(os.path.join(m, k), data)
        # stop: kill -9 (after the index flusher ran) or umount with the
        # store refusing writes
        if rng.random() < 0.5 and (isinstance(store, S3Store) or
                                   self.can_chattr()):
            g.stop += "umount with the store refusing writes"
            if not self.store_offline(store, True):
                raise SetupError("cannot take the store offline")
            try:
                rc, out = run([self.fmfs, "umount", m, "--timeout", "1"])
            finally:
                self.store_offline(store, False)
            if rc == 0:
                raise SetupError("umount with the store offline exited 0: "
                                 + out)
        else:
            g.stop += "kill -9"
            self._kill(store, None)
        if is_mounted(m) or self.dead_mount():
            raise SetupError("still mounted after the stop")
        # which dirty file holds which pending key: matched by content
        want = {sha(v): k for k, v in list(g.pending.items()) +
                list(g.unclosed.items())}
        for sub in ("dirty", "lost+found"):
            d = os.path.join(self.cache, sub)
            for n in (os.listdir(d) if os.path.isdir(d) else []):
                with open(os.path.join(d, n), "rb") as f:
                    h = sha(f.read())
                if h in want:
                    g.dirty_key[sub + "/" + n] = want[h]
        # every pending key is still pending: nothing uploaded early
        keys = store.keys()
        for k in g.pending:
            if k in keys and k not in g.old:
                raise SetupError("%s was uploaded before the stop" % k)
        return g

    def _kill(self, store, unclosed):
        """kill -9 of the daemon once the index flusher has run; with
        UNCLOSED, a file x0 holding those bytes is open at the kill."""
        m = self.mnt
        pid = self.daemon_pid(store)
        if pid is None:
            raise SetupError("no daemon process found")
        # No fork from here to the kill: a child's copy of the descriptor,
        # closed, is a close (a FUSE flush), which commits the file.
        fd = None
        if unclosed is not None:
            fd = os.open(os.path.join(m, "x0"), os.O_WRONLY | os.O_CREAT,
                         0o644)
            os.write(fd, unclosed)
        time.sleep(1.3)   # the index flusher runs about every second
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        run([self.fmfs, "umount", m])
        if is_mounted(m) or self.dead_mount():
            raise SetupError("still mounted after kill -9 and umount")

    # -- damage --

    def cache_files(self):
        out = []
        for d, _, files in os.walk(self.cache):
            for n in files:
                p = os.path.join(d, n)
                if os.path.isfile(p) and not os.path.islink(p):
                    out.append(os.path.relpath(p, self.cache))
        return sorted(out)

    def damage(self, rng, rel):
        p = os.path.join(self.cache, rel)
        size = os.path.getsize(p)
        kinds = ["truncate", "flip", "zero", "remove"] if size else ["remove"]
        kind = rng.choice(kinds)
        if kind == "remove":
            os.unlink(p)
            return "%s (%d bytes): removed" % (rel, size), kind
        if kind == "truncate":
            n = rng.randrange(size) if rng.random() < 0.7 else \
                rng.randrange(max(0, size - 4096), size)
            os.truncate(p, n)
            return "%s: truncated %d -> %d" % (rel, size, n), kind
        with open(p, "r+b") as f:
            if kind == "flip":
                bits = sorted(rng.randrange(size * 8)
                              for _ in range(rng.randint(1, 8)))
                for b in bits:
                    f.seek(b // 8)
                    c = f.read(1)[0]
                    f.seek(b // 8)
                    f.write(bytes([c ^ (1 << (b % 8))]))
                return "%s: bits flipped at %s" % (rel, ",".join(
                    "%d.%d" % (b // 8, b % 8) for b in bits)), kind
            off = rng.randrange(size)
            n = rng.randint(1, min(size - off, 512)) if rng.random() < 0.5 \
                else rng.randint(1, size - off)
            f.seek(off)
            f.write(bytes(n))
            return "%s: %d bytes zeroed at %d" % (rel, n, off), kind

    # -- a trial --

    def trial(self, tid, store, g, rng):
        fails = []
        files = self.cache_files()
        n = 1 if rng.random() < 0.85 else rng.randint(2, 3)
        chosen = rng.sample(files, min(n, len(files)))
        damages = [self.damage(rng, rel) for rel in chosen]
        desc = "; ".join(d for d, _ in damages)
        kinds = [k for _, k in damages]
        for rel in chosen:
            c = file_class(rel)
            self.damaged_counts[c] = self.damaged_counts.get(c, 0) + 1
        # what is left of each pending key's dirty file after the damage
        damaged_bytes = {}
        for rel in chosen:
            if rel in g.dirty_key:
                p = os.path.join(self.cache, rel)
                damaged_bytes[g.dirty_key[rel]] = (
                    open(p, "rb").read() if os.path.exists(p) else None)
        self.log("%s: %s (stop: %s)" % (tid, desc, g.stop))

        def fail(problem, detail=""):
            fails.append((problem, detail))

        def keepable(k):
            """Hashes under which K's bytes may be kept in the cache dir."""
            hs = {sha(g.pending[k])}
            if damaged_bytes.get(k) is not None:
                hs.add(sha(damaged_bytes[k]))
            return hs

        def kept_hashes():
            hs = set()
            for sub in ("dirty", "lost+found"):
                d = os.path.join(self.cache, sub)
                for n in (os.listdir(d) if os.path.isdir(d) else []):
                    p = os.path.join(d, n)
                    if os.path.isfile(p):
                        hs.add(sha(open(p, "rb").read()))
            return hs

        def data_still_there(why, keys):
            hs = kept_hashes()
            for k in keys:
                if k in damaged_bytes and damaged_bytes[k] is None:
                    continue  # its only copy was what we removed
                if not keepable(k) & hs:
                    fail("bytes of a pending file gone from the cache dir "
                         + why, k)

        rc, out = self.mount(store)
        mounted = rc == 0 and is_mounted(self.mnt)
        snap = None
        self.count("mount refused" if rc else "mounted")
        if rc != 0:
            # (4) refused: must name the damaged file and delete nothing
            if is_mounted(self.mnt) or self.dead_mount():
                fail("mount exited %d but left a mount" % rc)
                self.force_unmount()
            names = set()
            for rel in chosen:
                base = os.path.basename(rel)
                names |= {rel, base, re.sub(r"-(wal|shm|journal)$", "", base)}
                if rel in g.dirty_key:
                    names.add(g.dirty_key[rel])
            if not any(nm in out for nm in names):
                fail("mount refused without naming the damaged file",
                     out.strip().replace("\n", " | ")[:300])
            else:
                msg = re.sub(r"[0-9a-f]{16}", "ID", out.strip())
                msg = msg.replace(self.cache, "CACHE").replace(self.work, "W")
                self.refusals[msg] = self.refusals.get(msg, 0) + 1
            data_still_there("after a refused mount", list(g.pending))
        elif not mounted:
            fail("mount exited 0 but nothing is mounted", out.strip())
        else:
            snap = self._check_mounted(store, g, damaged_bytes, fail,
                                       data_still_there)
        self._check_store(snap if snap is not None else store.snapshot(),
                          g, fail)
        try:
            with open(os.path.join(self.cache, "fmfs.log"), "rb") as f:
                log = f.read()
            if SANITIZER_RE.search(log):
                fail("sanitizer report in fmfs.log")
        except OSError:
            pass
        self.force_unmount()
        for problem, detail in fails:
            self.failures.append((tid, desc, kinds, chosen, problem, detail))
            print("FAIL: seed %d trial %s (%s; stop: %s): damaged %s: %s%s" %
                  (self.a.seed, tid, store.url(), g.stop, desc, problem,
                   (": " + detail) if detail else ""), flush=True)
        self.trials_run += 1

    def _check_mounted(self, store, g, damaged_bytes, fail, data_still_there):
        m = self.mnt
        dead = False
        # (1) reads
        for k in list(g.uploaded) + [k for k in g.pending
                                     if k not in g.uploaded]:
            pending = k in g.pending
            ok = [g.pending[k]] if pending else []
            if k in g.uploaded:
                ok.append(g.uploaded[k])  # the older version of an overwrite
            what = "a pending file" if pending else "an uploaded file"
            try:
                got = read_path(os.path.join(m, k))
                if got not in ok:
                    fail("served the damaged dirty file of " + what
                         if got == damaged_bytes.get(k) else
                         "served wrong bytes of " + what,
                         "%s: %d bytes, expected %d" % (k, len(got),
                                                         len(ok[0])))
            except Alarm:
                fail("read of %s hung" % what, k)
            except OSError as e:
                if e.errno == errno.ENOTCONN:
                    dead = True
                    break
                self.count("read failed with " +
                           errno.errorcode.get(e.errno, str(e.errno)))
                # a pending file may be gone for good (reported by flush)
                if not pending and e.errno != errno.EIO:
                    fail("read of an uploaded file failed with %s, not EIO"
                         % errno.errorcode.get(e.errno, e.errno), k)
        if dead or self.dead_mount():
            fail("the daemon died (ENOTCONN)")
            self.force_unmount()
            return None
        # (2) flush --wait, then umount
        frc, fout = run([self.fmfs, "flush", m, "--wait", "--timeout",
                         str(WAIT_S)], timeout=WAIT_S + 30)
        if frc == 124:
            fail("flush --wait hung")
        self.count("flush --wait exit %d" % frc)
        urc, uout = run([self.fmfs, "umount", m, "--timeout", str(WAIT_S)],
                        timeout=WAIT_S + 30)
        if urc == 124:
            fail("umount hung")
        if is_mounted(m) or self.dead_mount():
            fail("still mounted after umount (exit %d)" % urc,
                 uout.strip()[:200])
            self.force_unmount()
        snap = store.snapshot()
        missing = [k for k, v in g.pending.items() if snap.get(k) != v]
        if frc == 0:
            for k in missing:
                fail("flush --wait exit 0 but the store lacks the file"
                     if k not in snap else
                     "flush --wait exit 0 but the store holds the older "
                     "version" if snap[k] == g.old.get(k) else
                     "flush --wait exit 0 and the store holds the damaged "
                     "dirty file" if snap[k] == damaged_bytes.get(k) else
                     "flush --wait exit 0 but the store holds other bytes",
                     "%s: store %s, acknowledged %d bytes" %
                     (k, "-" if k not in snap else "%d bytes" % len(snap[k]),
                      len(g.pending[k])))
        else:
            for k in missing:
                # its key, or (when its row and .meta are both gone and
                # nobody knows its name) the dirty file holding it
                held = [p for p, kk in g.dirty_key.items()
                        if kk == k and p.startswith("dirty/")]
                if not re.search(r"(^|\s)%s:" % re.escape(k), fout, re.M) \
                        and not any("/" + p + ":" in fout for p in held):
                    fail("flush --wait exit %d without naming a file it did "
                         "not upload" % frc, "%s; output: %s" %
                         (k, fout.strip().replace("\n", " | ")[:300]))
        if missing and frc != 0:
            data_still_there("after flush --wait and umount", missing)
        return snap

    def _check_store(self, snap, g, fail):
        # (3) only the workload's closed bytes; every uploaded file kept
        for k, v in snap.items():
            if k in g.unclosed:
                fail("a file never closed was uploaded", k)
            elif v not in g.allowed(k):
                fail("the store holds bytes the workload never wrote",
                     "%s (%d bytes)" % (k, len(v)))
        for k in g.uploaded:
            if k not in snap:
                fail("an uploaded file is gone from the store", k)

    # -- runs --

    def run_file(self):
        a = self.a
        store = FileStore(os.path.join(self.work, "store"))
        ids = [t for t in range(a.trials)
               if (t // a.per_gen) % a.parts == a.part]
        if a.only:
            ids = [int(a.only.lstrip("f"))]
        gen_no, g = None, None
        for t in ids:
            gno = t // a.per_gen
            if gno != gen_no:
                self.force_unmount()
                shutil.rmtree(store.root, ignore_errors=True)
                os.makedirs(store.root)
                g = self.make_gen(store, random.Random("%d/gen/%d" %
                                                       (a.seed, gno)))
                shutil.rmtree(self.gold, ignore_errors=True)
                os.makedirs(self.gold)
                for src in (store.root, self.cache):
                    rc, out = run(["cp", "-a", src, self.gold])
                    if rc != 0:
                        raise SetupError("cp -a %s: %s" % (src, out))
                gen_no = gno
            for src in (store.root, self.cache):
                shutil.rmtree(src)
                rc, out = run(["cp", "-a", os.path.join(
                    self.gold, os.path.basename(src)), self.work])
                if rc != 0:
                    raise SetupError("cp -a: " + out)
            self.trial("f%d" % t, store, g,
                       random.Random("%d/trial/f%d" % (a.seed, t)))

    def run_s3(self):
        a = self.a
        ids = [t for t in range(a.trials) if t % a.parts == a.part]
        if a.only:
            ids = [int(a.only.lstrip("s"))]
        for t in ids:
            store = S3Store(a.bucket, "s%d" % t,
                            os.path.join(self.work, "s3copy"))
            g = self.make_gen(store, random.Random("%d/gen/s%d" % (a.seed, t)))
            self.trial("s%d" % t, store, g,
                       random.Random("%d/trial/s%d" % (a.seed, t)))

    def summary(self):
        # one class per (damaged files, damages): the problems its failed
        # trials showed, how many trials, and the first of them
        trials = {}
        for tid, desc, kinds, chosen, problem, detail in self.failures:
            t = trials.setdefault(tid, [desc, kinds, chosen, set()])
            t[3].add(problem)
        classes = {}
        for tid, (desc, kinds, chosen, problems) in trials.items():
            pairs = sorted(zip((file_class(c) for c in chosen), kinds))
            key = (" + ".join("%s %s" % p for p in pairs))
            c = classes.setdefault(key, [0, tid, desc, {}])
            c[0] += 1
            for p in problems:
                c[3][p] = c[3].get(p, 0) + 1
        if self.refusals:
            print("mounts refused with a message naming the damaged file:")
            for msg, n in sorted(self.refusals.items(), key=lambda x: -x[1]):
                print("  %4d x %s" % (n, msg.replace("\n", " | ")[:400]))
        print("files damaged, by class:", ", ".join(
            "%s %d" % kv for kv in sorted(self.damaged_counts.items())))
        print("outcomes:", ", ".join(
            "%s %d" % kv for kv in sorted(self.outcomes.items())))
        if classes:
            print("failed trials by damage (trials: damaged file and "
                  "damage; first trial; problems seen):")
            for key, (n, tid, desc, problems) in sorted(
                    classes.items(), key=lambda x: (-x[1][0], x[0])):
                print("  %4d: %s; seed %d trial %s (%s)" %
                      (n, key, self.a.seed, tid, desc[:200]))
                for p, pn in sorted(problems.items(), key=lambda x: -x[1]):
                    print("          %4d x %s" % (pn, p))
        bad = len(trials)
        print("%s store: %d trials, %d passed, %d failed (seed %d)" %
              (self.a.store, self.trials_run, self.trials_run - bad, bad,
               self.a.seed), flush=True)
        return bad


def file_class(rel):
    """dirty/0000000000000004 -> dirty/ID, objects/0a/... -> objects/XX/ID."""
    rel = re.sub(r"^objects/[0-9a-f]{2}/", "objects/XX/", rel)
    rel = re.sub(r"[0-9a-f]{16}", "ID", rel)
    return re.sub(r"\.bad-[0-9]+", ".bad-TIME", rel)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fmfs", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--store", choices=("file", "s3"), default="file")
    ap.add_argument("--bucket")
    ap.add_argument("--rgw-dir")
    ap.add_argument("--top", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    ap.add_argument("--per-gen", type=int, default=12)
    ap.add_argument("--only")
    ap.add_argument("--part", default="0/1",
                    help="I/K: only the trials of part I of K (file://: "
                    "whole generations), so K drivers, each with its own "
                    "--work, share one run")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if a.store == "s3" and not (a.bucket and a.rgw_dir):
        ap.error("--store s3 needs --bucket and --rgw-dir")
    if a.per_gen < 1 or a.trials < 0:
        ap.error("--per-gen and --trials must be positive")
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", a.part)
    if not m or int(m.group(1)) >= int(m.group(2)):
        ap.error("--part %s: give I/K with 0 <= I < K" % a.part)
    a.part, a.parts = int(m.group(1)), int(m.group(2))
    d = Driver(a)
    t0 = time.time()
    try:
        d.run_s3() if a.store == "s3" else d.run_file()
    except SetupError as e:
        d.force_unmount()
        print("cachedamage: cannot set up the workload (seed %d): %s" %
              (a.seed, e), file=sys.stderr)
        d.summary()
        return 2
    bad = d.summary()
    print("%.0f s" % (time.time() - t0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
