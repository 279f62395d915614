# SPDX-License-Identifier: MIT
"""fmckpt: asynchronous, checksummed checkpoints for training jobs.

A thin layer over libfmckpt.so (ctypes; nothing is compiled at install).
save() returns once the tensors are copied into the library's staging
memory; writing, checksumming, committing and draining to a remote
store go on behind it, and wait() says when a step is durable.  load()
reads a step back, verifying every byte against the manifest's
checksums, into the same world size or, for tensors saved as slices of
a global tensor (Slice) or replicated, into any other.

    import fmckpt
    with fmckpt.Checkpointer("/nvme/ckpt", remote="s3://bkt/run1") as ck:
        ck.save(step, {"model": model.state_dict(),
                       "optim": opt.state_dict(), "step": step})
        ...
        state = ck.load()          # the newest good checkpoint
        model.load_state_dict(state["model"])

docs/python.md has the whole API, a training loop and what a
torch.distributed.checkpoint storage backend on it would need.
"""

import base64
import collections
import ctypes
import errno as _errno
import hashlib
import json
import os
import pickle

__all__ = ["Checkpointer", "Slice", "FmckptError", "StepInfo",
           "LATEST", "library_path"]

LATEST = "latest"
_STEP_LATEST = 2**64 - 1
_NDIM = 8
_TREE = "__fmckpt_tree__"
_TREE_VERSION = 1
_MSG = 2048

# ckpt.h's enum ckpt_dtype, in order.
_DTYPES = ["bytes", "f32", "f16", "bf16", "f64", "f8e4m3", "f8e5m2", "i8",
           "u8", "i16", "u16", "i32", "u32", "i64", "u64", "bool"]
_NUMPY = {"f32": "float32", "f16": "float16", "f64": "float64",
          "i8": "int8", "u8": "uint8", "i16": "int16", "u16": "uint16",
          "i32": "int32", "u32": "uint32", "i64": "int64", "u64": "uint64",
          "bool": "bool", "bytes": "uint8"}
_TORCH = {"float32": "f32", "float16": "f16", "bfloat16": "bf16",
          "float64": "f64", "int8": "i8", "uint8": "u8", "int16": "i16",
          "int32": "i32", "int64": "i64", "bool": "bool"}


class FmckptError(OSError):
    """A libfmckpt call failed: errno and the library's message (which
    names the file, tensor, rank or step involved and what to do)."""


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("dtype", ctypes.c_int),
                ("ndim", ctypes.c_uint), ("shape", ctypes.c_int64 * _NDIM),
                ("size_bytes", ctypes.c_uint64), ("rank", ctypes.c_uint32),
                ("crc32c", ctypes.c_uint32), ("offset", ctypes.c_uint64),
                ("flags", ctypes.c_uint32),
                ("global_shape", ctypes.c_int64 * _NDIM),
                ("global_offset", ctypes.c_int64 * _NDIM)]


class _GlobalInfo(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_uint),
                ("shape", ctypes.c_int64 * _NDIM),
                ("size_bytes", ctypes.c_uint64), ("copies", ctypes.c_uint32),
                ("flags", ctypes.c_uint32)]


class _StepInfo(ctypes.Structure):
    _fields_ = [("step", ctypes.c_uint64), ("local", ctypes.c_bool),
                ("remote", ctypes.c_bool), ("nodes", ctypes.c_bool),
                ("world_size", ctypes.c_uint32),
                ("ntensors", ctypes.c_uint32), ("bytes", ctypes.c_uint64),
                ("created_s", ctypes.c_int64), ("error", ctypes.c_int),
                ("why", ctypes.c_char * 512)]


_STAT_U64 = ["staging_bytes", "staging_used_bytes", "staging_peak_bytes",
             "chunk_bytes", "commits", "commit_last_ns", "commit_total_ns",
             "staging_waits", "staging_wait_ns", "pending_waits",
             "bytes_written", "bytes_uploaded", "steps_failed",
             "local_steps", "remote_steps", "steps_set_aside",
             "last_local_step", "last_remote_step"]


