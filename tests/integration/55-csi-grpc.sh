#!/bin/bash
# SPDX-License-Identifier: MIT
#
# fmfs-csi serve, the CSI plugin over gRPC (docs/csi.md "The gRPC
# plugin"), driven through its real Unix socket the way the kubelet and
# the external-provisioner drive it: tests/csi_conformance.py says what
# is checked.  Needs python3-grpcio, python3-protobuf and the csi_pb2.py
# that make builds with protoc; setpriv for the non-root pod.
. "$TOP/tests/lib/common.sh"

mount_setup csi-grpc
B2=$(new_bucket csi-grpc2)
PY=/usr/bin/python3
$PY -c 'import grpc, google.protobuf' 2>/dev/null ||
	{ echo "SKIP: python3-grpcio or python3-protobuf missing"; exit 77; }
[ -f "$TOP/tools/csi/csi_pb2.py" ] ||
	{ echo "SKIP: tools/csi/csi_pb2.py not built (protoc missing)"; exit 77; }
command -v setpriv >/dev/null && [ "$(id -u)" = 0 ] ||
	{ echo "SKIP: needs root and setpriv"; exit 77; }
# targets a non-root pod can reach: the test dir may be private
POD_DIR=$(mktemp -d /tmp/fmfs-csi-pods.XXXXXX)
chmod 755 "$POD_DIR"
cleanup_grpc() {
	pkill -f "fmfs-csi serve" 2>/dev/null || true
	for m in $(awk -v d="$POD_DIR" -v t="$TEST_DIR" \
		'index($5, d) == 1 || index($5, t) == 1 {print $5}' \
		/proc/self/mountinfo | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$POD_DIR"
}
trap 'cleanup_grpc; cleanup_common' EXIT
export B B2 POD_DIR FMFS
$PY "$TOP/tests/csi_conformance.py" || fail "CSI conformance (above)"
