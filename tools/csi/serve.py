# SPDX-License-Identifier: MIT
"""fmfs-csi serve: the CSI services (Identity, Node, Controller) over gRPC
on a Unix socket, as the kubelet and the external-provisioner call them
(docs/csi.md "The gRPC plugin").

Each RPC turns its request message into a dict with the specification's
field names (google.protobuf.json_format), calls the operation of
fmfs-csi that the commands call too, and turns the dict it returns into
the response message; a Fail becomes the gRPC status of its code with its
message.  Calls on one volume run one at a time (a lock per volume_id, or
per name for CreateVolume); calls on different volumes run at once.

The messages come from csi_pb2, which protoc makes from csi.proto (ours,
written from the specification's text) at build time, next to this file.
"""
import concurrent.futures
import os
import signal
import sys
import threading


def _load():
    here = os.path.dirname(os.path.realpath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        import grpc  # noqa: F401
        from google.protobuf import json_format  # noqa: F401
    except ImportError as e:
        raise SystemExit("fmfs-csi serve: %s: install python3-grpcio and "
                         "python3-protobuf" % e)
    try:
        import csi_pb2  # noqa: F401
    except ImportError as e:
        raise SystemExit("fmfs-csi serve: %s: csi_pb2.py is made by `make` "
                         "from tools/csi/csi.proto (needs protoc: "
                         "protobuf-compiler)" % e)
    import grpc
    from google.protobuf import json_format
    import csi_pb2
    return grpc, json_format, csi_pb2


class _Locks:
    """One lock per key, made on first use."""

    def __init__(self):
        self.mu = threading.Lock()
        self.locks = {}

    def get(self, key):
        with self.mu:
            return self.locks.setdefault(key, threading.Lock())


def endpoint_path(endpoint):
    """The socket path of unix:///PATH (or unix:PATH, or a bare path)."""
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://"):]
    elif endpoint.startswith("unix:"):
        path = endpoint[len("unix:"):]
    elif "://" in endpoint:
        raise ValueError("endpoint %r: only unix:///PATH is served"
                         % endpoint)
    else:
        path = endpoint
    if not path.startswith("/"):
        raise ValueError("endpoint %r: the socket path must be absolute "
                         "(unix:///PATH)" % endpoint)
    return path


# service -> [(method, request type, response type, operation name)]
RPCS = {
    "csi.v1.Identity": [
        ("GetPluginInfo", "GetPluginInfo", "get-plugin-info"),
        ("GetPluginCapabilities", "GetPluginCapabilities",
         "get-plugin-capabilities"),
        ("Probe", "Probe", "probe"),
    ],
    "csi.v1.Node": [
        ("NodeStageVolume", "NodeStageVolume", "node-stage"),
        ("NodeUnstageVolume", "NodeUnstageVolume", "node-unstage"),
        ("NodePublishVolume", "NodePublishVolume", "node-publish"),
        ("NodeUnpublishVolume", "NodeUnpublishVolume", "node-unpublish"),
        ("NodeGetVolumeStats", "NodeGetVolumeStats",
         "node-get-volume-stats"),
        ("NodeGetCapabilities", "NodeGetCapabilities",
         "node-get-capabilities"),
        ("NodeGetInfo", "NodeGetInfo", "node-get-info"),
    ],
    "csi.v1.Controller": [
        ("CreateVolume", "CreateVolume", "create-volume"),
        ("DeleteVolume", "DeleteVolume", "delete-volume"),
        ("ValidateVolumeCapabilities", "ValidateVolumeCapabilities",
         "validate-volume-capabilities"),
        ("ControllerGetCapabilities", "ControllerGetCapabilities",
         "controller-get-capabilities"),
    ],
}


def serve(endpoint, ops, fail_cls, log=None, workers=8):
    """Serves ops (operation name -> function of a request dict) on
    endpoint until SIGTERM or SIGINT; returns the exit status."""
    grpc, json_format, pb = _load()
    codes = {c.value[0]: c for c in grpc.StatusCode}
    locks = _Locks()
    log = log or (lambda s: print("fmfs-csi: " + s, file=sys.stderr,
                                  flush=True))

    def handler(method, rtype, op):
        req_cls = getattr(pb, rtype + "Request")
        resp_cls = getattr(pb, rtype + "Response")
        fn = ops[op]

        def call(request, context):
            d = json_format.MessageToDict(request,
                                          preserving_proto_field_name=True)
            key = d.get("volume_id") or d.get("name")
            lock = locks.get(key) if key else None
            try:
                if lock:
                    with lock:
                        out = fn(d)
                else:
                    out = fn(d)
                return json_format.ParseDict(out or {}, resp_cls())
            except fail_cls as e:
                # never the request itself: it may carry secrets
                log("%s: %s: %s" % (method, codes[e.code].name, e))
                context.abort(codes[e.code], str(e))
            except (OSError, ValueError, json_format.ParseError) as e:
                log("%s: INTERNAL: %s" % (method, e))
                context.abort(grpc.StatusCode.INTERNAL, "%s: %s" %
                              (method, e))

        return grpc.unary_unary_rpc_method_handler(
            call, request_deserializer=req_cls.FromString,
            response_serializer=resp_cls.SerializeToString)

    path = endpoint_path(endpoint)
    os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)            # a socket left by a plugin that died
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(
        max_workers=workers))
    server.add_generic_rpc_handlers(tuple(
        grpc.method_handlers_generic_handler(
            svc, {m: handler(m, t, op) for m, t, op in rpcs})
        for svc, rpcs in RPCS.items()))
    if not server.add_insecure_port("unix://" + path):
        raise SystemExit("fmfs-csi serve: cannot listen on %s" % path)
    os.chmod(path, 0o660)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *a: stop.set())
    server.start()
    log("serving CSI on unix://%s" % path)
    stop.wait()
    server.stop(grace=5).wait()
    try:
        os.unlink(path)
    except OSError:
        pass
    return 0