class _Stats(ctypes.Structure):
    _fields_ = ([(f, ctypes.c_uint64) for f in _STAT_U64] +
                [("steps_in_flight", ctypes.c_uint),
                 ("local_total_ns", ctypes.c_uint64),
                 ("remote_total_ns", ctypes.c_uint64),
                 ("load_node_bytes", ctypes.c_uint64),
                 ("load_remote_bytes", ctypes.c_uint64),
                 ("load_node_damaged", ctypes.c_uint64),
                 ("uring", ctypes.c_bool),
                 ("last_error", ctypes.c_char * 512)])


StepInfo = collections.namedtuple(
    "StepInfo", "step local remote nodes world_size tensors bytes "
    "created_s error why")


class Slice:
    """This rank's part of a global tensor (FSDP-style sharding): the
    local tensor (numpy array or torch tensor), the whole tensor's
    shape, and where the part starts in it.  Saved with its place, it
    loads into any world size; given to load() in `into`, that region
    is read."""

    def __init__(self, tensor, global_shape, offset):
        self.tensor = tensor
        self.global_shape = tuple(int(x) for x in global_shape)
        self.offset = tuple(int(x) for x in offset)
        if len(self.global_shape) != len(self.offset):
            raise ValueError("fmckpt.Slice: global_shape %r and offset %r "
                             "differ in length" % (self.global_shape,
                                                   self.offset))

    def __repr__(self):
        return "Slice(shape=%r, global_shape=%r, offset=%r)" % (
            tuple(self.tensor.shape), self.global_shape, self.offset)


_lib = None
_lib_path = None


def library_path():
    """Where libfmckpt.so was loaded from (loading it if not yet)."""
    _load_lib()
    return _lib_path


