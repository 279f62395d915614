#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""csi_conformance.py - plays the kubelet and the external-provisioner
against `fmfs-csi serve` over its real Unix socket (gRPC), on the test
gateway; run by tests/integration/55-csi-grpc.sh, which sets the
environment (TOP, TEST_DIR, FMFS, RGW_ENDPOINT, AWS keys, B and B2: two
empty buckets, POD_DIR: a directory other users may enter).

Every RPC of docs/csi.md "The gRPC plugin"; the kubelet's order with
each call repeated; the specification's codes for missing fields, an
unknown volume and wrong capabilities; CreateVolume and DeleteVolume on
the gateway (checked with the aws CLI); a restart of the plugin between
stage and publish; the fmfs daemon killed under a published volume
(NodeGetVolumeStats says abnormal, the next publish mounts again); two
volumes at once and concurrent calls on one; reads and writes through
the published path as a non-root UID with an fsGroup, and a stored 0600
mode not widened; the secret in no log.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

E = os.environ
TOP, TEST_DIR, B, B2 = E["TOP"], E["TEST_DIR"], E["B"], E["B2"]
POD = E["POD_DIR"]
sys.path.insert(0, os.path.join(TOP, "tools", "csi"))
import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
import csi_pb2 as pb  # noqa: E402

SOCK = os.path.join(TEST_DIR, "plugin", "csi.sock")
LOG = os.path.join(TEST_DIR, "plugin.log")
KEYS = {"access_key_id": E["AWS_ACCESS_KEY_ID"],
        "secret_access_key": E["AWS_SECRET_ACCESS_KEY"],
        "endpoint": E["RGW_ENDPOINT"]}
GROUP, USER = 4242, 31337
T0 = time.time()


def note(s):
    print("  - [%3d s] %s" % (time.time() - T0, s), flush=True)


def fail(s):
    print("FAIL: " + s, file=sys.stderr, flush=True)
    sys.exit(1)


def check(cond, what):
    if not cond:
        fail(what)


class Plugin:
    def __init__(self):
        self.p = None

    def start(self, **more):
        env = {k: v for k, v in E.items() if not k.startswith("AWS_")}
        env.update(more)
        env.update(FMFS_CSI_RUNDIR=os.path.join(TEST_DIR, "run"),
                   FMFS_CSI_CACHE_DIR=os.path.join(TEST_DIR, "caches"),
                   FMFS_CSI_NO_SYSTEMD="1", FMFS_CSI_UNSTAGE_TIMEOUT="60",
                   CSI_ENDPOINT="unix://" + SOCK)
        self.p = subprocess.Popen([os.path.join(TOP, "tools", "fmfs-csi"),
                                   "serve"], env=env,
                                  stdout=open(LOG, "a"),
                                  stderr=subprocess.STDOUT)
        for _ in range(100):
            if os.path.exists(SOCK):
                try:
                    code, _, r = rpc("Identity", "Probe")
                    if code == grpc.StatusCode.OK:
                        return
                except grpc.RpcError:
                    pass
            time.sleep(0.1)
        fail("the plugin did not answer Probe on %s: %s" %
             (SOCK, open(LOG).read()[-2000:]))

    def stop(self, sig=signal.SIGTERM):
        self.p.send_signal(sig)
        self.p.wait(timeout=20)


CHANNEL = [None]


def rpc(svc, method, **fields):
    """(status code, details, response) of one call."""
    if CHANNEL[0] is None:
        CHANNEL[0] = grpc.insecure_channel("unix://" + SOCK)
    req = json_format.ParseDict(fields, getattr(pb, method + "Request")())
    resp_cls = getattr(pb, method + "Response")
    f = CHANNEL[0].unary_unary("/csi.v1.%s/%s" % (svc, method),
                               request_serializer=req.SerializeToString,
                               response_deserializer=resp_cls.FromString)
    try:
        r = f(req, timeout=120)
        return grpc.StatusCode.OK, "", json_format.MessageToDict(
            r, preserving_proto_field_name=True)
    except grpc.RpcError as e:
        return e.code(), e.details() or "", None


def ok(svc, method, **fields):
    code, msg, r = rpc(svc, method, **fields)
    check(code == grpc.StatusCode.OK, "%s: %s %s" % (method, code, msg))
    return r


