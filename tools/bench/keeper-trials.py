#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""keeper-trials - kill -9 the daemon of a kept mount at random
moments under load, and check that the programs using it see nothing
(docs/keeper.md).

The load, all through the mount, all the time:
  - 8 sequential readers, one per file of 8 (--size MiB each), each
    checking every pass's SHA-256;
  - a random reader of 8 KiB blocks, each checked against the local copy;
  - a writer appending a numbered line and fsync'ing it, that records
    each line fsync acknowledged;
  - `ls -lR` of the mount in a loop;
  - a namespace worker: mkdir, an exclusive create, rename, link,
    setxattr (XATTR_CREATE), unlink, removexattr, rmdir in a loop, each
    of which would fail (EEXIST, ENOENT, ENODATA) if a daemon that died
    in it had it carried out twice (docs/keeper.md "Requests done
    once").
Each trial waits a random 0.2-1.5 s, kills the daemon (its pid from
`fmfs status`), and waits for the keeper's new one to serve; its
last_takeover_ms is the trial's time.  At the end: no process may have
seen an error or a wrong byte, and after `fmfs flush --wait` every line
the writer had fsync'ed must be in the store (read on the store's side:
the file:// directory, or with the aws CLI for s3://).

  keeper-trials.py --fmfs tools/fmfs --dir DIR [--trials 100] [--size 64]
                   [--store file|s3://BUCKET] [--restart]

--restart: each trial is an upgrade, `fmfs restart MNT` (the keeper runs
the binary again), not a kill.

(a kept mount takes its requests from /dev/fuse even where the kernel
offers FUSE over io_uring: docs/keeper.md "The ring")

Prints one line per trial and a summary; exits 0 when every check held.
"""
import argparse
import hashlib
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import time


def status(fmfs, mnt):
    p = subprocess.run([fmfs, "status", mnt, "--json"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode:
        raise RuntimeError("fmfs status: " + p.stderr.strip())
    return json.loads(p.stdout)


def seq_reader(path, want, stop, errs):
    n = 0
    while not stop.is_set():
        try:
            with open(path, "rb") as f:
                h = hashlib.sha256()
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    h.update(b)
            if h.hexdigest() != want:
                errs.put("%s: pass %d read other bytes" % (path, n))
            n += 1
        except OSError as e:
            errs.put("%s: %s" % (path, e))
            time.sleep(0.1)


def rand_reader(paths, locals_, stop, errs):
    rnd = random.Random(1)
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    size = os.path.getsize(locals_[0])
    while not stop.is_set():
        i = rnd.randrange(len(paths))
        off = rnd.randrange(0, size - 8192) & ~4095
        try:
            got = os.pread(fds[i], 8192, off)
            with open(locals_[i], "rb") as f:
                f.seek(off)
                if got != f.read(8192):
                    errs.put("random read %s@%d: other bytes" %
                             (paths[i], off))
        except OSError as e:
            errs.put("random read %s@%d: %s" % (paths[i], off, e))
            time.sleep(0.1)
    for fd in fds:
        os.close(fd)


def appender(path, acked, stop, errs):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        errs.put("appender open: %s" % e)
        return
    n = 0
    while not stop.is_set():
        try:
            os.write(fd, b"line %08d\n" % n)
            os.fsync(fd)
            acked.value = n + 1
            n += 1
        except OSError as e:
            errs.put("appender line %d: %s" % (n, e))
            time.sleep(0.1)
        time.sleep(0.01)
    try:
        os.close(fd)
    except OSError as e:
        errs.put("appender close: %s" % e)


def namer(top, counts, stop, errs):
    n = 0
    while not stop.is_set():
        d = "%s/n%d" % (top, n)
        step = "mkdir"
        try:
            os.mkdir(d)
            step = "create"
            os.close(os.open(d + "/a", os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                             0o644))
            step = "rename"
            os.rename(d + "/a", d + "/b")
            step = "link"
            os.link(d + "/b", d + "/c")
            step = "setxattr"
            os.setxattr(d + "/c", "user.k", b"v", os.XATTR_CREATE)
            step = "removexattr"
            os.removexattr(d + "/c", "user.k")
            step = "unlink"
            os.unlink(d + "/b")
            os.unlink(d + "/c")
            step = "rmdir"
            os.rmdir(d)
            counts.value = n + 1
        except OSError as e:
            errs.put("namespace %s in %s: %s" % (step, d, e))
            time.sleep(0.1)
        n += 1


def lister(mnt, stop, errs):
    while not stop.is_set():
        p = subprocess.run(["ls", "-lR", mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        # names/ changes under ls (the namespace worker): a name gone
        # between its listing and its stat is no fault
        bad = [ln for ln in p.stderr.splitlines()
               if not ("/names/" in ln and "No such file" in ln)]
        if p.returncode and bad:
            errs.put("ls -lR: %s" % "; ".join(bad)[:200])
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fmfs", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--size", type=int, default=64, help="MiB a file")
    ap.add_argument("--store", default="file")
    ap.add_argument("--restart", action="store_true",
                    help="fmfs restart instead of kill -9")
    a = ap.parse_args()
    fmfs = os.path.abspath(a.fmfs)
    d = os.path.abspath(a.dir)
    mnt, cache, local = d + "/mnt", d + "/cache", d + "/local"
    for x in (mnt, local):
        os.makedirs(x, exist_ok=True)
    names = ["f%d" % i for i in range(8)]
    sums = {}
    for n in names:
        b = os.urandom(a.size << 20)
        with open(local + "/" + n, "wb") as f:
            f.write(b)
        sums[n] = hashlib.sha256(b).hexdigest()
    if a.store == "file":
        store = d + "/store"
        os.makedirs(store + "/data/tree/a/b", exist_ok=True)
        url = "file://" + store
        for n in names:
            os.link(local + "/" + n, store + "/data/" + n)
        for i in range(50):
            open("%s/data/tree/a/b/t%d" % (store, i), "w").write("t")
    else:
        url = a.store
        subprocess.run(["aws", "s3", "cp", "--quiet", "--recursive", local,
                        url + "/data/"], check=True)
    subprocess.run([fmfs, "mount", url, mnt, "--cache-dir", cache],
                   check=True)
    stop, errs = mp.Event(), mp.Queue()
    acked = mp.Value("q", 0)
    procs = [mp.Process(target=seq_reader, args=(
        mnt + "/data/" + n, sums[n], stop, errs)) for n in names]
    procs.append(mp.Process(target=rand_reader, args=(
        [mnt + "/data/" + n for n in names],
        [local + "/" + n for n in names], stop, errs)))
    procs.append(mp.Process(target=appender, args=(
        mnt + "/data/appended", acked, stop, errs)))
    procs.append(mp.Process(target=lister, args=(mnt, stop, errs)))
    rounds = mp.Value("q", 0)
    os.makedirs(mnt + "/names", exist_ok=True)
    procs.append(mp.Process(target=namer, args=(
        mnt + "/names", rounds, stop, errs)))
    for p in procs:
        p.start()
    times, refused, kept, found = [], 0, 0, 0
    rnd = random.Random()
    for t in range(a.trials):
        time.sleep(rnd.uniform(0.2, 1.5))
        st = status(fmfs, mnt)
        pid, n0 = st["daemon_pid"], st["takeovers"]
        t0 = time.time()
        if a.restart:
            p = subprocess.run([fmfs, "restart", mnt], capture_output=True,
                               text=True, timeout=120)
            if p.returncode:
                print("trial %d: fmfs restart: %s" % (t, p.stderr.strip()))
                refused += 1
                break
        else:
            os.kill(pid, 9)
        while True:
            try:
                st = status(fmfs, mnt)
                if (st["takeovers"] > n0 and
                        st.get("last_takeover_ms", -1) >= 0):
                    break
            except (RuntimeError, ValueError) as e:
                if time.time() - t0 > 30:
                    print("trial %d: no new daemon: %s" % (t, e))
                    refused += 1
                    break
            time.sleep(0.02)
        if refused:
            break
        times.append(st["last_takeover_ms"])
        print("trial %d: daemon %d %s, served again after %d ms "
              "(%d requests resent, %d answered with kept replies, %d "
              "found done)" %
              (t, pid, "restarted" if a.restart else "killed",
               st["last_takeover_ms"],
               st.get("last_takeover_resent", 0),
               st.get("last_takeover_replies_kept", 0),
               st.get("last_takeover_found_done", 0)), flush=True)
        kept += st.get("last_takeover_replies_kept", 0)
        found += st.get("last_takeover_found_done", 0)
    stop.set()
    for p in procs:
        p.join(60)
    bad = []
    while not errs.empty():
        bad.append(errs.get())
    if not refused:
        p = subprocess.run([fmfs, "flush", "--wait", mnt],
                           capture_output=True, text=True)
        if p.returncode:
            bad.append("fmfs flush --wait: %s" % (p.stdout + p.stderr))
    if a.store == "file":
        got = open(store + "/data/appended", "rb").read()
    else:
        got = subprocess.run(["aws", "s3", "cp", url + "/data/appended",
                              "-"], capture_output=True).stdout
    want = b"".join(b"line %08d\n" % i for i in range(acked.value))
    if not got.startswith(want):
        bad.append("the store has %d bytes of the appended file, which do "
                   "not begin with the %d lines fsync acknowledged" %
                   (len(got), acked.value))
    subprocess.run([fmfs, "umount", mnt], check=False)
    for b in bad[:20]:
        print("ERROR:", b)
    if times:
        print("%d trials, %d errors; %s to serving: median %.0f ms, max "
              "%d ms; %d lines fsync'ed, all in the store: %s" %
              (len(times), len(bad), "restart" if a.restart else "kill",
               statistics.median(times), max(times),
               acked.value, "no" if bad else "yes"))
        print("namespace rounds: %d (8 operations each); resent "
              "operations answered by a kept reply: %d, found done by "
              "their intent: %d" % (rounds.value, kept, found))
    return 1 if bad or refused else 0


if __name__ == "__main__":
    sys.exit(main())