def _candidates():
    env = os.environ.get("FMCKPT_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "..", "..", "ckpt", "libfmckpt.so.0")]
    try:
        from . import _config
        out.append(os.path.join(_config.LIBDIR, "libfmckpt.so.0"))
    except ImportError:
        pass
    out.append("libfmckpt.so.0")
    return out


def _load_lib():
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _lib_path = os.path.realpath(path) if os.sep in path else path
        _setup(lib)
        _lib = lib
        return lib
    raise FmckptError(_errno.ENOENT, "fmckpt: libfmckpt.so.0 not found: "
                      "tried " + "; ".join(tried) + ". Install fmfs "
                      "(make install) or set FMCKPT_LIB to the library")


def _setup(lib):
    P, c = ctypes.c_void_p, ctypes
    sig = {
        "ckpt_open_opts": (c.c_int, [c.c_char_p, c.POINTER(P), c.c_char_p,
                                     c.c_size_t]),
        "ckpt_close": (c.c_int, [P, c.c_char_p, c.c_size_t]),
        "ckpt_begin": (c.c_int, [P, c.c_uint64, c.c_char_p, c.c_size_t]),
        "ckpt_add": (c.c_int, [P, c.c_char_p, c.c_int, c.c_uint,
                               c.POINTER(c.c_int64), P, c.c_uint64,
                               c.c_uint, c.c_char_p, c.c_size_t]),
        "ckpt_add_slice": (c.c_int, [P, c.c_char_p, c.c_int, c.c_uint,
                                     c.POINTER(c.c_int64),
                                     c.POINTER(c.c_int64),
                                     c.POINTER(c.c_int64), P, c.c_uint64,
                                     c.c_uint, c.c_char_p, c.c_size_t]),
        "ckpt_commit": (c.c_int, [P, c.c_char_p, c.c_size_t]),
        "ckpt_abort": (None, [P]),
        "ckpt_wait": (c.c_int, [P, c.c_uint64, c.c_int, c.c_uint,
                                c.c_char_p, c.c_size_t]),
        "ckpt_get_stats": (None, [P, c.POINTER(_Stats)]),
        "ckpt_list": (c.c_int, [P, c.POINTER(c.POINTER(_StepInfo)),
                                c.POINTER(c.c_size_t),
                                c.POINTER(c.c_size_t), c.c_char_p,
                                c.c_size_t]),
        "ckpt_prune": (c.c_int, [P, c.c_uint, c.POINTER(c.c_size_t),
                                 c.c_char_p, c.c_size_t]),
        "ckpt_reader_open": (c.c_int, [P, c.c_uint64, c.POINTER(P),
                                       c.c_char_p, c.c_size_t]),
        "ckpt_reader_close": (None, [P]),
        "ckpt_reader_step": (c.c_uint64, [P]),
        "ckpt_reader_world_size": (c.c_uint32, [P]),
        "ckpt_reader_where": (c.c_char_p, [P]),
        "ckpt_reader_find": (c.POINTER(_TensorInfo), [P, c.c_uint32,
                                                       c.c_char_p]),
        "ckpt_reader_read": (c.c_int, [P, c.POINTER(_TensorInfo), P,
                                       c.c_uint64, c.c_char_p, c.c_size_t]),
        "ckpt_reader_global": (c.c_int, [P, c.c_char_p,
                                         c.POINTER(_GlobalInfo), c.c_char_p,
                                         c.c_size_t]),
        "ckpt_reader_read_region": (c.c_int, [P, c.c_char_p,
                                              c.POINTER(c.c_int64),
                                              c.POINTER(c.c_int64), P,
                                              c.c_uint64, c.c_char_p,
                                              c.c_size_t]),
        "ckpt_reader_verify": (c.c_int, [P, c.c_char_p, c.c_size_t]),
        "ckpt_reader_sources": (c.c_char_p, [P]),
        "ckpt_struct_size": (c.c_size_t, [c.c_char_p]),
    }
    for name, (res, args) in sig.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise FmckptError(_errno.ENOSYS, "fmckpt: %s lacks %s: it is "
                              "older than this package; install the "
                              "libfmckpt of the same fmfs" % (
                                  _lib_path or "libfmckpt", name))
        f.restype, f.argtypes = res, args
    for sname, cls in (("ckpt_tensor_info", _TensorInfo),
                       ("ckpt_global_info", _GlobalInfo),
                       ("ckpt_step_info", _StepInfo),
                       ("ckpt_stats", _Stats)):
        got = lib.ckpt_struct_size(sname.encode())
        if got != ctypes.sizeof(cls):
            raise FmckptError(_errno.EPROTO, "fmckpt: struct %s is %d bytes "
                              "in the library and %d in this package: "
                              "install both from the same fmfs" % (
                                  sname, got, ctypes.sizeof(cls)))


def _check(rc, msg, what):
    if rc:
        text = msg.value.decode("utf-8", "replace") if msg is not None \
            else ""
        raise FmckptError(-rc, "fmckpt: %s: %s" % (
            what, text or os.strerror(-rc)))


def _shape(seq):
    arr = (ctypes.c_int64 * _NDIM)()
    for i, x in enumerate(seq):
        arr[i] = int(x)
    return arr


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def _np():
    import numpy
    return numpy


def _escape(key):
    return str(key).replace("%", "%25").replace("/", "%2F")


def _tensor_name(path):
    name = "/".join(_escape(k) for k in path) or "."
    if name == _TREE or len(name.encode()) > 255:
        name = "~" + hashlib.sha256(name.encode()).hexdigest()[:48]
    return name


class _Leaf:
    """A tensor of the tree being saved: its bytes, kept alive and
    contiguous until the commit returns."""

    def __init__(self, path, value, kind, dt, data, nbytes, shape,
                 slice_=None):
        self.name = _tensor_name(path)
        self.value, self.kind, self.dt = value, kind, dt
        self.data, self.nbytes, self.shape = data, nbytes, shape
        self.slice = slice_


def _host_bytes(x, path, stream):
    """(keep-alive object, pointer, nbytes, shape, kind, dtype name)."""
    if _is_torch(x):
        torch = _torch()
        t = x.detach()
        if t.is_cuda:
            # PyTorch's own CUDA runtime does the copy, on the caller's
            # stream: libfmckpt's (if built with CUDA) is never mixed in.
            s = stream if stream is not None else \
                torch.cuda.current_stream(t.device)
            with torch.cuda.stream(s):
                h = t.to("cpu", non_blocking=False)
            s.synchronize()
            t = h
        t = t.contiguous()
        dt = str(t.dtype).replace("torch.", "")
        if dt not in _TORCH:
            raise TypeError("fmckpt: tensor at %s has dtype %s, which "
                            "fmckpt does not store" % ("/".join(
                                map(str, path)), dt))
        return (t, t.data_ptr(), t.numel() * t.element_size(),
                tuple(t.shape), "torch", dt)
    np = _np()
    a = np.ascontiguousarray(x)
    rev = {v: k for k, v in _NUMPY.items() if k != "bytes"}
    if a.dtype.name not in rev:
        raise TypeError("fmckpt: array at %s has dtype %s, which fmckpt "
                        "does not store" % ("/".join(map(str, path)),
                                            a.dtype.name))
    return (a, a.ctypes.data, a.nbytes, tuple(a.shape), "numpy",
            a.dtype.name)


class Checkpointer:
    """One rank's checkpoint store: a local directory (its own NVMe),
    a remote store URL (s3://BUCKET/PREFIX or file:///DIR), or both.
    Options as in ckpt_config (ckpt/ckpt.h): rank and world_size default
    to $RANK and $WORLD_SIZE."""

    _OPTS = ("rank", "world_size", "run_id", "staging_bytes", "chunk_bytes",
             "keep_local", "keep_remote", "io_depth", "upload_parallel",
             "barrier_timeout_ms", "max_pending_steps", "read_only",
             "node_local", "commit_on_nodes",
             "endpoint", "region", "profile", "path_style")

    def __init__(self, dir=None, remote=None, **options):
        lib = _load_lib()
        lines = []
        if dir is not None:
            lines.append("dir=%s" % os.fspath(dir))
        if remote is not None:
            lines.append("remote=%s" % remote)
        for k, v in options.items():
            if k not in self._OPTS:
                raise TypeError("fmckpt.Checkpointer: unknown option %r "
                                "(known: %s)" % (k, ", ".join(self._OPTS)))
            if v is None:
                continue
            if isinstance(v, bool):
                v = int(v)
            if "\n" in str(v):
                raise ValueError("fmckpt.Checkpointer: option %s has a "
                                 "newline" % k)
            lines.append("%s=%s" % (k, v))
        msg = ctypes.create_string_buffer(_MSG)
        h = ctypes.c_void_p()
        rc = lib.ckpt_open_opts("\n".join(lines).encode(), ctypes.byref(h),
                                msg, _MSG)
        _check(rc, msg, "open")
        self._h = h
        self._lib = lib
        self.rank = int(options.get("rank") if options.get("rank") is not
                        None else os.environ.get("RANK", 0))
        self.world_size = int(options.get("world_size") if
                              options.get("world_size") is not None else
                              os.environ.get("WORLD_SIZE", 1))
        self.last_load = None

    # ---- lifetime ----

    def close(self):
        """Waits for every step in flight, then frees the handle."""
        if self._h:
            msg = ctypes.create_string_buffer(_MSG)
            rc = self._lib.ckpt_close(self._h, msg, _MSG)
            self._h = None
            _check(rc, msg, "close")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if getattr(self, "_h", None):
                self._lib.ckpt_close(self._h, None, 0)
        except Exception:
            pass

    # ---- saving ----

    def _flatten(self, x, path, leaves, replicated, stream, allow_pickle):
        """The JSON tree of x; its tensors appended to leaves."""
        np_mod = None
        try:
            np_mod = _np()
        except ImportError:
            pass
        if isinstance(x, Slice):
            keep, ptr, n, shape, kind, dt = _host_bytes(x.tensor, path,
                                                        stream)
            if len(shape) != len(x.global_shape):
                raise ValueError("fmckpt: Slice at %s: tensor has %d "
                                 "dimensions, global_shape %d" % (
                                     "/".join(map(str, path)), len(shape),
                                     len(x.global_shape)))
            leaf = _Leaf(path, keep, kind, dt, ptr, n, shape, x)
            leaves.append(leaf)
            return {"T": leaf.name, "k": kind, "dt": dt, "s": 1}
        if _is_torch(x) or (np_mod is not None and
                            isinstance(x, (np_mod.ndarray, np_mod.generic))):
            keep, ptr, n, shape, kind, dt = _host_bytes(x, path, stream)
            leaf = _Leaf(path, keep, kind, dt, ptr, n, shape)
            leaf.replicated = replicated
            leaves.append(leaf)
            node = {"T": leaf.name, "k": kind, "dt": dt}
            if np_mod is not None and isinstance(x, np_mod.generic):
                node["sc"] = 1
            return node
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, bytes):
            return {"B": base64.b64encode(x).decode()}
        if isinstance(x, (list, tuple)):
            items = [self._flatten(v, path + (i,), leaves, replicated,
                                   stream, allow_pickle)
                     for i, v in enumerate(x)]
            return items if isinstance(x, list) else {"U": items}
        if isinstance(x, dict):
            out = []
            for k, v in x.items():
                if not isinstance(k, (str, int, float, bool)) and \
                        k is not None:
                    raise TypeError("fmckpt: key %r at %s is a %s: keys "
                                    "must be str, int, float, bool or "
                                    "None" % (k, "/".join(map(str, path)),
                                              type(k).__name__))
                out.append([k, self._flatten(v, path + (k,), leaves,
                                             replicated, stream,
                                             allow_pickle)])
            kind = "O" if isinstance(x, collections.OrderedDict) else "D"
            return {kind: out}
        if allow_pickle:
            return {"P": base64.b64encode(pickle.dumps(x)).decode()}
        raise TypeError("fmckpt: value at %s is a %s, which fmckpt does "
                        "not store as such; pass allow_pickle=True to keep "
                        "it pickled (and to load it back)" % (
                            "/".join(map(str, path)) or "the top",
                            type(x).__name__))

    def save(self, step, state, *, replicated=False, cuda_stream=None,
             allow_pickle=False):
        """Checkpoints state (nested dicts, lists and tuples of tensors,
        numpy arrays, Slice, and plain values) as step.  Returns once the
        tensors are copied: the caller may change them then.  Writing and
        draining go on behind; wait(step) waits for them.  replicated:
        every rank saves the same plain tensors (data parallel), so they
        load once into any world size.  cuda_stream: the stream CUDA
        tensors are copied to the host on (default: the current one)."""
        lib, msg = self._lib, ctypes.create_string_buffer(_MSG)
        leaves = []
        tree = {"v": _TREE_VERSION,
                "root": self._flatten(state, (), leaves, replicated,
                                      cuda_stream, allow_pickle)}
        blob = json.dumps(tree, allow_nan=True).encode()
        blob_buf = ctypes.create_string_buffer(blob, len(blob))
        _check(lib.ckpt_begin(self._h, int(step), msg, _MSG), msg,
               "step %d" % step)
        try:
            seen = set()
            for leaf in leaves:
                if leaf.name in seen:
                    raise ValueError("fmckpt: two tensors under the name "
                                     "%r" % leaf.name)
                seen.add(leaf.name)
                dt = _DTYPES.index(_TORCH[leaf.dt] if leaf.kind == "torch"
                                   else {v: k for k, v in _NUMPY.items()
                                         if k != "bytes"}[leaf.dt])
                shape = _shape(leaf.shape)
                if leaf.slice is not None:
                    rc = lib.ckpt_add_slice(
                        self._h, leaf.name.encode(), dt, len(leaf.shape),
                        shape, _shape(leaf.slice.global_shape),
                        _shape(leaf.slice.offset), leaf.data, leaf.nbytes,
                        0, msg, _MSG)
                else:
                    rc = lib.ckpt_add(self._h, leaf.name.encode(), dt,
                                      len(leaf.shape), shape, leaf.data,
                                      leaf.nbytes,
                                      2 if leaf.replicated else 0, msg, _MSG)
                _check(rc, msg, "step %d, tensor %s" % (step, leaf.name))
            shape = _shape([len(blob)])
            _check(lib.ckpt_add(self._h, _TREE.encode(), 0, 1, shape,
                                ctypes.cast(blob_buf, ctypes.c_void_p),
                                len(blob), 0, msg, _MSG), msg,
                   "step %d" % step)
        except BaseException:
            lib.ckpt_abort(self._h)
            raise
        _check(lib.ckpt_commit(self._h, msg, _MSG), msg, "step %d" % step)

    def wait(self, step, level="durable", timeout=None):
        """Waits until step is committed at level: "local" (the
        directory), "remote" (the store), "durable" (the strongest
        configured) or "nodes" (commit_on_nodes: every rank's shard on
        its node's disk).  timeout in seconds (None: no limit)."""
        lv = {"local": 1, "remote": 2, "durable": 3,
              "nodes": 4}.get(level)
        if lv is None:
            raise ValueError("fmckpt: level %r: give local, remote, "
                             "durable or nodes" % (level,))
        msg = ctypes.create_string_buffer(_MSG)
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        _check(self._lib.ckpt_wait(self._h, int(step), lv, ms, msg, _MSG),
               msg, "wait for step %d" % step)

    # ---- reading ----

    def list(self):
        """The complete checkpoints, newest first, as StepInfo (error and
        why set on one that cannot be read)."""
        msg = ctypes.create_string_buffer(_MSG)
        arr = ctypes.POINTER(_StepInfo)()
        n, inc = ctypes.c_size_t(), ctypes.c_size_t()
        _check(self._lib.ckpt_list(self._h, ctypes.byref(arr),
                                   ctypes.byref(n), ctypes.byref(inc), msg,
                                   _MSG), msg, "list")
        out = [StepInfo(arr[i].step, arr[i].local, arr[i].remote,
                        arr[i].nodes, arr[i].world_size, arr[i].ntensors, arr[i].bytes,
                        arr[i].created_s, arr[i].error,
                        arr[i].why.decode("utf-8", "replace"))
               for i in range(n.value)]
        libc = ctypes.CDLL(None)
        libc.free(ctypes.cast(arr, ctypes.c_void_p))
        return out

    def _open(self, step):
        msg = ctypes.create_string_buffer(_MSG)
        r = ctypes.c_void_p()
        s = _STEP_LATEST if step in (None, LATEST) else int(step)
        _check(self._lib.ckpt_reader_open(self._h, s, ctypes.byref(r), msg,
                                          _MSG), msg, "open step %s" % step)
        return r

    def verify(self, step=LATEST):
        """Reads step whole and checks every checksum; raises
        FmckptError naming what is damaged."""
        r = self._open(step)
        try:
            msg = ctypes.create_string_buffer(_MSG)
            _check(self._lib.ckpt_reader_verify(r, msg, _MSG), msg,
                   "verify")
            return int(self._lib.ckpt_reader_step(r))
        finally:
            self._lib.ckpt_reader_close(r)

    def stats(self):
        """The handle's counters (ckpt_stats) as a dict."""
        st = _Stats()
        self._lib.ckpt_get_stats(self._h, ctypes.byref(st))
        out = {f: getattr(st, f) for f, _ in _Stats._fields_}
        out["last_error"] = st.last_error.decode("utf-8", "replace")
        return out

    def prune(self, keep):
        """Keeps the newest keep complete checkpoints; returns how many
        went."""
        msg = ctypes.create_string_buffer(_MSG)
        n = ctypes.c_size_t()
        _check(self._lib.ckpt_prune(self._h, int(keep), ctypes.byref(n),
                                    msg, _MSG), msg, "prune")
        return n.value

    def load(self, step=LATEST, into=None, *, allow_pickle=False):
        """The state saved as step (LATEST: the newest that loads whole;
        a damaged newer one is skipped: self.last_load then says which
        step loaded, what was skipped and why, and where each shard came
        from: this node's directory or the store).  Tensors come back as they went in
        (torch or numpy).  In the world size that saved it, each rank
        gets what it saved; in another, whole tensors (a Slice's
        assembled, a replicated one's single copy).  into: a state of
        the same structure whose tensors (or Slice regions) are filled
        in place and returned, so a rank loads only its part."""
        self.last_load = None
        if step not in (None, LATEST):
            out = self._load_step(int(step), into, allow_pickle)
            self.last_load = {"step": int(step), "skipped": [],
                              "sources": self._sources}
            return out
        skipped = []
        for info in self.list():
            if info.error:
                skipped.append("step %d: %s" % (info.step, info.why))
                continue
            try:
                out = self._load_step(info.step, into, allow_pickle)
                self.last_load = {"step": info.step, "skipped": skipped,
                                  "sources": self._sources}
                return out
            except FmckptError as e:
                if e.errno not in (_errno.EBADMSG, _errno.ENOENT,
                                   _errno.EPROTONOSUPPORT):
                    raise
                skipped.append("step %d: %s" % (info.step, e.strerror))
        raise FmckptError(_errno.ENOENT, "fmckpt: no loadable checkpoint" +
                          (": " + "; ".join(skipped) if skipped else
                           " (none complete)"))

    def _load_step(self, step, into, allow_pickle):
        r = self._open(step)
        try:
            same = self._lib.ckpt_reader_world_size(r) == self.world_size
            tree_rank = self.rank if same else 0
            blob = self._read_own(r, tree_rank, _TREE, None, step)
            if blob is None:
                raise FmckptError(_errno.ENOENT, "fmckpt: step %d has no "
                                  "%s of rank %d: it was not saved by this "
                                  "package (read it with fmckpt show and "
                                  "the ckpt_reader calls)" % (
                                      step, _TREE, tree_rank))
            tree = json.loads(bytes(blob).decode())
            if tree.get("v") != _TREE_VERSION:
                raise FmckptError(_errno.EPROTONOSUPPORT, "fmckpt: step %d "
                                  "was saved by a newer fmckpt package "
                                  "(tree version %r)" % (step,
                                                         tree.get("v")))
            out = self._build(r, step, tree["root"], into, same,
                              allow_pickle, ())
            self._sources = self._lib.ckpt_reader_sources(r).decode(
                "utf-8", "replace")
            return out
        finally:
            self._lib.ckpt_reader_close(r)

    def _read_own(self, r, rank, name, out, step):
        """rank's record of name into out (a new uint8 array when None)."""
        t = self._lib.ckpt_reader_find(r, rank, name.encode())
        if not t:
            return None
        if out is None:
            out = _np().empty(t.contents.size_bytes, dtype="uint8")
        msg = ctypes.create_string_buffer(_MSG)
        _check(self._lib.ckpt_reader_read(r, t, out.ctypes.data,
                                          out.nbytes, msg, _MSG), msg,
               "step %d" % step)
        return out

    def _build(self, r, step, node, into, same, allow_pickle, path):
        if isinstance(node, list):
            return [self._build(r, step, v, _sub(into, i), same,
                                allow_pickle, path + (i,))
                    for i, v in enumerate(node)]
        if not isinstance(node, dict):
            return node
        if "T" in node:
            return self._tensor(r, step, node, into, same, path)
        if "B" in node:
            return base64.b64decode(node["B"])
        if "U" in node:
            return tuple(self._build(r, step, v, _sub(into, i), same,
                                     allow_pickle, path + (i,))
                         for i, v in enumerate(node["U"]))
        if "D" in node or "O" in node:
            d = collections.OrderedDict() if "O" in node else {}
            for k, v in node.get("D", node.get("O")):
                d[k] = self._build(r, step, v, _sub(into, k), same,
                                   allow_pickle, path + (k,))
            if isinstance(into, dict):
                into.update(d)
                return into
            return d
        if "P" in node:
            if not allow_pickle:
                raise FmckptError(_errno.EPERM, "fmckpt: step %d holds a "
                                  "pickled value at %s; pass "
                                  "allow_pickle=True to load it (only "
                                  "from checkpoints you trust)" % (
                                      step, "/".join(map(str, path))))
            return pickle.loads(base64.b64decode(node["P"]))
        raise FmckptError(_errno.EBADMSG, "fmckpt: step %d: unknown node "
                          "in its tree at %s" % (step,
                                                 "/".join(map(str, path))))

    def _tensor(self, r, step, node, into, same, path):
        np = _np()
        lib, name = self._lib, node["T"]
        msg = ctypes.create_string_buffer(_MSG)
        target, region = into, None
        if isinstance(into, Slice):
            target = into.tensor
            region = (into.offset, tuple(into.tensor.shape))
        own = lib.ckpt_reader_find(r, self.rank, name.encode()) \
            if same else None
        if target is None:
            if own and region is None:
                shape = tuple(own.contents.shape[i]
                              for i in range(own.contents.ndim))
            else:
                g = _GlobalInfo()
                _check(lib.ckpt_reader_global(r, name.encode(),
                                              ctypes.byref(g), msg, _MSG),
                       msg, "step %d" % step)
                shape = tuple(g.shape[i] for i in range(g.ndim))
            host = _empty(node, shape)
        else:
            host = target
        cpu = host
        if _is_torch(host):
            cpu = host if not host.is_cuda else \
                host.detach().to("cpu")
            if not cpu.is_contiguous():
                cpu = cpu.contiguous()
            ptr, nbytes = cpu.data_ptr(), cpu.numel() * cpu.element_size()
        else:
            if not cpu.flags["C_CONTIGUOUS"]:
                raise ValueError("fmckpt: the array at %s to load into is "
                                 "not contiguous" % "/".join(map(str,
                                                                 path)))
            ptr, nbytes = cpu.ctypes.data, cpu.nbytes
        if region is not None:
            rc = lib.ckpt_reader_read_region(r, name.encode(),
                                             _shape(region[0]),
                                             _shape(region[1]), ptr, nbytes,
                                             msg, _MSG)
        elif own and (target is None or own.contents.size_bytes == nbytes):
            rc = lib.ckpt_reader_read(r, own, ptr, nbytes, msg, _MSG)
        else:
            rc = lib.ckpt_reader_read_region(r, name.encode(), None, None,
                                             ptr, nbytes, msg, _MSG)
        _check(rc, msg, "step %d, %s" % (step, "/".join(map(str, path))))
        if cpu is not host:
            host.copy_(cpu)
        if isinstance(into, Slice):
            return into
        if node.get("sc") and not _is_torch(host):
            return host.reshape(()).dtype.type(host.reshape(())[()])
        return host


def _sub(into, key):
    if into is None or isinstance(into, Slice):
        return None
    try:
        return into[key]
    except (KeyError, IndexError, TypeError):
        return None


def _empty(node, shape):
    if node["k"] == "torch":
        torch = _torch()
        if torch is None:
            raise FmckptError(_errno.ENOPKG, "fmckpt: the checkpoint holds "
                              "torch tensors; install torch to load them")
        return torch.empty(shape, dtype=getattr(torch, node["dt"]))
    return _np().empty(shape, dtype=node["dt"])