def refused(want, words, svc, method, **fields):
    code, msg, _ = rpc(svc, method, **fields)
    check(code == want and all(w in msg for w in words),
          "%s %s: got %s %r, want %s naming %s" %
          (method, json.dumps({k: v for k, v in fields.items()
                               if k != "secrets"}), code, msg, want, words))


def aws(*args, check_rc=True):
    p = subprocess.run(["aws", "--endpoint-url", E["RGW_ENDPOINT"]] +
                       list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if check_rc and p.returncode:
        fail("aws %s: %s" % (" ".join(args), p.stderr))
    return p


def as_user(cmd):
    """cmd (a shell line) as USER in GROUP and nothing else."""
    return subprocess.run(["setpriv", "--reuid=%d" % USER,
                           "--regid=%d" % USER, "--groups=%d" % GROUP,
                           "sh", "-c", cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def cap(mode="MULTI_NODE_MULTI_WRITER", group=None):
    m = {"mount_flags": []}
    if group is not None:
        m["volume_mount_group"] = str(group)
    return {"mount": m, "access_mode": {"mode": mode}}


OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
PRECOND = grpc.StatusCode.FAILED_PRECONDITION


def bad_serve():
    """fmfs-csi serve with a bad command line: exit 3 and a message."""
    env = {k: v for k, v in E.items() if k != "CSI_ENDPOINT"}
    for args, words in (([], "no endpoint"),
                        (["--endpoint", "tcp://127.0.0.1:9"],
                         "only unix:///PATH"),
                        (["--endpoint", "unix:relative.sock"],
                         "must be absolute"),
                        (["--bogus"], "unknown argument")):
        p = subprocess.run([os.path.join(TOP, "tools", "fmfs-csi"),
                            "serve"] + args, env=env, timeout=30,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        check(p.returncode == 3 and words in p.stderr,
              "serve %s: exit %d, %r" % (args, p.returncode, p.stderr))


def main():
    note("fmfs-csi serve: bad command lines")
    bad_serve()
    plugin = Plugin()
    plugin.start()

    note("Identity and the capabilities")
    r = ok("Identity", "GetPluginInfo")
    check(r.get("name") == "s3.fmfs.io" and r.get("vendor_version"),
          "GetPluginInfo: %s" % r)
    r = ok("Identity", "GetPluginCapabilities")
    check({"service": {"type": "CONTROLLER_SERVICE"}} in
          r.get("capabilities", []), "GetPluginCapabilities: %s" % r)
    check(ok("Identity", "Probe").get("ready") is True, "Probe not ready")
    r = ok("Node", "NodeGetCapabilities")
    types = {c["rpc"]["type"] for c in r["capabilities"]}
    check({"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "VOLUME_CONDITION",
           "VOLUME_MOUNT_GROUP"} <= types, "NodeGetCapabilities: %s" % r)
    check(ok("Node", "NodeGetInfo").get("node_id"), "NodeGetInfo: no id")
    r = ok("Controller", "ControllerGetCapabilities")
    check(r["capabilities"] == [{"rpc": {"type": "CREATE_DELETE_VOLUME"}}],
          "ControllerGetCapabilities: %s" % r)

    note("missing fields, wrong capabilities, unknown volumes")
    st = os.path.join(TEST_DIR, "staging", "dyn")
    t1, t2 = os.path.join(POD, "pod1", "vol"), os.path.join(POD, "pod2", "vol")
    refused(INVALID, ["volume_id"], "Node", "NodeStageVolume",
            staging_target_path=st, volume_capability=cap())
    refused(INVALID, ["staging_target_path"], "Node", "NodeStageVolume",
            volume_id="x", volume_capability=cap())
    refused(INVALID, ["volume_capability"], "Node", "NodeStageVolume",
            volume_id="x", staging_target_path=st)
    refused(INVALID, ["block"], "Node", "NodeStageVolume", volume_id="x",
            staging_target_path=st, volume_context={"url": "s3://" + B},
            volume_capability={"block": {}, "access_mode": {
                "mode": "SINGLE_NODE_WRITER"}})
    refused(INVALID, ["access_mode"], "Node", "NodeStageVolume",
            volume_id="x", staging_target_path=st,
            volume_context={"url": "s3://" + B},
            volume_capability={"mount": {}})
    refused(INVALID, ["url"], "Node", "NodeStageVolume", volume_id="x",
            staging_target_path=st, volume_capability=cap())
    refused(INVALID, ["volume_mount_group"], "Node", "NodeStageVolume",
            volume_id="x", staging_target_path=st,
            volume_context={"url": "s3://" + B},
            volume_capability=cap(group="staff"))
    refused(INVALID, ["target_path"], "Node", "NodePublishVolume",
            volume_id="x", staging_target_path=st, volume_capability=cap())
    refused(PRECOND, ["not staged"], "Node", "NodePublishVolume",
            volume_id="nothing", staging_target_path=st, target_path=t1,
            volume_capability=cap())
    refused(INVALID, ["volume_id"], "Node", "NodeUnpublishVolume",
            target_path=t1)
    refused(INVALID, ["staging_target_path"], "Node", "NodeUnstageVolume",
            volume_id="x")
    refused(INVALID, ["volume_path"], "Node", "NodeGetVolumeStats",
            volume_id="x")
    refused(NOT_FOUND, ["not staged"], "Node", "NodeGetVolumeStats",
            volume_id="nothing", volume_path=t1)
    refused(INVALID, ["name"], "Controller", "CreateVolume",
            volume_capabilities=[cap()], parameters={"url": "s3://" + B})
    refused(INVALID, ["volume_capabilities"], "Controller", "CreateVolume",
            name="pvc-x", parameters={"url": "s3://" + B})
    refused(INVALID, ["url"], "Controller", "CreateVolume", name="pvc-x",
            volume_capabilities=[cap()])
    refused(INVALID, ["on_delete"], "Controller", "CreateVolume",
            name="pvc-x", volume_capabilities=[cap()],
            parameters={"url": "s3://" + B, "on_delete": "shred"})
    refused(INVALID, ["volume_id"], "Controller", "DeleteVolume")
    refused(INVALID, ["volume_capabilities"], "Controller",
            "ValidateVolumeCapabilities", volume_id="x")
    check(not aws("s3", "ls", "s3://%s/" % B).stdout.strip(),
          "a refused call left objects in the bucket")

    note("CreateVolume: a prefix per PVC, idempotent by name")
    params = {"url": "s3://%s/dyn" % B, "on_delete": "delete",
              "endpoint": E["RGW_ENDPOINT"], "path_style": "true",
              "async_delay": "3600", "cache_size": "1G",
              "csi.storage.k8s.io/pvc/namespace": "training",
              "csi.storage.k8s.io/pvc/name": "ckpt"}
    gib = {"required_bytes": str(1 << 30)}
    r1 = ok("Controller", "CreateVolume", name="pvc-0001",
            volume_capabilities=[cap()], parameters=params, secrets=KEYS,
            capacity_range=gib)
    r2 = ok("Controller", "CreateVolume", name="pvc-0001",
            volume_capabilities=[cap()], parameters=params, secrets=KEYS,
            capacity_range=gib)
    vol = r1["volume"]
    check(vol.get("capacity_bytes") == str(1 << 30),
          "capacity_bytes %s" % vol.get("capacity_bytes"))
    refused(grpc.StatusCode.ALREADY_EXISTS, ["capacity_range"],
            "Controller", "CreateVolume", name="pvc-0001",
            volume_capabilities=[cap()], parameters=params, secrets=KEYS,
            capacity_range={"required_bytes": str(2 << 30)})
    refused(INVALID, ["capacity_range"], "Controller", "CreateVolume",
            name="pvc-x", volume_capabilities=[cap()], parameters=params,
            secrets=KEYS, capacity_range={"required_bytes": "10",
                                          "limit_bytes": "5"})
    long_name = "n" * 128
    lp = {k: v for k, v in params.items() if not k.startswith("csi.")}
    rl = ok("Controller", "CreateVolume", name=long_name,
            volume_capabilities=[cap()], parameters=lp, secrets=KEYS)
    check(len(rl["volume"]["volume_id"]) <= 128 and rl == ok(
        "Controller", "CreateVolume", name=long_name,
        volume_capabilities=[cap()], parameters=lp, secrets=KEYS),
        "a 128-byte name: %s" % rl)
    ok("Controller", "DeleteVolume", volume_id=rl["volume"]["volume_id"],
       secrets=KEYS)
    check(r1 == r2, "CreateVolume twice differs: %s %s" % (r1, r2))
    check(vol["volume_id"] == "fmfs1:D:s3://%s/dyn/training/ckpt" % B,
          "volume_id %s" % vol["volume_id"])
    ctx = vol["volume_context"]
    check(ctx.get("url") == "s3://%s/dyn/training/ckpt" % B and
          "on_delete" not in ctx and
          not any(k.startswith("csi.storage") for k in ctx),
          "volume_context %s" % ctx)
    aws("s3api", "head-object", "--bucket", B, "--key", "dyn/training/ckpt/")
    vid = vol["volume_id"]
    r = ok("Controller", "ValidateVolumeCapabilities", volume_id=vid,
           volume_capabilities=[cap()], secrets=KEYS)
    check(r.get("confirmed"), "ValidateVolumeCapabilities: %s" % r)
    r = ok("Controller", "ValidateVolumeCapabilities", volume_id=vid,
           volume_capabilities=[{"block": {}, "access_mode": {
               "mode": "SINGLE_NODE_WRITER"}}], secrets=KEYS)
    check(not r.get("confirmed") and "block" in r.get("message", ""),
          "block confirmed: %s" % r)
    refused(NOT_FOUND, ["not made by"], "Controller",
            "ValidateVolumeCapabilities", volume_id="fake-vol-id",
            volume_capabilities=[cap()], secrets=KEYS)
    refused(NOT_FOUND, ["no prefix"], "Controller",
            "ValidateVolumeCapabilities",
            volume_id="fmfs1:D:s3://%s/dyn/none" % B,
            volume_capabilities=[cap()], secrets=KEYS)
    # a dataset written by another tool: no fmfs metadata
    with open(os.path.join(TEST_DIR, "data.txt"), "w") as f:
        f.write("dataset bytes\n")
    aws("s3", "cp", "--quiet", os.path.join(TEST_DIR, "data.txt"),
        "s3://%s/dyn/training/ckpt/data.txt" % B)
    aws("s3", "cp", "--quiet", os.path.join(TEST_DIR, "data.txt"),
        "s3://%s/static/data.txt" % B2)

    note("stage twice, a plugin restart, publish twice, a read-only "
         "publish")
    stage = dict(volume_id=vid, staging_target_path=st,
                 volume_capability=cap(group=GROUP), volume_context=ctx,
                 secrets=KEYS)
    ok("Node", "NodeStageVolume", **stage)
    ok("Node", "NodeStageVolume", **stage)
    check(mounted(st), "%s not mounted after stage" % st)
    plugin.stop()
    CHANNEL[0] = None
    plugin.start()
    pub = dict(volume_id=vid, staging_target_path=st, target_path=t1,
               volume_capability=cap(group=GROUP))
    ok("Node", "NodePublishVolume", **pub)
    ok("Node", "NodePublishVolume", **pub)
    ok("Node", "NodePublishVolume", **dict(pub, target_path=t2,
                                           readonly=True))
    refused(grpc.StatusCode.ALREADY_EXISTS, ["published"], "Node",
            "NodePublishVolume", **dict(pub, readonly=True))

    note("as uid %d in group %d: read the dataset, write a checkpoint"
         % (USER, GROUP))
    p = as_user("cat %s/data.txt" % t1)
    check(p.returncode == 0 and p.stdout == "dataset bytes\n",
          "non-root read: %s %s" % (p.returncode, p.stderr))
    p = as_user("mkdir %s/step-1 && head -c 300000 /dev/urandom "
                ">%s/step-1/shard.bin && cat %s/step-1/shard.bin | wc -c"
                % (t1, t1, t1))
    check(p.returncode == 0 and p.stdout.strip() == "300000",
          "non-root write: %s %s" % (p.returncode, p.stderr))
    s = os.stat(os.path.join(t1, "data.txt"))
    check(s.st_gid == GROUP and s.st_mode & 0o777 == 0o664,
          "data.txt: gid %d mode %o" % (s.st_gid, s.st_mode & 0o777))
    p = as_user("echo x >%s/step-1/ro-try" % t2)
    check(p.returncode != 0 and "Read-only" in p.stderr,
          "write through the read-only publish: %s" % p.stderr)
    with open(os.path.join(t1, "private"), "w") as f:
        f.write("root only\n")
    os.chmod(os.path.join(t1, "private"), 0o600)
    p = as_user("cat %s/private" % t1)
    check(p.returncode != 0 and "Permission denied" in p.stderr,
          "a stored 0600 was widened: %s" % p.stdout)

    note("NodeGetVolumeStats; the daemon and its keeper killed under "
         "the publish")
    r = ok("Node", "NodeGetVolumeStats", volume_id=vid, volume_path=t1)
    check(r["volume_condition"].get("abnormal") is not True and
          any(u["unit"] == "BYTES" for u in r["usage"]), "stats %s" % r)
    refused(NOT_FOUND, ["not a mount"], "Node", "NodeGetVolumeStats",
            volume_id=vid, volume_path=TEST_DIR)
    pids = subprocess.run(["pgrep", "-f", "mount .* %s( |$)" % st],
                          stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.split()
    # The daemon and its keeper (docs/keeper.md): both killed, as when
    # the plugin's container goes down with them (54-csi kills the
    # daemon alone, which its keeper replaces).
    check(len(pids) == 2, "daemon and keeper of %s: %s" % (st, pids))
    # the keeper (the older) first: killed second, it could fork a new
    # daemon in between
    for pid in sorted(pids, key=int):
        os.kill(int(pid), signal.SIGKILL)
    time.sleep(0.5)
    r = ok("Node", "NodeGetVolumeStats", volume_id=vid, volume_path=t1)
    check(r["volume_condition"].get("abnormal") is True and
          "gone" in r["volume_condition"].get("message", ""),
          "a dead daemon not abnormal: %s" % r)
    ok("Node", "NodePublishVolume", **pub)
    p = as_user("wc -c <%s/step-1/shard.bin" % t1)
    check(p.returncode == 0 and p.stdout.strip() == "300000",
          "after the daemon's death: %s %s" % (p.stdout, p.stderr))
    r = ok("Node", "NodeGetVolumeStats", volume_id=vid, volume_path=t1)
    check(r["volume_condition"].get("abnormal") is not True,
          "abnormal after the new mount: %s" % r)

    note("a second volume at once, concurrent publishes of one volume")
    st2 = os.path.join(TEST_DIR, "staging", "static")
    stage2 = dict(volume_id="static-" + B2, staging_target_path=st2,
                  volume_capability=cap("MULTI_NODE_READER_ONLY"),
                  volume_context={"url": "s3://" + B2,
                                  "endpoint": E["RGW_ENDPOINT"],
                                  "path_style": "true"}, secrets=KEYS)
    res = []
    ths = [threading.Thread(target=lambda a: res.append(
        rpc("Node", "NodeStageVolume", **a)[:2]), args=(a,))
        for a in (stage2, stage2, stage)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    check(all(c == OK for c, _ in res), "concurrent stages: %s" % res)
    targets = [os.path.join(POD, "c%d" % i, "vol") for i in range(4)]
    res = []
    ths = [threading.Thread(target=lambda t: res.append(
        rpc("Node", "NodePublishVolume", **dict(pub, target_path=t))[:2]),
        args=(t,)) for t in targets]
    ths.append(threading.Thread(target=lambda: res.append(rpc(
        "Node", "NodePublishVolume", volume_id=stage2["volume_id"],
        staging_target_path=st2, target_path=os.path.join(POD, "s", "vol"),
        volume_capability=stage2["volume_capability"], readonly=True)[:2])))
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    check(all(c == OK for c, _ in res), "concurrent publishes: %s" % res)
    with open(os.path.join(POD, "s", "vol", "static", "data.txt")) as f:
        check(f.read() == "dataset bytes\n", "static volume read")
    refused(PRECOND, ["still published"], "Node", "NodeUnstageVolume",
            volume_id=vid, staging_target_path=st)

    note("unpublish twice, unstage twice (the drain), the bucket checked")
    for t in [t1, t2] + targets:
        ok("Node", "NodeUnpublishVolume", volume_id=vid, target_path=t)
        ok("Node", "NodeUnpublishVolume", volume_id=vid, target_path=t)
        check(not mounted(t), "%s still mounted" % t)
    ok("Node", "NodeUnpublishVolume", volume_id=stage2["volume_id"],
       target_path=os.path.join(POD, "s", "vol"))
    for _ in range(2):
        ok("Node", "NodeUnstageVolume", volume_id=vid,
           staging_target_path=st)
        ok("Node", "NodeUnstageVolume", volume_id=stage2["volume_id"],
           staging_target_path=st2)
    check(not mounted(st) and not mounted(st2), "staging still mounted")
    p = aws("s3api", "head-object", "--bucket", B, "--key",
            "dyn/training/ckpt/step-1/shard.bin")
    check(json.loads(p.stdout)["ContentLength"] == 300000,
          "the checkpoint in the bucket: %s" % p.stdout)
    caches = [c for c in os.listdir(os.path.join(TEST_DIR, "caches"))
              if not c.startswith(".")]
    check(len(caches) == 2, "cache dirs kept for a warm restage: %s" %
          caches)
    check(len(os.listdir(os.path.join(TEST_DIR, "caches", ".released")))
          == 2, "the clean unstages released no caches")

    note("DeleteVolume: delete, again, retain, not ours")
    ok("Controller", "DeleteVolume", volume_id=vid, secrets=KEYS)
    ok("Controller", "DeleteVolume", volume_id=vid, secrets=KEYS)
    left = aws("s3", "ls", "--recursive", "s3://%s/dyn/" % B,
               check_rc=False).stdout
    check(not left.strip(), "DeleteVolume left: %s" % left)
    keep = dict(params, on_delete="retain")
    keep["csi.storage.k8s.io/pvc/name"] = "kept"
    r = ok("Controller", "CreateVolume", name="pvc-0002",
           volume_capabilities=[cap()], parameters=keep, secrets=KEYS)
    check(r["volume"]["volume_id"].startswith("fmfs1:R:"), "retain id")
    ok("Controller", "DeleteVolume", volume_id=r["volume"]["volume_id"],
       secrets=KEYS)
    aws("s3api", "head-object", "--bucket", B, "--key",
        "dyn/training/kept/")
    # the claim made again: a new volume name adopts the retained prefix
    aws("s3", "cp", "--quiet", os.path.join(TEST_DIR, "data.txt"),
        "s3://%s/dyn/training/kept/old.txt" % B)
    r2 = ok("Controller", "CreateVolume", name="pvc-0003",
            volume_capabilities=[cap()], parameters=keep, secrets=KEYS)
    check(r2["volume"]["volume_id"] == r["volume"]["volume_id"],
          "the retained prefix not adopted: %s" % r2)
    aws("s3api", "head-object", "--bucket", B, "--key",
        "dyn/training/kept/old.txt")
    ok("Controller", "DeleteVolume", volume_id="static-" + B2,
       secrets=KEYS)
    aws("s3api", "head-object", "--bucket", B2, "--key", "static/data.txt")

    note("the cache rule: released caches go after "
         "FMFS_CSI_CACHE_KEEP_DAYS unused, a staged one stays")
    plugin.stop()
    CHANNEL[0] = None
    plugin.start(FMFS_CSI_CACHE_KEEP_DAYS="0")
    ok("Node", "NodeStageVolume", **stage2)
    left = [c for c in os.listdir(os.path.join(TEST_DIR, "caches"))
            if not c.startswith(".")]
    check(len(left) == 1, "after a stage with keep 0: %s" % left)
    ok("Node", "NodeUnstageVolume", volume_id=stage2["volume_id"],
       staging_target_path=st2)
    left = [c for c in os.listdir(os.path.join(TEST_DIR, "caches"))
            if not c.startswith(".")]
    check(not left, "after the unstage with keep 0: %s" % left)

    plugin.stop()
    log = open(LOG).read()
    check(E["AWS_SECRET_ACCESS_KEY"] not in log, "the secret is in the log")
    for d in ("run",):
        for root, _, files in os.walk(os.path.join(TEST_DIR, d)):
            for n in files:
                with open(os.path.join(root, n), errors="replace") as f:
                    check(E["AWS_SECRET_ACCESS_KEY"] not in f.read() or
                          n.endswith(".credentials"),
                          "the secret in %s" % n)
    note("done")


if __name__ == "__main__":
    main()
