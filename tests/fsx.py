#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fsx.py - an fsx-style randomized file checker (Python standard library only).

    fsx.py DIR --seed N --steps N [--files K] [--maxlen BYTES]
           [--manifest OUT.json] [--no-rename] [--fsync-every N] [-v]
    fsx.py --verify-manifest MANIFEST.json DIR

Keeps K files (default 4) directly under DIR (created if missing) and, for
each, a model of its contents in memory.  Every step picks one random
operation on one random file: pwrite at a random offset (also past EOF,
leaving a hole that must read as zeros), overwrite inside the data, append
through an O_APPEND descriptor, ftruncate / truncate-by-path (grow and
shrink), pread at random offsets and lengths, reads through a second
descriptor opened separately, a whole-file read, fstat/stat sizes, close and
reopen (sometimes with O_TRUNC), fsync/fdatasync, rename to a new name,
rename over another of the files (which replaces it), unlink (an open
descriptor must still read the old bytes) then recreate, and a directory
listing.  Offsets and lengths are biased to 1 MiB and 4 KiB boundaries
+/- a few bytes and to the current end of file.  Everything is drawn from
one random.Random(seed), so a seed replays the same sequence.

On the first difference it prints the seed, the step, the last 30
operations and a hex excerpt of expected vs actual bytes, and exits 1 (an
unexpected error from the filesystem counts as a difference).  At the end
it reads every file whole once more, closes everything and, with
--manifest, writes {name: {"size": n, "sha256": hex}} (names relative to
DIR).  Exit 0 with a one-line summary on success; 2 on bad usage.

--verify-manifest checks that DIR holds exactly the manifest's files, with
the same sizes and sha256 (exit 0 / 1).

