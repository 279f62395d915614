#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""csi_manifests.py DIR FMFS_CSI FMFS - checks the CSI deployment in DIR
(docs/kubernetes/csi: kustomization.yaml, its resources, examples/) for
what a cluster would trip on; prints each problem and exits 1 if any.

- every file parses, every kustomization resource exists, namespaced
  objects are in the kustomization's namespace;
- every image a container names is a parameter (kustomization images)
  and every parameter is used;
- one driver name: the CSIDriver, the StorageClass's provisioner, the
  examples' PVs and the plugin's GetPluginInfo (fmfs-csi's DRIVER);
- the node plugin: its socket where the registrar looks (CSI_ENDPOINT and
  --csi-address), the registration path the kubelet dials under the
  plugin dir's host path, the registry dir, /var/lib/kubelet with
  Bidirectional propagation, privileged, the host's PIDs and systemd
  (so the fmfs daemons outlive the plugin's container);
- the controller: the provisioner on the plugin's socket, with
  --extra-create-metadata (prefixes are NAMESPACE/NAME);
- every volumeMount has its volume; every serviceAccountName, binding
  subject and roleRef exists;
- the StorageClass's and the PVs' options are fmfs mount options (fmfs
  mount --help), url is s3:// or file://, on_delete retain or delete,
  each secret name has its namespace;
- each example claim's class exists or it names its PV.
"""
import os
import re
import subprocess
import sys

import yaml

PROBLEMS = []


def bad(s):
    PROBLEMS.append(s)


def load(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d]
    except (OSError, yaml.YAMLError) as e:
        bad("%s: %s" % (path, e))
        return []


def containers(obj):
    spec = (obj.get("spec") or {}).get("template", {}).get("spec", {})
    return spec, spec.get("containers", []) + spec.get("initContainers", [])


def env_of(c, name):
    for e in c.get("env", []):
        if e.get("name") == name:
            return e.get("value")
    return None


def arg_of(c, name):
    for a in c.get("args", []):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def mount_path(spec, c, volume):
    for m in c.get("volumeMounts", []):
        if m["name"] == volume:
            return m["mountPath"]
    return None


def host_path(spec, volume):
    for v in spec.get("volumes", []):
        if v["name"] == volume and "hostPath" in v:
            return v["hostPath"]["path"]
    return None


def volume_of(c, path):
    """The volume mounted at the directory holding path in container c."""
    d = os.path.dirname(path)
    for m in c.get("volumeMounts", []):
        if m["mountPath"].rstrip("/") == d:
            return m["name"]
    return None


def main(d, csi, fmfs):
    kz = load(os.path.join(d, "kustomization.yaml"))
    if not kz:
        bad("no kustomization.yaml")
        return
    kz = kz[0]
    ns = kz.get("namespace")
    objs = []
    for r in kz.get("resources", []):
        p = os.path.join(d, r)
        if not os.path.exists(p):
            bad("kustomization resource %s is missing" % r)
            continue
        objs += [(r, o) for o in load(p)]
    ex = os.path.join(d, "examples")
    examples = []
    for n in sorted(os.listdir(ex)) if os.path.isdir(ex) else []:
        examples += [(n, o) for o in load(os.path.join(ex, n))]
    kinds = {}
    for f, o in objs + examples:
        kinds.setdefault(o.get("kind"), []).append((f, o))
    cluster_kinds = ("Namespace", "CSIDriver", "ClusterRole",
                     "ClusterRoleBinding", "StorageClass",
                     "PersistentVolume")
    for f, o in objs:
        m = o.get("metadata", {})
        if o.get("kind") not in cluster_kinds and m.get("namespace", ns) \
                != ns:
            bad("%s: %s %s is in namespace %s, not %s" %
                (f, o["kind"], m.get("name"), m.get("namespace"), ns))

    # images: parameters, all used
    params = {i["name"] for i in kz.get("images", [])}
    used = set()
    for f, o in objs:
        spec, cs = containers(o)
        for c in cs:
            used.add(c.get("image"))
            if c.get("image") not in params:
                bad("%s: container %s's image %r is not a parameter "
                    "(kustomization images)" % (f, c["name"], c.get("image")))
            names = {v["name"] for v in spec.get("volumes", [])}
            for m in c.get("volumeMounts", []):
                if m["name"] not in names:
                    bad("%s: %s mounts volume %s, which is not declared" %
                        (f, c["name"], m["name"]))
    for p in params - used:
        bad("image parameter %s is used by no container" % p)

    # one driver name
    with open(csi) as f:
        m = re.search(r'^DRIVER = "([^"]+)"', f.read(), re.M)
    driver = m.group(1) if m else None
    if not driver:
        bad("%s has no DRIVER" % csi)
    for f, o in kinds.get("CSIDriver", []):
        if o["metadata"]["name"] != driver:
            bad("%s: CSIDriver %s, the plugin says %s" %
                (f, o["metadata"]["name"], driver))
    if not kinds.get("CSIDriver"):
        bad("no CSIDriver")
    for f, o in kinds.get("StorageClass", []):
        if o.get("provisioner") != driver:
            bad("%s: provisioner %s, the plugin says %s" %
                (f, o.get("provisioner"), driver))
    for f, o in kinds.get("PersistentVolume", []):
        if o["spec"].get("csi", {}).get("driver") != driver:
            bad("%s: PV %s's driver is not %s" %
                (f, o["metadata"]["name"], driver))

    # the node plugin and its registrar
    sas = {o["metadata"]["name"] for _, o in kinds.get("ServiceAccount", [])}
    for f, o in kinds.get("DaemonSet", []) + kinds.get("Deployment", []):
        spec, cs = containers(o)
        if spec.get("serviceAccountName") not in sas:
            bad("%s: serviceAccountName %s does not exist" %
                (f, spec.get("serviceAccountName")))
        plug = [c for c in cs if c.get("image") == "fmfs-csi"]
        if len(plug) != 1:
            bad("%s: %d fmfs-csi containers" % (f, len(plug)))
            continue
        plug = plug[0]
        ep = env_of(plug, "CSI_ENDPOINT") or ""
        if not ep.startswith("unix:///"):
            bad("%s: CSI_ENDPOINT %r is not unix:///PATH" % (f, ep))
            continue
        sock = ep[len("unix://"):]
        sock_vol = volume_of(plug, sock)
        side = [c for c in cs if c is not plug]
        for c in side:
            addr = arg_of(c, "--csi-address")
            if addr is None:
                bad("%s: %s has no --csi-address" % (f, c["name"]))
            elif volume_of(c, addr) != sock_vol or \
                    os.path.basename(addr) != os.path.basename(sock):
                bad("%s: %s dials %s, the plugin listens on %s (volume %s)"
                    % (f, c["name"], addr, sock, sock_vol))
        if o["kind"] == "DaemonSet":
            if not plug.get("securityContext", {}).get("privileged"):
                bad("%s: the node plugin is not privileged" % f)
            # the daemons in host scopes: host PIDs, the host's systemd
            if env_of(plug, "FMFS_CSI_NO_SYSTEMD") == "1" or \
                    not spec.get("hostPID") or \
                    "/run/systemd" not in [host_path(spec, m["name"]) for m
                                           in plug.get("volumeMounts", [])
                                           if m["mountPath"] ==
                                           "/run/systemd"]:
                bad("%s: the fmfs daemons would die with the plugin's "
                    "container (hostPID, the host's /run/systemd at "
                    "/run/systemd, no FMFS_CSI_NO_SYSTEMD)" % f)
            kub = [m for m in plug.get("volumeMounts", [])
                   if m["mountPath"] == "/var/lib/kubelet"]
            if not kub or kub[0].get("mountPropagation") != "Bidirectional":
                bad("%s: /var/lib/kubelet not mounted Bidirectional" % f)
            reg = [c for c in side if "registrar" in c["name"]]
            if not reg:
                bad("%s: no node-driver-registrar" % f)
                continue
            path = arg_of(reg[0], "--kubelet-registration-path")
            hp = host_path(spec, sock_vol)
            if path != os.path.join(hp or "?", os.path.basename(sock)):
                bad("%s: --kubelet-registration-path %s, but the socket is "
                    "%s on the host" % (f, path, os.path.join(
                        hp or "?", os.path.basename(sock))))
            if hp != "/var/lib/kubelet/plugins/%s" % driver:
                bad("%s: plugin dir %s, not /var/lib/kubelet/plugins/%s" %
                    (f, hp, driver))
            rv = [m for m in reg[0].get("volumeMounts", [])
                  if m["mountPath"] == "/registration"]
            if not rv or host_path(spec, rv[0]["name"]) != \
                    "/var/lib/kubelet/plugins_registry":
                bad("%s: /registration is not the kubelet's "
                    "plugins_registry" % f)
        else:
            prov = [c for c in side if "provisioner" in c["name"]]
            if not prov or "--extra-create-metadata" not in \
                    prov[0].get("args", []):
                bad("%s: no csi-provisioner with --extra-create-metadata" % f)

    # RBAC
    roles = {(o["kind"], o["metadata"]["name"])
             for _, o in kinds.get("ClusterRole", []) + kinds.get("Role", [])}
    for f, o in kinds.get("ClusterRoleBinding", []) + \
            kinds.get("RoleBinding", []):
        if (o["roleRef"]["kind"], o["roleRef"]["name"]) not in roles:
            bad("%s: %s binds missing %s %s" % (f, o["metadata"]["name"],
                                               o["roleRef"]["kind"],
                                               o["roleRef"]["name"]))
        for s in o.get("subjects", []):
            if s["kind"] == "ServiceAccount" and s["name"] not in sas:
                bad("%s: subject %s does not exist" % (f, s["name"]))

    # options fmfs mount has
    helptext = subprocess.run([fmfs, "mount", "--help"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True).stdout

    def options(f, what, opts):
        for k, v in opts.items():
            if k in ("url", "on_delete") or k.startswith("csi.storage.k8s"):
                continue
            if "--" + k.replace("_", "-") not in helptext:
                bad("%s: %s %s is not an fmfs mount option" % (f, what, k))
        url = opts.get("url", "")
        if not (url.startswith("s3://") or url.startswith("file://")):
            bad("%s: %s url %r is not s3:// or file://" % (f, what, url))

    classes = set()
    for f, o in kinds.get("StorageClass", []):
        classes.add(o["metadata"]["name"])
        p = o.get("parameters", {})
        options(f, "parameter", p)
        if p.get("on_delete", "retain") not in ("retain", "delete"):
            bad("%s: on_delete %s" % (f, p["on_delete"]))
        for k in p:
            if k.endswith("-secret-name") and \
                    k.replace("-name", "-namespace") not in p:
                bad("%s: %s without its namespace" % (f, k))
    pvs = set()
    for f, o in kinds.get("PersistentVolume", []):
        pvs.add(o["metadata"]["name"])
        options(f, "volumeAttribute", o["spec"]["csi"].get(
            "volumeAttributes", {}))
    for f, o in kinds.get("PersistentVolumeClaim", []):
        sc = o["spec"].get("storageClassName")
        if sc and sc not in classes:
            bad("%s: claim %s's class %s does not exist" %
                (f, o["metadata"]["name"], sc))
        if sc == "" and o["spec"].get("volumeName") not in pvs:
            bad("%s: claim %s names no PV here" % (f, o["metadata"]["name"]))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("usage: csi_manifests.py DIR FMFS_CSI FMFS", file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
    for p in PROBLEMS:
        print("problem: " + p)
    sys.exit(1 if PROBLEMS else 0)
