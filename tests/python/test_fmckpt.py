# SPDX-License-Identifier: MIT
"""Tests of the Python package fmckpt (python/fmckpt) over the
libfmckpt.so of this tree, with Debian's python3-torch and
python3-numpy: a real nn.Module and its AdamW state saved and loaded,
equal to what torch.save and torch.load give and training on the same;
a save overlapping training steps; a damaged shard refused by name and
skipped for the older step; slices saved by 2 ranks and loaded by 3 and
by 1; a remote store (FMCKPT_TEST_REMOTE: the gateway's s3:// URL in
tests/integration/74-python-ckpt.sh); and bad input.

    FMCKPT_LIB=ckpt/libfmckpt.so.0 PYTHONPATH=python \
        /usr/bin/python3 tests/python/test_fmckpt.py
"""
import copy
import errno
import io
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np
import torch

import fmckpt


def same(a, b, path="state"):
    """a and b equal, types and all (tensors bit-exact)."""
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor), "%s: %r" % (path, type(a))
        assert a.dtype == b.dtype and a.shape == b.shape, \
            "%s: %s %s != %s %s" % (path, a.dtype, a.shape, b.dtype, b.shape)
        assert torch.equal(a.view(torch.uint8) if a.dim() else a,
                           b.view(torch.uint8) if b.dim() else b), path
        return
    if isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype and \
            a.shape == b.shape and a.tobytes() == b.tobytes(), path
        return
    assert type(a) is type(b), "%s: %s != %s" % (path, type(a), type(b))
    if isinstance(b, dict):
        assert list(a.keys()) == list(b.keys()), \
            "%s: keys %r != %r" % (path, list(a.keys()), list(b.keys()))
        for k in b:
            same(a[k], b[k], "%s/%r" % (path, k))
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s/%d" % (path, i))
    else:
        assert a == b, "%s: %r != %r" % (path, a, b)


def model_and_opt(seed=1):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 4))
    return m, torch.optim.AdamW(m.parameters(), lr=1e-2)


def train(m, opt, steps, seed=7):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