Self-test hook: FSX_SELFTEST_CORRUPT=byte (or 1) flips one byte of a file on
disk, behind the model's back, just before the first read after half the
steps, inside the range that read covers; FSX_SELFTEST_CORRUPT=size grows a
file by one byte behind the model's back just before the first stat after
half the steps.  Either must make fsx report a mismatch and exit 1.
"""

import argparse
import collections
import errno
import hashlib
import json
import os
import random
import stat as statmod
import sys
import traceback

MIB = 1 << 20
KIB4 = 4096
HISTORY = 30

# (operation, weight)
OPS = [
    ("write", 20),
    ("overwrite", 8),
    ("append", 6),
    ("ftruncate", 5),
    ("truncate", 4),
    ("read", 15),
    ("read2", 8),
    ("readall", 3),
    ("stat", 5),
    ("reopen", 5),
    ("close", 3),
    ("fsync", 3),
    ("rename", 3),
    ("rename_over", 2),
    ("unlink", 2),
    ("listdir", 2),
]
RENAME_OPS = ("rename", "rename_over")


class Mismatch(Exception):
    """A difference between the filesystem and the model."""

    def __init__(self, msg, expected=None, actual=None, base=0):
        super().__init__(msg)
        self.expected = expected
        self.actual = actual
        self.base = base


def hexdiff(expected, actual, base):
    """A few lines of hex around the first difference; base = file offset
    of expected[0]/actual[0]."""
    n = min(len(expected), len(actual))
    first = None
    ndiff = 0
    last = None
    for i in range(n):
        if expected[i] != actual[i]:
            ndiff += 1
            last = i
            if first is None:
                first = i
    out = []
    out.append("  expected %d bytes, got %d bytes (at file offset %d)"
               % (len(expected), len(actual), base))
    if first is None:
        if len(expected) == len(actual):
            return "\n".join(out)
        first = n
        out.append("  common part equal; lengths differ from file offset %d"
                   % (base + n))
    else:
        out.append("  %d differing byte(s) in the common part, first at file "
                   "offset %d (0x%x), last at %d" % (ndiff, base + first,
                                                    base + first, base + last))
    start = max(0, (first // 16) * 16 - 32)
    end = min(max(len(expected), len(actual)), start + 16 * 6)

    def row(buf, o):
        chunk = buf[o:o + 16]
        return " ".join("%02x" % b for b in chunk).ljust(47)

    out.append("  %-10s  %-47s | %s" % ("offset", "expected", "actual"))
    for o in range(start, end, 16):
        mark = ""
        for i in range(o, o + 16):
            e = expected[i] if i < len(expected) else None
            a = actual[i] if i < len(actual) else None
            if e != a:
                mark = "  <-- differs"
                break
        out.append("  %-10d  %s | %s%s" % (base + o, row(expected, o),
                                            row(actual, o), mark))
    return "\n".join(out)


def pread_full(fd, length, offset):
    """pread until length bytes or end of file (short reads are legal)."""
    parts = []
    got = 0
    while got < length:
        b = os.pread(fd, length - got, offset + got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def pwrite_full(fd, data, offset):
    mv = memoryview(data)
    done = 0
    while done < len(data):
        n = os.pwrite(fd, mv[done:], offset + done)
        if n <= 0:
            raise OSError(errno.EIO, "pwrite returned %d" % n)
        done += n


def write_full(fd, data):
    mv = memoryview(data)
    done = 0
    while done < len(data):
        n = os.write(fd, mv[done:])
        if n <= 0:
            raise OSError(errno.EIO, "write returned %d" % n)
        done += n


def read_whole(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        while True:
            b = os.read(fd, MIB)
            if not b:
                break
            parts.append(b)
        return b"".join(parts)
    finally:
        os.close(fd)


class Slot:
    """One file: its name, model and open descriptors."""

    def __init__(self, idx):
        self.idx = idx
        self.gen = 0
        self.name = None
        self.model = bytearray()
        self.fd = None      # primary, O_RDWR
        self.fd2 = None     # second descriptor, O_RDONLY


class Fsx:
    def __init__(self, args):
        self.a = args
        self.dir = args.dir
        self.rng = random.Random(args.seed)
        self.step = 0
        self.history = collections.deque(maxlen=HISTORY)
        self.counts = collections.Counter()
        self.bytes_written = 0
        self.slots = [Slot(i) for i in range(args.files)]
        self.ops = [(o, w) for o, w in OPS
                    if not (args.no_rename and o in RENAME_OPS)
                    and not (o == "rename_over" and args.files < 2)]
        self.op_names = [o for o, _ in self.ops]
        self.op_weights = [w for _, w in self.ops]
        self.preexisting = set()
        corrupt = os.environ.get("FSX_SELFTEST_CORRUPT", "")
        self.corrupt = {"": None, "0": None, "1": "byte", "byte": "byte",
                        "size": "size"}.get(corrupt, "bad")
        if self.corrupt == "bad":
            print("fsx: FSX_SELFTEST_CORRUPT must be byte, 1 or size",
                  file=sys.stderr)
            sys.exit(2)
        self.corrupt_done = False
        self.crng = random.Random(args.seed ^ 0x5eed)

    # ---- helpers -------------------------------------------------------
    def path(self, s, name=None):
        return os.path.join(self.dir, name if name is not None else s.name)

    def log(self, text):
        line = "#%d %s" % (self.step, text)
        self.history.append(line)
        if self.a.verbose:
            print(line, flush=True)

    def new_name(self, s):
        while True:
            s.gen += 1
            name = "f%d.g%d" % (s.idx, s.gen)
            if name not in self.preexisting:
                return name

    def ensure_fd(self, s):
        if s.fd is None:
            s.fd = os.open(self.path(s), os.O_RDWR)
            self.log("  (open %s O_RDWR)" % s.name)
        return s.fd

    def close_fds(self, s):
        for attr in ("fd", "fd2"):
            fd = getattr(s, attr)
            if fd is not None:
                setattr(s, attr, None)
                os.close(fd)

    def pick_pos(self, limit, eof):
        """A position in [0, limit], biased to block boundaries and EOF."""
        r = self.rng.random()
        d = self.rng.randint(-8, 8)
        if r < 0.25 and limit >= MIB:
            p = self.rng.randint(0, limit // MIB) * MIB + d
        elif r < 0.40:
            p = self.rng.randint(0, limit // KIB4) * KIB4 + d
        elif r < 0.55:
            p = eof + d * self.rng.choice((1, 1, 64, 4096))
        else:
            p = self.rng.randint(0, limit)
        return max(0, min(limit, p))

    def pick_len(self, room):
        """A length in [1, room] (room >= 1): mostly small, sometimes large
        enough to span one or two 1 MiB blocks."""
        r = self.rng.random()
        if r < 0.50:
            n = self.rng.randint(1, 4096)
        elif r < 0.80:
            n = self.rng.randint(1, 65536)
        elif r < 0.93:
            n = self.rng.randint(1, 256 * 1024)
        elif r < 0.98:
            n = self.rng.randint(1, MIB + 16)
        else:
            n = self.rng.randint(MIB, 2 * MIB + 16)
        return max(1, min(room, n))

    def data(self, n):
        return self.rng.randbytes(n)

    def check_bytes(self, what, expected, actual, base):
        if bytes(expected) != actual:
            raise Mismatch(what, bytes(expected), actual, base)

    def maybe_corrupt_range(self, s, off, length):
        """Self-test: flip one byte in [off, off+length) behind the model."""
        if (self.corrupt != "byte" or self.corrupt_done
                or self.step < self.a.steps // 2):
            return
        end = min(off + length, len(s.model))
        if end <= off:
            return
        pos = self.crng.randrange(off, end)
        fd = os.open(self.path(s), os.O_RDWR)
        try:
            b = os.pread(fd, 1, pos)
            os.pwrite(fd, bytes([b[0] ^ 0xff]), pos)
        finally:
            os.close(fd)
        self.corrupt_done = True
        print("fsx: SELFTEST: flipped the byte at offset %d of %s behind "
              "the model's back (step %d)" % (pos, s.name, self.step),
              flush=True)

    def maybe_corrupt_size(self, s):
        if (self.corrupt != "size" or self.corrupt_done
                or self.step < self.a.steps // 2):
            return
        os.truncate(self.path(s), len(s.model) + 1)
        self.corrupt_done = True
        print("fsx: SELFTEST: grew %s by one byte behind the model's back "
              "(step %d)" % (s.name, self.step), flush=True)

    def verify_whole(self, s, how):
        """Whole-file check by path through a fresh descriptor."""
        self.maybe_corrupt_range(s, 0, len(s.model))
        actual = read_whole(self.path(s))
        self.check_bytes("%s: whole-file read of %s" % (how, s.name),
                         s.model, actual, 0)

    def verify_fd(self, s, fd, how):
        st = os.fstat(fd)
        if st.st_size != len(s.model):
            raise Mismatch("%s: fstat size of %s is %d, model %d"
                           % (how, s.name, st.st_size, len(s.model)))
        actual = pread_full(fd, len(s.model) + 1, 0)
        self.check_bytes("%s: read of %s through its open descriptor"
                         % (how, s.name), s.model, actual, 0)

    def names(self):
        return {s.name for s in self.slots}

    # ---- operations ----------------------------------------------------
    def op_write(self, s):
        off = self.pick_pos(self.a.maxlen - 1, len(s.model))
        n = self.pick_len(self.a.maxlen - off)
        buf = self.data(n)
        fd = self.ensure_fd(s)
        hole = off - len(s.model) if off > len(s.model) else 0
        self.log("write %s off=%d len=%d (size %d%s)" % (
            s.name, off, n, len(s.model),
            ", hole %d" % hole if hole else ""))
        if self.rng.random() < 0.2:
            os.lseek(fd, off, os.SEEK_SET)
            write_full(fd, buf)
        else:
            pwrite_full(fd, buf, off)
        if hole:
            s.model.extend(bytes(hole))
        s.model[off:off + n] = buf
        self.bytes_written += n

    def op_overwrite(self, s):
        if not s.model:
            return self.op_write(s)
        off = self.pick_pos(len(s.model) - 1, len(s.model))
        n = self.pick_len(len(s.model) - off)
        buf = self.data(n)
        fd = self.ensure_fd(s)
        self.log("overwrite %s off=%d len=%d (size %d)"
                 % (s.name, off, n, len(s.model)))
        pwrite_full(fd, buf, off)
        s.model[off:off + n] = buf
        self.bytes_written += n

    def op_append(self, s):
        room = self.a.maxlen - len(s.model)
        if room <= 0:
            return self.op_ftruncate(s)
        n = self.pick_len(room)
        buf = self.data(n)
        self.log("append %s len=%d (size %d), own O_APPEND descriptor"
                 % (s.name, n, len(s.model)))
        fd = os.open(self.path(s), os.O_WRONLY | os.O_APPEND)
        try:
            # O_APPEND ignores the current offset: seek somewhere silly first
            os.lseek(fd, 0, os.SEEK_SET)
            write_full(fd, buf)
        finally:
            os.close(fd)
        s.model.extend(buf)
        self.bytes_written += n

    def pick_size(self, s):
        if self.rng.random() < 0.5 and s.model:
            return self.pick_pos(len(s.model), len(s.model))   # shrink-ish
        return self.pick_pos(self.a.maxlen, len(s.model))

    def resize_model(self, s, size):
        if size < len(s.model):
            del s.model[size:]
        else:
            s.model.extend(bytes(size - len(s.model)))

    def op_ftruncate(self, s):
        size = self.pick_size(s)
        fd = self.ensure_fd(s)
        self.log("ftruncate %s %d -> %d" % (s.name, len(s.model), size))
        os.ftruncate(fd, size)
        self.resize_model(s, size)

    def op_truncate(self, s):
        size = self.pick_size(s)
        self.log("truncate(path) %s %d -> %d" % (s.name, len(s.model), size))
        os.truncate(self.path(s), size)
        self.resize_model(s, size)

    def pick_read(self, s):
        size = len(s.model)
        off = self.pick_pos(max(size, 1) + 16, size)
        n = self.pick_len(self.a.maxlen + 32)
        return off, n

    def op_read(self, s):
        off, n = self.pick_read(s)
        fd = self.ensure_fd(s)
        self.log("read %s off=%d len=%d (size %d)"
                 % (s.name, off, n, len(s.model)))
        self.maybe_corrupt_range(s, off, n)
        actual = pread_full(fd, n, off)
        self.check_bytes("read of %s off=%d len=%d" % (s.name, off, n),
                         s.model[off:off + n], actual, off)

    def op_read2(self, s):
        off, n = self.pick_read(s)
        if s.fd2 is None:
            s.fd2 = os.open(self.path(s), os.O_RDONLY)
            self.log("  (open second descriptor on %s O_RDONLY)" % s.name)
        self.log("read2 %s off=%d len=%d (size %d)"
                 % (s.name, off, n, len(s.model)))
        self.maybe_corrupt_range(s, off, n)
        actual = pread_full(s.fd2, n, off)
        self.check_bytes("read through the second descriptor of %s off=%d "
                         "len=%d" % (s.name, off, n),
                         s.model[off:off + n], actual, off)
        if self.rng.random() < 0.3:
            fd, s.fd2 = s.fd2, None
            os.close(fd)
            self.log("  (closed the second descriptor)")

    def op_readall(self, s):
        self.log("readall %s (size %d)" % (s.name, len(s.model)))
        self.verify_whole(s, "readall")

    def op_stat(self, s):
        self.log("stat %s (model size %d)" % (s.name, len(s.model)))
        self.maybe_corrupt_size(s)
        st = os.stat(self.path(s))
        if not statmod.S_ISREG(st.st_mode):
            raise Mismatch("stat %s: not a regular file (mode %o)"
                           % (s.name, st.st_mode))
        if st.st_size != len(s.model):
            raise Mismatch("stat %s: size %d, model %d"
                           % (s.name, st.st_size, len(s.model)))
        if s.fd is not None:
            st = os.fstat(s.fd)
            if st.st_size != len(s.model):
                raise Mismatch("fstat %s: size %d, model %d"
                               % (s.name, st.st_size, len(s.model)))

    def op_reopen(self, s):
        trunc = self.rng.random() < 0.25
        self.log("reopen %s%s (size %d)" % (s.name, " O_TRUNC" if trunc
                                             else "", len(s.model)))
        if s.fd is not None:
            fd, s.fd = s.fd, None
            os.close(fd)
        s.fd = os.open(self.path(s), os.O_RDWR | (os.O_TRUNC if trunc else 0))
        if trunc:
            del s.model[:]

    def op_close(self, s):
        self.log("close %s (all its descriptors)" % s.name)
        self.close_fds(s)

    def op_fsync(self, s):
        data_only = self.rng.random() < 0.3
        fd = self.ensure_fd(s)
        self.log("%s %s" % ("fdatasync" if data_only else "fsync", s.name))
        (os.fdatasync if data_only else os.fsync)(fd)

    def expect_gone(self, name):
        try:
            os.stat(os.path.join(self.dir, name))
        except FileNotFoundError:
            return
        raise Mismatch("%s still exists after it was renamed/unlinked" % name)

    def op_rename(self, s):
        old = s.name
        new = self.new_name(s)
        self.log("rename %s -> %s (size %d%s)" % (
            old, new, len(s.model), ", open" if s.fd is not None else ""))
        os.rename(self.path(s, old), self.path(s, new))
        s.name = new
        self.expect_gone(old)

    def replace_slot(self, v, how):
        """v's file is gone (unlinked or replaced): check its descriptors
        still read the old bytes, close them, recreate v empty."""
        for fd in (v.fd, v.fd2):
            if fd is not None:
                self.verify_fd(v, fd, "after %s of %s" % (how, v.name))
        self.close_fds(v)
        # after unlink, half the time the same name comes back
        if self.rng.random() < 0.5 or how == "rename over":
            v.name = self.new_name(v)
        v.model = bytearray()
        v.fd = os.open(self.path(v),
                       os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self.log("  (recreated %s empty)" % v.name)

    def op_rename_over(self, s):
        v = self.rng.choice([x for x in self.slots if x is not s])
        if v.fd is None and self.rng.random() < 0.5:
            self.ensure_fd(v)
        old = s.name
        self.log("rename %s -> %s over the existing file (sizes %d over %d)"
                 % (old, v.name, len(s.model), len(v.model)))
        os.rename(self.path(s), self.path(v))
        s.name = v.name
        self.expect_gone(old)
        self.replace_slot(v, "rename over")

    def op_unlink(self, s):
        if s.fd is None and self.rng.random() < 0.5:
            self.ensure_fd(s)
        self.log("unlink %s (size %d%s)" % (s.name, len(s.model),
                                            ", open" if s.fd is not None
                                            else ""))
        os.unlink(self.path(s))
        self.expect_gone(s.name)
        self.replace_slot(s, "unlink")

    def op_listdir(self, s):
        self.log("listdir")
        self.check_listing()

    def check_listing(self):
        got = set(os.listdir(self.dir)) - self.preexisting
        want = self.names()
        if got != want:
            raise Mismatch("directory listing differs: missing %s, extra %s"
                           % (sorted(want - got), sorted(got - want)))

    # ---- driver --------------------------------------------------------
    def setup(self):
        os.makedirs(self.dir, exist_ok=True)
        self.preexisting = set(os.listdir(self.dir))
        for s in self.slots:
            s.name = self.new_name(s)
            s.fd = os.open(self.path(s),
                           os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self.log("created %s" % ", ".join(s.name for s in self.slots))

    def finish(self):
        self.step = self.a.steps + 1
        self.log("final check: every file read whole, sizes, listing")
        for s in self.slots:
            self.verify_whole(s, "final")
            self.maybe_corrupt_size(s)
            st = os.stat(self.path(s))
            if st.st_size != len(s.model):
                raise Mismatch("final stat %s: size %d, model %d"
                               % (s.name, st.st_size, len(s.model)))
        self.check_listing()
        for s in self.slots:
            self.close_fds(s)
        if self.a.manifest:
            man = {s.name: {"size": len(s.model),
                            "sha256": hashlib.sha256(s.model).hexdigest()}
                   for s in sorted(self.slots, key=lambda x: x.name)}
            tmp = self.a.manifest + ".tmp"
            with open(tmp, "w") as f:
                json.dump(man, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.a.manifest)

    def run(self):
        self.setup()
        for self.step in range(1, self.a.steps + 1):
            op = self.rng.choices(self.op_names, self.op_weights)[0]
            s = self.rng.choice(self.slots)
            self.counts[op] += 1
            getattr(self, "op_" + op)(s)
            fe = self.a.fsync_every
            if fe and self.step % fe == 0:
                for x in self.slots:
                    if x.fd is not None:
                        self.log("fsync %s (--fsync-every)" % x.name)
                        os.fsync(x.fd)
                        self.counts["fsync"] += 1
        self.finish()

    def report(self, headline, detail=None):
        w = sys.stdout
        print("fsx: FAILED: %s" % headline, file=w)
        print("fsx: seed %d, step %d of %d, dir %s (replay: fsx.py %s --seed "
              "%d --steps %d --files %d --maxlen %d%s%s)"
              % (self.a.seed, self.step, self.a.steps, self.dir, self.dir,
                 self.a.seed, self.a.steps, self.a.files, self.a.maxlen,
                 " --no-rename" if self.a.no_rename else "",
                 " --fsync-every %d" % self.a.fsync_every
                 if self.a.fsync_every else ""), file=w)
        print("fsx: last %d operations (oldest first):" % len(self.history),
              file=w)
        for line in self.history:
            print("  " + line, file=w)
        if detail:
            print(detail, file=w)
        w.flush()

    def summary(self):
        ops = " ".join("%s=%d" % (o, self.counts[o])
                       for o in self.op_names + (["fsync"] if "fsync" not in
                                                 self.op_names else [])
                       if self.counts[o])
        return ("fsx: ok seed=%d steps=%d files=%d maxlen=%d bytes_written=%d"
                " ops: %s" % (self.a.seed, self.a.steps, self.a.files,
                              self.a.maxlen, self.bytes_written, ops))


def verify_manifest(manifest, d):
    try:
        with open(manifest) as f:
            man = json.load(f)
    except (OSError, ValueError) as e:
        print("fsx: cannot read manifest %s: %s" % (manifest, e),
              file=sys.stderr)
        return 2
    problems = []
    try:
        present = set(os.listdir(d))
    except OSError as e:
        print("fsx: cannot list %s: %s" % (d, e), file=sys.stderr)
        return 1
    for name in sorted(man):
        want = man[name]
        p = os.path.join(d, name)
        try:
            st = os.stat(p)
        except OSError as e:
            problems.append("%s: %s" % (name, e.strerror))
            continue
        if not statmod.S_ISREG(st.st_mode):
            problems.append("%s: not a regular file" % name)
            continue
        if st.st_size != want["size"]:
            problems.append("%s: stat size %d, manifest %d"
                            % (name, st.st_size, want["size"]))
        h = hashlib.sha256()
        n = 0
        try:
            with open(p, "rb") as f:
                while True:
                    b = f.read(MIB)
                    if not b:
                        break
                    h.update(b)
                    n += len(b)
        except OSError as e:
            problems.append("%s: read failed: %s" % (name, e))
            continue
        if n != want["size"]:
            problems.append("%s: read %d bytes, manifest %d"
                            % (name, n, want["size"]))
        elif h.hexdigest() != want["sha256"]:
            problems.append("%s: sha256 %s, manifest %s"
                            % (name, h.hexdigest(), want["sha256"]))
    for name in sorted(present - set(man)):
        problems.append("%s: present in %s but not in the manifest"
                        % (name, d))
    if problems:
        print("fsx: %s does not match %s:" % (d, manifest))
        for p in problems:
            print("  " + p)
        return 1
    print("fsx: %s matches %s (%d files)" % (d, manifest, len(man)))
    return 0


def main():
    ap = argparse.ArgumentParser(
        description="fsx-style randomized file checker",
        epilog="or: fsx.py --verify-manifest MANIFEST.json DIR")
    ap.add_argument("dir", metavar="DIR")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--maxlen", type=int, default=4 * MIB)
    ap.add_argument("--manifest", metavar="OUT.json")
    ap.add_argument("--no-rename", action="store_true")
    ap.add_argument("--fsync-every", type=int, default=0, metavar="N")
    ap.add_argument("--verify-manifest", metavar="MANIFEST.json")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print every operation")
    a = ap.parse_args()
    if a.verify_manifest:
        return verify_manifest(a.verify_manifest, a.dir)
    if a.seed is None or a.steps is None:
        ap.error("--seed and --steps are required")
    if a.steps < 0 or a.files < 1 or a.maxlen < 1 or a.fsync_every < 0:
        ap.error("--steps, --fsync-every >= 0; --files, --maxlen >= 1")
    fsx = Fsx(a)
    try:
        fsx.run()
    except Mismatch as m:
        detail = None
        if m.expected is not None:
            detail = hexdiff(m.expected, m.actual, m.base)
        fsx.report(str(m), detail)
        return 1
    except OSError as e:
        fsx.report("unexpected error: %s" % e,
                   "".join(traceback.format_exception(
                       type(e), e, e.__traceback__)).rstrip())
        return 1
    print(fsx.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
