#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The CSI deployment (docs/kubernetes/csi) parsed and checked for
# consistency by tests/csi_manifests.py: it must pass as shipped, and
# fail, naming the problem, on copies each broken in one way a cluster
# would trip on.  Needs python3-yaml.
. "$TOP/tests/lib/common.sh"

PY=/usr/bin/python3
$PY -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml missing"; exit 77; }
SRC=$TOP/docs/kubernetes/csi
cd "$TEST_DIR"
check() { $PY "$TOP/tests/csi_manifests.py" "$1" "$TOP/tools/fmfs-csi" "$FMFS"; }

note "as shipped"
check "$SRC" >out.txt || { cat out.txt; fail "the shipped manifests have problems"; }

# broken FILE SED-EXPR WORDS: a copy with FILE edited must fail naming WORDS.
n=0
broken() {
	n=$((n + 1))
	rm -rf "copy$n" && cp -r "$SRC" "copy$n"
	sed -i "$2" "copy$n/$1"
	cmp -s "$SRC/$1" "copy$n/$1" && fail "copy $n: '$2' changed nothing in $1"
	if check "copy$n" >out.txt; then
		fail "copy $n ($1: $2) passed"
	fi
	grep -q -- "$3" out.txt || { cat out.txt; fail "copy $n: no '$3'"; }
	note "broken $1 ($2): $(grep -m1 -- "$3" out.txt)"
}
broken node.yaml 's|registration-path=/var/lib/kubelet/plugins/s3.fmfs.io/|registration-path=/var/lib/kubelet/plugins/fmfs/|' "kubelet-registration-path"
broken node.yaml 's|--csi-address=/csi/csi.sock|--csi-address=/csi/plugin.sock|' "dials"
broken node.yaml 's|mountPropagation: Bidirectional|mountPropagation: HostToContainer|' "Bidirectional"
broken node.yaml 's|hostPID: true|hostPID: false|' "would die with"
broken node.yaml 's|image: csi-node-driver-registrar|image: quay.io/x/registrar:v1|' "not a parameter"
broken controller.yaml 's|            - --extra-create-metadata||' "extra-create-metadata"
broken controller.yaml 's|serviceAccountName: fmfs-csi-controller|serviceAccountName: fmfs-csi-ctl|' "does not exist"
broken rbac.yaml '/^roleRef:/,/apiGroup/ s|name: fmfs-csi-provisioner|name: fmfs-provisioner|' "binds missing"
broken csidriver.yaml 's|name: s3.fmfs.io|name: fmfs.csi.io|' "the plugin says"
broken examples/storageclass.yaml 's|provisioner: s3.fmfs.io|provisioner: fmfs.io|' "provisioner"
broken examples/storageclass.yaml 's|cache_size: 100G|cache_sise: 100G|' "not an fmfs mount option"
broken examples/storageclass.yaml 's|on_delete: retain |on_delete: keep |' "on_delete"
broken examples/dataset-pv.yaml 's|url: s3://datasets|url: http://datasets|' "url"
broken examples/checkpoints-pvc.yaml 's|storageClassName: fmfs-checkpoints|storageClassName: fmfs-ckpt|' "does not exist"
broken kustomization.yaml 's|  - controller.yaml|  - controllers.yaml|' "missing"
broken rbac.yaml 's|  namespace: fmfs-csi$|  namespace: default|' "namespace"
