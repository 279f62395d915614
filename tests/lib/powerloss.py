#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""powerloss.py - power-cut trials over tests/crashfs (docs/testing.md).

    powerloss.py run --kind write|ckpt|read --trials N --seed S --dir D
                     [--store file|s3] [--bucket B] [--only T]
                     [--part I/K]
    powerloss.py work MNT --seed S --log FILE     (the write workload)

Each trial mounts crashfs (a FUSE file system that drops or tears what
was not fsynced at a simulated power cut) over a fresh state directory,
runs a program whose files live on it, freezes crashfs at a chosen
operation (the crash point), kills everything with SIGKILL, unmounts,
takes the tree crashfs leaves (tests/crashfs.c: STATE/out) and checks
the contract of docs/semantics.md on it:

  write  fmfs with its --cache-dir on crashfs; a seeded workload writes,
         rewrites, renames and removes files through the mount and
         fsyncs some, logging every content it gives a file and every
         fsync that returned.  After the crash: remount on the recovered
         cache dir, read every file through the mount (only contents the
         workload wrote, or EIO), `fmfs flush --wait`, then read the
         store with an independent reader (its files for file://, the
         aws CLI for s3://): no object holds bytes the workload never
         wrote; every fsync-acknowledged file holds that content or a
         later one; if flush --wait exits 1 it names each key that is
         not there and the bytes are still in the cache dir.
  ckpt   tests/ckpt-writer saving into a directory on crashfs: after the
         crash the newest step it called durable (or a newer one) loads
         byte-exact, and every step `fmckpt list` calls complete loads
         byte-exact.
  read   fmfs reading a file:// store, its cache on crashfs, then a
         remount on the recovered cache: every file reads byte-exact.

Crash points are drawn (seeded) from the operations a calibration run
counts; each trial also draws crashfs's --mode (keep: a kill -9;
drop/tear: a power cut), --meta
(ordered/dirsync) and --freeze (block/eio).  A failure prints the trial's
line (kind, seed, crash point, modes), what was wrong, and the command
line that replays it (--only).  Exit 0 if every trial passed, 1 if not.
"""
import argparse
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

TOP = os.environ.get("TOP") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
FMFS = os.environ.get("FMFS") or os.path.join(TOP, "tools/fmfs")
CRASHFS = os.path.join(TOP, "tests/crashfs")
CKW = os.path.join(TOP, "tests/ckpt-writer")
FMCKPT = os.path.join(TOP, "tools/fmckpt")
EMPTY = hashlib.sha256(b"").hexdigest()


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---- the write workload (runs as its own process, killed at the crash) --

KEYS = ["w/a", "w/b", "w/c", "w/d/e", "w/d/f", "w/g"]
SIZES = [0, 1, 100, 4095, 4096, 5000, 12288 + 7, 70000, 300000, 1 << 20,
         (1 << 20) + 12345, 2500000]


def readwork(args):
    """Reads the files whole, then at random places, then again after
    the index flush (about once a second) has run."""
    rng = random.Random(args.seed)
    for phase in range(3):
        for n in args.names:
            with open(os.path.join(args.mnt, n), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(rng.randrange(0, size) if phase else 0)
                f.read(rng.choice([4096, 1 << 20, size]) if phase else size)
        if phase == 0:
            time.sleep(1.1)


def work(args):
    """Log lines: 'V KEY SHA' before a call that leaves KEY holding SHA;
    'A KEY SHA' after an fsync of KEY holding SHA returned 0; 'C KEY SHA'
    after a close of KEY holding SHA returned 0 (a daemon crash must keep
    it); 'X KEY' before KEY is renamed away or removed; 'R SRC DST' before
    a rename; 'D KEY' after an unlink of KEY returned, 'D SRC DST' after a
    rename did."""
    rng = random.Random(args.seed)
    log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    state = {}  # key -> bytes, as the workload left it

    def note(*f):
        os.write(log, (" ".join(f) + "\n").encode())

    def path(k):
        return os.path.join(args.mnt, k)

    def create(k, data):
        fd = os.open(path(k), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        state[k] = b""
        note("V", k, EMPTY)
        for off in range(0, len(data), 1 << 20):
            note("V", k, sha(data[:off + (1 << 20)]))
            os.pwrite(fd, data[off:off + (1 << 20)], off)
        state[k] = data
        return fd

    def close(fd, k):
        os.close(fd)
        note("C", k, sha(state[k]))

    def move_away(k, rename):
        """Renames k onto another key (returned), or removes it."""
        if rename:
            dst = rng.choice([x for x in KEYS if x != k and x != held[1]])
            note("X", k)
            note("R", k, dst)
            note("V", dst, sha(state[k]))
            os.rename(path(k), path(dst))
            note("D", k, dst)
            state[dst] = state.pop(k)
            note("C", dst, sha(state[dst]))  # closed before: kept
            return dst
        note("X", k)
        os.unlink(path(k))
        note("D", k)
        del state[k]
        return None

    os.makedirs(os.path.join(args.mnt, "w/d"), exist_ok=True)
    held = [None, None, 0]  # the file a chain left open: fd, key, steps
    for step in range(args.steps):
        if held[0] is not None:
            held[2] -= 1
            if held[2] <= 0:
                close(held[0], held[1])
                held = [None, None, 0]
        k = rng.choice([x for x in KEYS if x != held[1]])
        p = path(k)
        r = rng.random()
        sync = rng.random() < 0.5
        if r < 0.2:
            # The name made again at once: a file written and closed,
            # moved away (renamed or removed), created again and written,
            # then left open for the next steps (a durable point elsewhere
            # in between, often).  A crash anywhere in it must never bring
            # the first file back under k (docs/cache-format.md, "Replay").
            flush = rng.random() < 0.5
            # a large first file when its upload is to race the move (the
            # move then lands while the PUT is out: its DELETE waits)
            size = rng.choice(SIZES[:9] if flush else SIZES[9:])
            close(create(k, random.Random(args.seed * 13 + step).randbytes(
                size)), k)
            if flush:  # its upload lands first
                subprocess.run([FMFS, "flush", "--wait", args.mnt, path(k)],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=60)
            dst = move_away(k, rng.random() < 0.5)
            fd = create(k, random.Random(args.seed * 29 + step).randbytes(
                rng.choice(SIZES[:9])))
            others = [x for x in state if x != k]
            if others and rng.random() < 0.6:
                o = rng.choice(others)
                ofd = os.open(path(o), os.O_RDWR)
                os.fsync(ofd)
                note("A", o, sha(state[o]))
                os.close(ofd)
            elif dst and rng.random() < 0.5:
                time.sleep(0.05)
            if held[0] is not None:
                close(held[0], held[1])
            held = [fd, k, rng.randint(1, 4)]
            continue
        elif r < 0.45 or k not in state:
            size = rng.choice(SIZES[:-1] if rng.random() < 0.8 else SIZES)
            fd = create(k, random.Random(args.seed * 7919 + step).randbytes(
                size))
        elif r < 0.57:
            old = state[k]
            off = rng.randrange(0, len(old) + 5000)
            patch = random.Random(args.seed * 31 + step).randbytes(
                rng.choice([1, 100, 4096, 9000]))
            new = old[:off] + b"\0" * max(0, off - len(old)) + patch + \
                old[off + len(patch):]
            fd = os.open(p, os.O_WRONLY)
            note("V", k, sha(new))
            os.pwrite(fd, patch, off)
            state[k] = new
        elif r < 0.66:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            add = random.Random(args.seed * 17 + step).randbytes(
                rng.choice([10, 3000, 40000]))
            note("V", k, sha(state[k] + add))
            os.write(fd, add)
            state[k] += add
        elif r < 0.74:
            fd = os.open(p, os.O_RDWR)
        elif r < 0.87:
            dst = move_away(k, True)
            if sync:
                fd = os.open(path(dst), os.O_RDWR)
                os.fsync(fd)
                note("A", dst, sha(state[dst]))
                os.close(fd)
            continue
        else:
            move_away(k, False)
            continue
        if sync:
            os.fsync(fd)
            note("A", k, sha(state[k]))
        close(fd, k)
    if held[0] is not None:
        close(held[0], held[1])
    note("END")


# ---- the model of what the workload may have left ---------------------

class Model:
    """The workload's log: every content each key had (in order, with the
    log line it came from), the fsync each key must honour, and the
    removals no crash may undo.  keep: a daemon crash, not a power cut
    (crashfs --mode keep): a close that returned is honoured like an
    fsync, and every removal that returned is final; after a power cut
    only a removal followed by an fsync that returned is."""

    def __init__(self, path, keep=False):
        self.hist = {}      # key -> [(line, sha), ...]
        self.given = {}     # key -> [(line it was given to key, sha), ...]
        self.req = {}       # key -> line of the acknowledged content
        self.cut = {}       # key -> contents given before this line are gone
        self.all = {EMPTY}
        self.ended = False
        self.keep = keep
        self.last_v = {}    # key -> line of its last V
        self.last_done = {}  # key -> line of its last A or C
        renames = {}        # (src, dst) -> line of its R
        removals = []       # (line of D, key, cut line)
        last_a = -1
        with open(path) as f:
            lines = f.read().splitlines()
        for n, ln in enumerate(lines):
            f = ln.split()
            if not f:
                continue
            if f[0] == "V" and len(f) == 3:
                self.last_v[f[1]] = n
                self.hist.setdefault(f[1], []).append((n, f[2]))
                self.given.setdefault(f[1], []).append((n, f[2]))
                self.all.add(f[2])
            elif f[0] in ("A", "C") and len(f) == 3:
                self.last_done[f[1]] = n
                if f[0] == "A":
                    last_a = n
                if f[0] == "A" or keep:
                    self.req[f[1]] = max(i for i, s in self.hist[f[1]]
                                         if s == f[2])
            elif f[0] == "R" and len(f) == 3:
                # dst takes src's file: any state src had may come along
                self.hist.setdefault(f[2], []).extend(
                    self.hist.get(f[1], []))
                self.given.setdefault(f[2], []).extend(
                    (n, s) for i, s in self.given.get(f[1], []))
                renames[(f[1], f[2])] = n
            elif f[0] == "X" and len(f) == 2:
                self.req.pop(f[1], None)
            elif f[0] == "D" and len(f) == 2:
                removals.append((n, f[1], n))
            elif f[0] == "D" and len(f) == 3:
                removals.append((n, f[1], n))
                # what dst held before the rename is gone as well
                removals.append((n, f[2], renames[(f[1], f[2])]))
            elif f[0] == "END":
                self.ended = True
        for d, k, cut in removals:
            if keep or d < last_a:
                self.cut[k] = max(self.cut.get(k, -1), cut)

    def torn_ok(self, key):
        """After a kill -9, a file being written at the crash (changed
        since its last close or fsync) goes up as it stands
        (docs/semantics.md): a write cut part way leaves bytes no V line
        names, and that is no fault."""
        return self.keep and \
            self.last_v.get(key, -1) > self.last_done.get(key, -1)

    def came_back(self, key, digest):
        """Whether content digest at key is one a finished removal had
        taken away (a deleted or renamed-away name back with old bytes)."""
        if key not in self.cut:
            return False
        return digest not in {s for i, s in self.given.get(key, [])
                              if i >= self.cut[key]}

    def changed_after(self, key):
        """Whether the workload changed key after its acknowledged fsync
        (and did not fsync again): a power cut may then leave any mix of
        the acknowledged bytes and the later ones, as on a local disk."""
        return any(i > self.req[key] for i, s in self.hist[key])

    def later(self, key):
        """Contents an acknowledged key may hold: the acknowledged one, or
        one the workload gave the file at that key since."""
        return {s for i, s in self.hist[key] if i >= self.req[key]}


# ---- processes and mounts ----------------------------------------------

def is_mounted(mnt):
    """From /proc/self/mounts: os.path.ismount stats the mount point,
    which a frozen crashfs or a dead fmfs does not answer."""
    mnt = os.path.abspath(mnt)
    with open("/proc/self/mounts") as f:
        return any(ln.split()[1] == mnt for ln in f)


def wait_mount(mnt, proc, secs=10, stop=None):
    """Until mnt is mounted (True), or proc ended, or stop() says that
    crashfs froze under it, or secs passed (False)."""
    t = time.time() + secs
    while time.time() < t:
        if is_mounted(mnt):
            return True
        if proc is not None and proc.poll() is not None:
            return False
        if stop is not None and stop():
            time.sleep(0.05)
            return is_mounted(mnt)
        time.sleep(0.02)
    return False


def unmount(mnt):
    for cmd in (["fusermount3", "-u", mnt], ["umount", mnt],
                ["umount", "-l", mnt]):
        if not is_mounted(mnt):
            return
        subprocess.run(cmd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if is_mounted(mnt):
            time.sleep(0.1)


def kill(proc):
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)


class Crashfs:
    def __init__(self, tdir, crash_at, mode, meta, freeze, seed,
                 template=None):
        self.state = os.path.join(tdir, "st")
        self.mnt = os.path.join(tdir, "cm")
        os.makedirs(os.path.join(self.state, "root"), exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        if template:
            shutil.copytree(template, os.path.join(self.state, "root/cache"),
                            symlinks=True)
        self.err = open(os.path.join(tdir, "crashfs.err"), "w")
        self.p = subprocess.Popen(
            [CRASHFS, "--crash-at", str(crash_at), "--mode", mode,
             "--meta", meta, "--freeze", freeze, "--seed", str(seed),
             "--log", self.state, self.mnt], stderr=self.err)
        if not wait_mount(self.mnt, self.p):
            raise RuntimeError("crashfs did not mount (see %s)" %
                               self.err.name)

    def frozen(self):
        return os.path.exists(os.path.join(self.state, "frozen"))

    def crash(self, procs, mounts):
        """The power cut: freeze now (if not yet), SIGKILL every process
        above, release what waits, unmount, and let crashfs write out."""
        self.p.send_signal(signal.SIGUSR1)
        for p in procs:
            kill(p)
        time.sleep(0.05)
        self.p.send_signal(signal.SIGUSR2)
        for p in procs:
            if p is not None:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    raise RuntimeError("a killed process did not end")
        for m in mounts:
            unmount(m)
        unmount(self.mnt)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise RuntimeError("crashfs did not end after umount")
        self.err.close()
        out = os.path.join(self.state, "out")
        if not os.path.isdir(out):
            raise RuntimeError("crashfs left no %s" % out)
        return out

    def ops(self):
        with open(os.path.join(self.state, "ops")) as f:
            return int(f.readline().split()[1])


def frozen_line(st):
    try:
        with open(os.path.join(st, "frozen")) as f:
            return f.read().strip()
    except OSError:
        return "(no freeze before the end)"


def fmfs_mount(url, mnt, cache, log, extra=(), stop=None, boot="pl-1"):
    """boot: the boot id fmfs sees (FMFS_BOOT_ID); mounts after a power
    cut run in another boot, as after a real one."""
    os.makedirs(mnt, exist_ok=True)
    env = dict(os.environ, FMFS_BOOT_ID=boot)
    with open(log, "a") as err:
        p = subprocess.Popen([FMFS, "mount", url, mnt, "--cache-dir", cache,
                              "--foreground", "--no-passthrough"] +
                             list(extra), stdout=err, stderr=err, env=env)
    return p, wait_mount(mnt, p, stop=stop)


def fmfs_umount(mnt, proc, timeout=60):
    r = subprocess.run([FMFS, "umount", mnt], capture_output=True,
                       text=True, timeout=timeout)
    if proc is not None:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            kill(proc)
            proc.wait()
    unmount(mnt)
    return r


def clean_umount(mnt, cf):
    """`fmfs umount` at the end of a run, given up on (left to the crash)
    once crashfs froze under it; returns its process."""
    p = subprocess.Popen([FMFS, "umount", mnt], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    end = time.time() + 30
    while p.poll() is None and not cf.frozen() and time.time() < end:
        time.sleep(0.01)
    return p


def draw_modes(rng):
    """keep (a kill -9 of the processes, nothing dropped) one time in
    five, else a power cut that drops or tears."""
    r = rng.random()
    return ("keep" if r < 0.2 else "drop" if r < 0.6 else "tear",
            "dirsync" if rng.random() < 0.3 else "ordered",
            "eio" if rng.random() < 0.2 else "block")


# ---- the store, read without fmfs --------------------------------------

def store_objects(store, tdir):
    """key -> bytes of every object of the store (not fmfs's .fmfs/)."""
    kind, where = store
    objs = {}
    if kind == "file":
        for dp, dns, fns in os.walk(where):
            rel = os.path.relpath(dp, where)
            if rel == ".fmfs" or rel.startswith(".fmfs/"):
                continue
            for fn in fns:
                k = os.path.normpath(os.path.join(rel, fn))
                with open(os.path.join(dp, fn), "rb") as f:
                    objs[k] = f.read()
        return objs
    local = os.path.join(tdir, "bucket")
    shutil.rmtree(local, ignore_errors=True)
    subprocess.run(["aws", "--endpoint-url", os.environ["RGW_ENDPOINT"],
                    "s3", "cp", "--quiet", "--recursive", where, local],
                   check=True)
    for dp, dns, fns in os.walk(local):
        for fn in fns:
            k = os.path.relpath(os.path.join(dp, fn), local)
            with open(os.path.join(dp, fn), "rb") as f:
                objs[k] = f.read()
    return objs


def cache_contents(cache):
    """sha of every file under the cache dir's dirty/ and lost+found/."""
    got = set()
    for sub in ("dirty", "lost+found"):
        for dp, dns, fns in os.walk(os.path.join(cache, sub)):
            for fn in fns:
                with open(os.path.join(dp, fn), "rb") as f:
                    got.add(sha(f.read()))
    return got


# ---- trials ----------------------------------------------------------------

def trial_write(t, a, tdir, crash_at, modes, seed, template, calib=False):
    errs = []
    st_url = a.store_url(t)   # emptied
    store = a.store_of(t)
    # most trials start from a cache dir made before (see make_template),
    # one in eight from nothing
    cf = Crashfs(tdir, crash_at, *modes, seed,
                 template=template if seed % 8 else None)
    mnt = os.path.join(tdir, "mnt")
    log = os.path.join(tdir, "fmfs.log")
    wlog = os.path.join(tdir, "work.log")
    delay = ["--async-delay", "0"] if seed % 2 else []
    fm, ok = fmfs_mount(st_url, mnt, os.path.join(cf.mnt, "cache"), log,
                        delay, stop=cf.frozen)
    wp = up = None
    if ok:
        with open(os.path.join(tdir, "work.err"), "w") as we:
            wp = subprocess.Popen([sys.executable, __file__, "work", mnt,
                                   "--seed", str(seed), "--log", wlog,
                                   "--steps", str(a.steps)] +
                                  (["--delay0"] if delay else []),
                                  stdout=we, stderr=we)
        end = time.time() + 60
        while wp.poll() is None and not cf.frozen() and time.time() < end:
            time.sleep(0.01)
        if wp.poll() == 0 and not cf.frozen():
            # the clean end: umount drains, and may meet the crash too
            up = clean_umount(mnt, cf)
    out = cf.crash([wp, fm, up], [mnt])
    if calib:
        return cf.ops()
    if not os.path.exists(wlog):
        open(wlog, "w").close()
    m = Model(wlog, keep=modes[0] == "keep")

    ACKS[0] += len(m.req)
    # the remount on what the power cut left (a copy kept as it was)
    cache = os.path.join(out, "cache")
    if os.path.isdir(cache):
        subprocess.run(["cp", "-a", cache, os.path.join(tdir, "crashed")])
    # a kill -9 (keep) leaves the system up: the same boot
    fm, ok = fmfs_mount(st_url, mnt, cache, log + ".2",
                        boot="pl-1" if modes[0] == "keep" else "pl-2")
    if not ok:
        with open(log + ".2") as f:
            msg = f.read().strip()
        kept = cache_contents(cache) if os.path.isdir(cache) else set()
        if not msg:
            errs.append("remount failed without a message")
        objs = store_objects(store, tdir)
        for k, b in objs.items():
            if sha(b) not in m.all and not m.torn_ok(k):
                errs.append("%s in the store holds bytes never written" % k)
        for k in m.req:
            if sha(objs.get(k, b"\1")) not in m.later(k) and \
                    not (m.later(k) & kept):
                errs.append("remount refused (%s) and acknowledged %s is "
                            "neither in the store nor in the cache dir" %
                            (msg.splitlines()[-1] if msg else "", k))
        return errs, "refused"
    # reads through the mount: what the workload wrote, or EIO
    seen = {}
    for dp, dns, fns in os.walk(os.path.join(mnt, "w")):
        for fn in fns:
            k = os.path.relpath(os.path.join(dp, fn), mnt)
            try:
                with open(os.path.join(dp, fn), "rb") as f:
                    b = f.read()
            except OSError as e:
                seen[k] = "EIO" if e.errno == 5 else e.strerror
                if e.errno != 5:
                    errs.append("reading %s through the mount: %s" %
                                (k, e.strerror))
                continue
            seen[k] = sha(b)
            if sha(b) not in m.all:
                if not m.torn_ok(k):
                    errs.append("the mount serves %s with bytes never "
                                "written (%d bytes)" % (k, len(b)))
            elif m.came_back(k, sha(b)):
                errs.append("the mount shows %s, removed or renamed away "
                            "before the crash, with its old bytes" % k)
    for k in m.req:
        if k not in seen:
            errs.append("acknowledged %s is missing from the remount" % k)
        elif seen[k] != "EIO" and seen[k] not in m.later(k) and not (
                seen[k] not in m.all and m.torn_ok(k)):
            errs.append("acknowledged %s reads back as an older or other "
                        "version" % k)
    try:
        fl = subprocess.run([FMFS, "flush", "--wait", mnt],
                            capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        errs.append("fmfs flush --wait did not end in 120 s")
        kill(fm)
        unmount(mnt)
        return errs, "hung"
    r = fmfs_umount(mnt, fm)
    if r.returncode not in (0, 1):
        errs.append("fmfs umount exited %d: %s" % (r.returncode, r.stderr))
    objs = store_objects(store, tdir)
    for k, b in objs.items():
        if sha(b) not in m.all:
            if not m.torn_ok(k):
                errs.append("%s in the store holds bytes never written "
                            "(%d bytes)" % (k, len(b)))
        elif m.came_back(k, sha(b)) and not (
                fl.returncode == 1 and k in fl.stdout + fl.stderr):
            errs.append("%s, removed or renamed away before the crash, is "
                        "back in the store with its old bytes after flush "
                        "--wait (exit %d)" % (k, fl.returncode))
    kept = cache_contents(cache)
    for k in m.req:
        good = k in objs and (sha(objs[k]) in m.later(k) or (
            sha(objs[k]) not in m.all and m.torn_ok(k)))
        if good:
            continue
        what = "missing" if k not in objs else "an older or other version"
        if fl.returncode == 0:
            errs.append("acknowledged %s is %s in the store, yet flush "
                        "--wait exited 0" % (k, what))
        elif k not in fl.stdout + fl.stderr:
            errs.append("acknowledged %s is %s in the store and flush "
                        "--wait (exit %d) does not name it" %
                        (k, what, fl.returncode))
        elif not (m.later(k) & kept):
            said = [ln for ln in (fl.stdout + fl.stderr).splitlines()
                    if k in ln]
            # changed after its fsync: torn bytes held as damaged, named
            # with the path they stay at, are what a local disk gives
            held = [p for ln in said for p in ln.split()
                    if p.startswith(cache + "/") and os.path.isfile(p)]
            if m.changed_after(k) and held:
                continue
            errs.append("acknowledged %s is %s in the store and its bytes "
                        "are not in the cache dir (flush: %s)" %
                        (k, what, said[0] if said else ""))
    if fl.returncode not in (0, 1):
        errs.append("flush --wait exited %d: %s" % (fl.returncode,
                                                     fl.stderr.strip()))
    return errs, "flush %d" % fl.returncode


ACKS = [0]  # fsync-acknowledged files checked, over all trials
CK_ARGS = ["--size", "200000", "--tensors", "5"]


def trial_ckpt(t, a, tdir, crash_at, modes, seed, template, calib=False):
    errs = []
    cf = Crashfs(tdir, crash_at, *modes, seed)
    outp = os.path.join(tdir, "save.out")
    with open(outp, "w") as o, open(os.path.join(tdir, "save.err"),
                                     "w") as e:
        wp = subprocess.Popen([CKW, "save", "--dir",
                               os.path.join(cf.mnt, "ck"), "--count", "5",
                               "--keep-local", "2"] + CK_ARGS,
                              stdout=o, stderr=e)
        end = time.time() + 60
        while wp.poll() is None and not cf.frozen() and time.time() < end:
            time.sleep(0.005)
    out = cf.crash([wp], [])
    if calib:
        return cf.ops()
    durable = [int(x.split()[1]) for x in open(outp).read().splitlines()
               if x.startswith("durable ")]
    last = max(durable) if durable else None
    ck = os.path.join(out, "ck")
    r = subprocess.run([CKW, "check", "--dir", ck] + CK_ARGS,
                       capture_output=True, text=True)
    if r.returncode == 4:
        if last is not None:
            errs.append("step %d was durable, the load found none: %s" %
                        (last, r.stderr.strip()))
    elif r.returncode == 0:
        n = int(r.stdout.split()[1])
        if last is not None and n < last:
            errs.append("loaded step %d, older than durable %d (%s)" %
                        (n, last, r.stderr.strip()))
    else:
        errs.append("load failed (exit %d): %s" % (r.returncode,
                                                   r.stderr.strip()))
    if os.path.isdir(ck):
        ls = subprocess.run([FMCKPT, "list", "-t", ck, "--json"],
                            capture_output=True, text=True)
        import json
        try:
            steps = [c["step"] for c in json.loads(ls.stdout)["checkpoints"]]
        except ValueError:
            steps = []
            errs.append("fmckpt list: %s %s" % (ls.stdout, ls.stderr))
        for s in steps:
            r = subprocess.run([CKW, "check", "--dir", ck, "--step", str(s)]
                               + CK_ARGS, capture_output=True, text=True)
            if r.returncode:
                errs.append("step %d is listed complete but does not load "
                            "(exit %d): %s" % (s, r.returncode,
                                               r.stderr.strip()))
    return errs, "durable %s" % last


def trial_read(t, a, tdir, crash_at, modes, seed, template, calib=False):
    errs = []
    url = "file://" + a.read_store
    cf = Crashfs(tdir, crash_at, *modes, seed,
                 template=template if seed % 8 else None)
    mnt = os.path.join(tdir, "mnt")
    log = os.path.join(tdir, "fmfs.log")
    fm, ok = fmfs_mount(url, mnt, os.path.join(cf.mnt, "cache"), log,
                        ["--mode", "ro"], stop=cf.frozen)
    names = [n for n in sorted(os.listdir(a.read_store))
             if not n.startswith(".")]
    rp = up = None
    if ok:
        with open(os.path.join(tdir, "read.err"), "w") as re_:
            rp = subprocess.Popen([sys.executable, __file__, "readwork", mnt,
                                   "--seed", str(seed)] + names,
                                  stdout=re_, stderr=re_)
        end = time.time() + 60
        while rp.poll() is None and not cf.frozen() and time.time() < end:
            time.sleep(0.01)
        if rp.poll() == 0 and not cf.frozen():
            up = clean_umount(mnt, cf)
    out = cf.crash([rp, fm, up], [mnt])
    if calib:
        return cf.ops()
    fm, ok = fmfs_mount(url, mnt, os.path.join(out, "cache"), log + ".2",
                        ["--mode", "ro"], boot="pl-2")
    if not ok:
        return ["remount on the recovered cache failed: %s" %
                open(log + ".2").read().strip()], "refused"
    for n in names:
        with open(os.path.join(a.read_store, n), "rb") as f:
            want = f.read()
        try:
            with open(os.path.join(mnt, n), "rb") as f:
                got = f.read()
        except OSError as e:
            errs.append("%s: %s after the crash" % (n, e.strerror))
            continue
        if got != want:
            errs.append("%s reads back wrong after the crash" % n)
    fmfs_umount(mnt, fm)
    return errs, "ok"


KINDS = {"write": trial_write, "ckpt": trial_ckpt, "read": trial_read}


def make_template(a, d):
    """A cache dir made by one mount and umount on a plain disk, so that
    most crash points fall in the workload, not in the first mount."""
    tpl = os.path.join(d, "template-cache")
    if a.kind == "ckpt":
        return None
    url = a.store_url(-1) if a.kind == "write" else "file://" + a.read_store
    mnt = os.path.join(d, "template-mnt")
    fm, ok = fmfs_mount(url, mnt, tpl,
                        os.path.join(d, "template.log"))
    if not ok:
        raise RuntimeError("cannot mount fmfs for the template")
    fmfs_umount(mnt, fm)
    for x in ("lock", "fmfs.log", "index.lock"):
        if os.path.exists(os.path.join(tpl, x)):
            os.unlink(os.path.join(tpl, x))
    return tpl


def run(a):
    d = os.path.abspath(a.dir)
    os.makedirs(d, exist_ok=True)
    if a.kind == "read":
        a.read_store = os.path.join(d, "read-store")
        os.makedirs(a.read_store, exist_ok=True)
        rr = random.Random(a.seed)
        for n, size in (("small", 5000), ("mid", 300000),
                        ("big", 3 * 1024 * 1024 + 77), ("two", 1 << 21)):
            with open(os.path.join(a.read_store, n), "wb") as f:
                f.write(rr.randbytes(size))
    # One store URL for the whole run (a cache dir belongs to one store),
    # emptied before each trial.
    if a.store == "s3":
        url = "s3://%s/pl" % a.bucket
        a.store_of = lambda t: ("s3", url + "/")

        def fresh(t):
            subprocess.run(["aws", "--endpoint-url",
                            os.environ["RGW_ENDPOINT"], "s3", "rm",
                            "--quiet", "--recursive", url + "/"], check=True)
            return url
    else:
        sd = os.path.join(d, "store")
        a.store_of = lambda t: ("file", sd)

        def fresh(t):
            shutil.rmtree(sd, ignore_errors=True)
            os.makedirs(sd)
            return "file://" + sd
    a.store_url = fresh
    template = make_template(a, d)
    fn = KINDS[a.kind]
    # calibration: how many operations a whole run makes
    cdir = os.path.join(d, "calib")
    total = fn(-1, a, cdir, 0, ("drop", "ordered", "block"), a.seed, template,
               calib=True)
    shutil.rmtree(cdir, ignore_errors=True)
    print("powerloss %s: a whole run makes %d operations on crashfs" %
          (a.kind, total), flush=True)
    rng = random.Random(a.seed)
    fails = 0
    t0 = time.time()
    tally = {}
    for t in range(a.trials):
        seed = rng.randrange(1, 1 << 30)
        crash_at = rng.randrange(1, int(total * 1.1) + 2)
        modes = draw_modes(rng)
        if a.modes:
            modes = tuple(a.modes.split(","))
        if a.only is not None and t != a.only:
            continue
        if a.only is None and t % a.parts != a.part:
            continue
        tdir = os.path.join(d, "t%d" % t)
        shutil.rmtree(tdir, ignore_errors=True)
        os.makedirs(tdir)
        try:
            errs, outcome = fn(t, a, tdir, crash_at, modes, seed, template)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            errs, outcome = ["harness: %s" % e], "error"
        tally[outcome.split()[0]] = tally.get(outcome.split()[0], 0) + 1
        line = ("trial %d kind %s seed %d crash-at %d/%d mode %s meta %s "
                "freeze %s: %s" % (t, a.kind, seed, crash_at, total,
                                   *modes, outcome))
        if errs:
            fails += 1
            if a.store == "file" and a.kind == "write":
                shutil.copytree(a.store_of(t)[1],
                                os.path.join(tdir, "store-after"))
            print("FAIL " + line, flush=True)
            print("  crashfs froze at: %s" %
                  frozen_line(os.path.join(tdir, "st")), flush=True)
            for e in errs[:8]:
                print("  - " + e, flush=True)
            print("  replay: %s run --kind %s --trials %d --seed %d "
                  "--store %s --only %d --dir DIR" %
                  (sys.argv[0], a.kind, a.trials, a.seed, a.store, t),
                  flush=True)
        else:
            if a.verbose:
                print("ok   " + line, flush=True)
            if not a.keep:
                shutil.rmtree(tdir, ignore_errors=True)
    print("powerloss %s: %d trials, %d failed, %.0f s (%s%s)" %
          (a.kind, sum(tally.values()), fails,
           time.time() - t0,
           ", ".join("%s %d" % kv for kv in sorted(tally.items())),
           "; %d fsync-acknowledged files checked" % ACKS[0]
           if a.kind == "write" else ""), flush=True)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("work")
    w.add_argument("mnt")
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--log", required=True)
    w.add_argument("--steps", type=int, default=24)
    w.add_argument("--delay0", action="store_true",
                   help="the mount uploads at once (--async-delay 0)")
    rw = sub.add_parser("readwork")
    rw.add_argument("mnt")
    rw.add_argument("--seed", type=int, required=True)
    rw.add_argument("names", nargs="+")
    r = sub.add_parser("run")
    r.add_argument("--kind", choices=sorted(KINDS), required=True)
    r.add_argument("--trials", type=int, default=20)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--dir", required=True)
    r.add_argument("--store", choices=["file", "s3"], default="file")
    r.add_argument("--bucket")
    r.add_argument("--steps", type=int, default=24)
    r.add_argument("--only", type=int)
    r.add_argument("--part", default="0/1",
                   help="I/K: only trials T with T %% K == I (the draws of "
                   "every trial stay as in the whole run), so K runs, each "
                   "with its own --dir, share one seed")
    r.add_argument("--modes", help="MODE,META,FREEZE for every trial "
                   "(e.g. drop,ordered,block) instead of drawn ones")
    r.add_argument("--keep", action="store_true",
                   help="keep the directories of trials that passed")
    r.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if a.cmd == "work":
        work(a)
        return 0
    if a.cmd == "readwork":
        readwork(a)
        return 0
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", a.part)
    if not m or int(m.group(1)) >= int(m.group(2)):
        ap.error("--part %s: give I/K with 0 <= I < K" % a.part)
    a.part, a.parts = int(m.group(1)), int(m.group(2))
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
