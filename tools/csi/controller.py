# SPDX-License-Identifier: MIT
"""The CSI Controller service of fmfs-csi: dynamic volumes as prefixes of
a bucket (docs/csi.md "Dynamic volumes").

CreateVolume makes one prefix per volume under the StorageClass's url:
NAMESPACE/NAME/ of the PVC when the external-provisioner passes them
(--extra-create-metadata), else the volume's name.  The prefix is made
visible as a directory (a zero-byte marker object "PREFIX/"), the same
request gives the same prefix and the same volume_id (idempotent by
name), and the volume_context carries the url and the class's mount
options to every stage.  DeleteVolume removes everything under the
prefix when the class said on_delete=delete, and nothing when it said
retain (the default).  Both run `fmfs obj` with the credentials of the
request's secrets (a 0600 file, never argv) and the endpoint and region
from the secrets' keys endpoint and region, else the plugin's
environment (AWS_ENDPOINT_URL, AWS_REGION).

A volume_id is "fmfs1:D:URL" or "fmfs1:R:URL" (delete or retain), at
most 128 bytes as the specification wants of it (a long name's last
part is shortened with a hash of it).  The marker records the name and
the capacity_range asked for: the same name with another range is
ALREADY_EXISTS; a marker of another name (a retained prefix whose claim
was made again) is adopted with the objects under it.  DeleteVolume of an id
that is not of this form (a static volume, whose id is the PV's) deletes
nothing and answers OK.
"""
import hashlib
import os
import re
import subprocess