class T(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fmckpt-py.")
        self.dir = os.path.join(self.tmp, "ckpt")
        for k in ("RANK", "WORLD_SIZE", "FMCKPT_RUN_ID"):
            os.environ.pop(k, None)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def state(self, m, opt, step):
        return {"model": m.state_dict(), "optim": opt.state_dict(),
                "step": step, "name": "run-1", "blob": b"\x00\xff",
                "lr_hist": (1e-2, None, True), "np": np.arange(5.0)}

    def test_module_adamw(self):
        m, opt = model_and_opt()
        train(m, opt, 3)
        st = self.state(m, opt, 3)
        with fmckpt.Checkpointer(self.dir) as ck:
            ck.save(3, st)
            ck.wait(3)
            buf = io.BytesIO()
            torch.save(st, buf)
            buf.seek(0)
            ref = torch.load(buf)
            got = ck.load(3)
            same(got, ref)
            self.assertEqual(ck.last_load["step"], 3)
            self.assertEqual(ck.last_load["skipped"], [])
            self.assertIn("shards 0 from the directory",
                          ck.last_load["sources"])
            # a fresh model and optimizer from it train on the same
            m2, opt2 = model_and_opt(seed=99)
            m2.load_state_dict(got["model"])
            opt2.load_state_dict(got["optim"])
            train(m, opt, 2, seed=11)
            train(m2, opt2, 2, seed=11)
            same(m2.state_dict(), m.state_dict())
            same(opt2.state_dict()["state"], opt.state_dict()["state"])
            self.assertEqual(ck.verify(3), 3)
            info = ck.list()
            self.assertEqual([i.step for i in info], [3])
            self.assertTrue(info[0].local)
            self.assertGreater(ck.stats()["commits"], 0)

    def test_save_overlaps_training(self):
        m, opt = model_and_opt()
        with fmckpt.Checkpointer(self.dir, staging_bytes=1 << 20,
                                 chunk_bytes=64 << 10) as ck:
            for step in range(1, 6):
                train(m, opt, 1, seed=step)
                snap = copy.deepcopy(m.state_dict())
                ck.save(step, {"model": m.state_dict()})
                # training goes on while the step is written
                train(m, opt, 1, seed=100 + step)
                with torch.no_grad():
                    for p in m.parameters():
                        p.add_(1.0)
                ck.wait(step)
                same(ck.load(step)["model"], snap)
            st = ck.stats()
            self.assertEqual(st["commits"], 5)
            self.assertEqual(st["local_steps"], 5)
            self.assertGreater(st["commit_last_ns"], 0)

    def test_damaged_shard(self):
        m, opt = model_and_opt()
        with fmckpt.Checkpointer(self.dir) as ck:
            ck.save(1, {"model": m.state_dict()})
            train(m, opt, 1)
            ck.save(2, {"model": m.state_dict()})
            ck.wait(2)
        shard = os.path.join(self.dir, "step-0000000002", "shard-00000.bin")
        with open(shard, "r+b") as f:  # a byte of the first tensor
            f.seek(4096 + 5)
            b = f.read(1)
            f.seek(4096 + 5)
            f.write(bytes([b[0] ^ 0x10]))
        with fmckpt.Checkpointer(self.dir, read_only=True) as ck:
            with self.assertRaises(fmckpt.FmckptError) as cm:
                ck.load(2)
            self.assertEqual(cm.exception.errno, errno.EBADMSG)
            self.assertIn("model/0.weight", str(cm.exception))
            self.assertIn("checksum mismatch", str(cm.exception))
            got = ck.load()
            self.assertEqual(ck.last_load["step"], 1)
            self.assertIn("step 2", ck.last_load["skipped"][0])
            self.assertEqual(set(got["model"]), set(m.state_dict()))
            with self.assertRaises(fmckpt.FmckptError) as cm:
                ck.verify(2)
            self.assertIn("shard-00000.bin", str(cm.exception))

    def test_slices_reshard(self):
        gshape = (10, 6)
        full = np.arange(60, dtype=np.float32).reshape(gshape)
        tw = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)
        cks = [fmckpt.Checkpointer(self.dir, rank=r, world_size=2)
               for r in range(2)]
        for r, ck in enumerate(cks):  # rows split in two
            lo, hi = 5 * r, 5 * r + 5
            ck.save(7, {"w": fmckpt.Slice(full[lo:hi], gshape, (lo, 0)),
                        "t": fmckpt.Slice(tw[:, 3 * r:3 * r + 3],
                                          (4, 6), (0, 3 * r)),
                        "bias": torch.ones(3)}, replicated=True)
        cks[0].wait(7)
        for ck in cks:
            ck.close()
        for r in range(3):  # three ranks, split by columns
            with fmckpt.Checkpointer(self.dir, rank=r, world_size=3,
                                     read_only=True) as ck:
                part = np.zeros((10, 2), dtype=np.float32)
                tp = torch.zeros(4, 2, dtype=torch.bfloat16)
                got = ck.load(7, into={
                    "w": fmckpt.Slice(part, gshape, (0, 2 * r)),
                    "t": fmckpt.Slice(tp, (4, 6), (0, 2 * r))})
                self.assertIs(got["w"].tensor, part)
                same(part, np.ascontiguousarray(full[:, 2 * r:2 * r + 2]))
                same(tp, tw[:, 2 * r:2 * r + 2].contiguous())
                same(got["bias"], torch.ones(3))
        with fmckpt.Checkpointer(self.dir, rank=0, world_size=1,
                                 read_only=True) as ck:
            got = ck.load(7)
            same(got["w"], full)
            same(got["t"], tw)

    def test_remote(self):
        url = os.environ.get("FMCKPT_TEST_REMOTE")
        if not url:
            self.skipTest("FMCKPT_TEST_REMOTE not set (the gateway test "
                          "sets it)")
        m, opt = model_and_opt()
        train(m, opt, 2)
        st = self.state(m, opt, 2)
        with fmckpt.Checkpointer(self.dir, remote=url) as ck:
            ck.save(2, st)
            ck.wait(2, "remote", timeout=60)
        with fmckpt.Checkpointer(remote=url, read_only=True) as ck:
            buf = io.BytesIO()
            torch.save(st, buf)
            buf.seek(0)
            same(ck.load(), torch.load(buf))
            self.assertTrue(ck.list()[0].remote)
        # this node's own directory, the store where ranks meet
        node = os.path.join(self.tmp, "node")
        with fmckpt.Checkpointer(node, remote=url + "-node",
                                 node_local=True) as ck:
            ck.save(4, {"model": m.state_dict()})
            ck.wait(4)
            same(ck.load(4)["model"], m.state_dict())
            self.assertIn("from this node's directory",
                          ck.last_load["sources"])
            shutil.rmtree(os.path.join(node, "step-0000000004"))
            same(ck.load(4)["model"], m.state_dict())
            self.assertIn("from the store", ck.last_load["sources"])
            self.assertGreater(ck.stats()["load_remote_bytes"], 0)

    def test_bad_input(self):
        with self.assertRaises(TypeError) as cm:
            fmckpt.Checkpointer(self.dir, colour="red")
        self.assertIn("unknown option 'colour'", str(cm.exception))
        with self.assertRaises(fmckpt.FmckptError) as cm:
            fmckpt.Checkpointer(self.dir, rank=-5)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("option rank: '-5'", str(cm.exception))
        with self.assertRaises(fmckpt.FmckptError) as cm:
            fmckpt.Checkpointer()
        self.assertIn("no checkpoint location", str(cm.exception))
        with fmckpt.Checkpointer(self.dir) as ck:
            with self.assertRaises(TypeError) as cm:
                ck.save(1, {"a": {"b": object()}})
            self.assertIn("a/b", str(cm.exception))
            self.assertIn("allow_pickle", str(cm.exception))
            with self.assertRaises(ValueError):
                ck.wait(1, "somewhere")
            ck.save(1, {"a": {"b": complex(1, 2)}}, allow_pickle=True)
            ck.wait(1)
            with self.assertRaises(fmckpt.FmckptError) as cm:
                ck.load(1)
            self.assertEqual(cm.exception.errno, errno.EPERM)
            self.assertEqual(ck.load(1, allow_pickle=True),
                             {"a": {"b": complex(1, 2)}})
            with self.assertRaises(fmckpt.FmckptError) as cm:
                ck.load(5)
            self.assertEqual(cm.exception.errno, errno.ENOENT)
            self.assertIn("step 5", str(cm.exception))
        # a rank's own tensor asked of another world size
        cks = [fmckpt.Checkpointer(self.dir, rank=r, world_size=2)
               for r in range(2)]
        for r, ck in enumerate(cks):
            ck.save(9, {"rng": torch.tensor([r, r + 1])})
        for ck in cks:
            ck.close()
        with fmckpt.Checkpointer(self.dir, world_size=1,
                                 read_only=True) as ck:
            with self.assertRaises(fmckpt.FmckptError) as cm:
                ck.load(9)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            self.assertIn("cannot be resharded", str(cm.exception))
            self.assertIn("'rng'", str(cm.exception))


if __name__ == "__main__":
    print("libfmckpt:", fmckpt.library_path(), file=sys.stderr)
    unittest.main(verbosity=2)