ID_PREFIX = "fmfs1:"
PARAM_OWN = ("url", "on_delete")
PVC_NS = "csi.storage.k8s.io/pvc/namespace"
PVC_NAME = "csi.storage.k8s.io/pvc/name"
SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def make_ops(ns):
    """The controller operations, on fmfs-csi's helpers in ns (a dict:
    Fail, need, fmfs_bin, fmfs_env, capability, mount_args, rundir and
    the gRPC codes)."""
    Fail = ns["Fail"]
    INVALID_ARGUMENT, NOT_FOUND = ns["INVALID_ARGUMENT"], ns["NOT_FOUND"]
    ALREADY_EXISTS = ns["ALREADY_EXISTS"]
    INTERNAL, UNAVAILABLE = ns["INTERNAL"], ns["UNAVAILABLE"]
    UNAUTHENTICATED = ns["UNAUTHENTICATED"]
    exit_codes = {2: INVALID_ARGUMENT, 3: UNAUTHENTICATED, 4: NOT_FOUND,
                  5: UNAVAILABLE}

    def obj(args, secrets):
        """fmfs obj ARGS with the secrets' credentials; (status, stderr
        or stdout, stdout)."""
        secrets = secrets or {}
        creds = None
        opts = []
        for k, opt in (("endpoint", "--endpoint"), ("region", "--region")):
            if secrets.get(k):
                opts += [opt, secrets[k]]
        if secrets.get("access_key_id") or secrets.get("secret_access_key"):
            # a file of this call's own: calls run at once (other
            # volumes, or the commands beside the server)
            creds = ns["cred_file"]("ctl-" + os.urandom(8).hex(), secrets)
        try:
            p = subprocess.run([ns["fmfs_bin"](), "obj"] + args[:1] + opts +
                               args[1:], env=ns["fmfs_env"](creds),
                               stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=600)
        finally:
            if creds:
                try:
                    os.unlink(creds)
                except OSError:
                    pass
        return (p.returncode, (p.stderr.strip() or p.stdout.strip())[:2000],
                p.stdout)

    def parse_id(vid):
        if not vid.startswith(ID_PREFIX) or vid[len(ID_PREFIX) + 1:][:1] \
                != ":" or vid[len(ID_PREFIX)] not in "DR":
            return None
        return vid[len(ID_PREFIX)] == "D", vid[len(ID_PREFIX) + 2:]

    def check_caps(caps, field="volume_capabilities"):
        if not caps:
            raise Fail(INVALID_ARGUMENT, "the request has no %s" % field)
        for c in caps:
            ns["capability"]({"volume_capability": c})

    def create_volume(req):
        ns["need"](req, "name")
        check_caps(req.get("volume_capabilities"))
        params = req.get("parameters") or {}
        url = params.get("url", "")
        if not (url.startswith("s3://") or url.startswith("file://")):
            raise Fail(INVALID_ARGUMENT, "the StorageClass's parameters "
                       "need url: s3://BUCKET[/PREFIX] (got %r)" % url)
        policy = params.get("on_delete", "retain")
        if policy not in ("retain", "delete"):
            raise Fail(INVALID_ARGUMENT, "parameter on_delete=%r: use "
                       "retain or delete" % policy)
        if req.get("volume_content_source"):
            raise Fail(INVALID_ARGUMENT, "volume_content_source: fmfs "
                       "volumes cannot be made from snapshots or clones")
        if params.get(PVC_NS) and params.get(PVC_NAME):
            parts = [params[PVC_NS], params[PVC_NAME]]
        else:
            parts = [req["name"]]
        for p in parts:
            if not SEGMENT.match(p):
                raise Fail(INVALID_ARGUMENT, "name %r cannot be a prefix of "
                           "the bucket (letters, digits, . _ -)" % p)
        tag = ID_PREFIX + ("D" if policy == "delete" else "R") + ":"
        vurl = url.rstrip("/") + "/" + "/".join(parts)
        over = len((tag + vurl).encode()) - 128
        if over > 0:
            # a long name: its last part shortened, the same way every
            # time (a hash of the whole), so that the id fits in CSI's
            # 128 bytes and stays idempotent
            last = parts[-1]
            h = hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]
            keep = len(last) - over - len(h) - 1
            parts[-1] = (last[:keep] + "-" + h) if keep > 0 else h
            vurl = url.rstrip("/") + "/" + "/".join(parts)
        vid = tag + vurl
        if len(vid.encode()) > 128:
            raise Fail(INVALID_ARGUMENT, "the volume id %r would be over "
                       "the 128 bytes CSI allows: use a shorter url" % vid)
        ctx = {k: v for k, v in params.items()
               if k not in PARAM_OWN and not k.startswith("csi.storage.k8s.io/")}
        ns["mount_args"](ctx, [], False)     # fmfs mount takes them?
        ctx["url"] = vurl
        cr = req.get("capacity_range") or {}
        try:
            want = (int(cr.get("required_bytes") or 0),
                    int(cr.get("limit_bytes") or 0))
        except ValueError:
            want = (-1, -1)
        if want[0] < 0 or want[1] < 0 or (want[1] and want[0] > want[1]):
            raise Fail(INVALID_ARGUMENT, "capacity_range %s: required_bytes "
                       "over limit_bytes" % cr)
        rc, err, out = obj(["stat", vurl + "/"], req.get("secrets"))
        meta = dict(l[len("meta: "):].split("=", 1) for l in out.split("\n")
                    if l.startswith("meta: ") and "=" in l)
        if rc == 0 and meta.get("csi-name") == req["name"] and \
                (meta.get("csi-required", "0"), meta.get("csi-limit", "0")) \
                != (str(want[0]), str(want[1])):
            raise Fail(ALREADY_EXISTS, "volume %s exists with another "
                       "capacity_range (required %s, limit %s)" %
                       (req["name"], meta.get("csi-required", "0"),
                        meta.get("csi-limit", "0")))
        if rc == 4 or (rc == 0 and meta.get("csi-name") != req["name"]):
            # new, or a retained prefix of a claim of the same namespace
            # and name made again: adopted, its objects kept
            rc, err, _ = obj(["mkdir", vurl, "-m", "csi-name=" + req["name"],
                              "-m", "csi-required=%d" % want[0],
                              "-m", "csi-limit=%d" % want[1]],
                             req.get("secrets"))
        if rc:
            raise Fail(exit_codes.get(rc, INTERNAL), "making prefix %s/ of "
                       "volume %s: %s" % (vurl, req["name"], err))
        return {"volume": {"volume_id": vid,
                           "capacity_bytes": str(want[0] or want[1]),
                           "volume_context": ctx}}

    def delete_volume(req):
        ns["need"](req, "volume_id")
        parsed = parse_id(req["volume_id"])
        if parsed is None:
            return {}                  # not ours to delete: nothing done
        delete, vurl = parsed
        if not delete:
            return {}                  # on_delete=retain: the data stays
        rc, err, _ = obj(["rm", vurl + "/", "-r"], req.get("secrets"))
        if rc and rc != 4:             # 4: nothing there any more
            raise Fail(exit_codes.get(rc, INTERNAL), "deleting %s/: %s" %
                       (vurl, err))
        return {}

    def validate_volume_capabilities(req):
        ns["need"](req, "volume_id")
        caps = req.get("volume_capabilities")
        if not caps:
            raise Fail(INVALID_ARGUMENT, "the request has no "
                       "volume_capabilities")
        parsed = parse_id(req["volume_id"])
        if parsed is None:
            raise Fail(NOT_FOUND, "volume %s was not made by this driver's "
                       "CreateVolume (a static volume is not validated)" %
                       req["volume_id"])
        rc, err, _ = obj(["stat", parsed[1] + "/"], req.get("secrets"))
        if rc == 4:
            raise Fail(NOT_FOUND, "volume %s: no prefix %s/ in the "
                       "bucket" % (req["volume_id"], parsed[1]))
        if rc:
            raise Fail(exit_codes.get(rc, INTERNAL), err)
        try:
            check_caps(caps)
        except Fail as e:
            return {"message": str(e)}     # not confirmed, and why
        out = {"volume_capabilities": caps}
        for k in ("volume_context", "parameters"):
            if req.get(k):
                out[k] = req[k]
        return {"confirmed": out}

    def controller_get_capabilities(req):
        return {"capabilities": [{"rpc": {"type": "CREATE_DELETE_VOLUME"}}]}

    return {"create-volume": create_volume, "delete-volume": delete_volume,
            "validate-volume-capabilities": validate_volume_capabilities,
            "controller-get-capabilities": controller_get_capabilities}
