#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The image of deploy/Containerfile, built here without a registry
# (docs/csi.md "Install, upgrade, uninstall"): a Debian bookworm base by
# debootstrap imported into podman (kept as localhost/bookworm-base), the
# build with --isolation=chroot, tagged with a hash of the source tree so
# that the second CI pass reuses the first one's image.  Then its
# contents, exported and unpacked (a container cannot run on this VM):
# the entrypoint, fmfs and fmckpt run in a chroot of it, fmfs-csi's gRPC
# plugin and messages are installed, its Python has grpc and protobuf,
# and the plugin started in the chroot answers Probe and GetPluginInfo
# over its socket.  Needs root, podman and debootstrap (.ci/run installs
# them).
# exclusive: the image's build takes both cores for minutes, and the
#   timing-bound tests beside it (46-mount-damage's umounts) then fail
. "$TOP/tests/lib/common.sh"

for c in podman debootstrap; do
	command -v $c >/dev/null || { echo "SKIP: no $c"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
cd "$TEST_DIR"
PLUGIN=
cleanup_image() {
	[ -n "$PLUGIN" ] && kill "$PLUGIN" 2>/dev/null
	podman rm -f fmfs-csi-check >/dev/null 2>&1 || true
	umount -l img/dev 2>/dev/null || true
}
trap 'cleanup_image; cleanup_common' EXIT

if ! podman image exists localhost/bookworm-base; then
	note "debootstrap of bookworm (minbase)"
	debootstrap --variant=minbase bookworm root >debootstrap.log 2>&1 ||
		{ tail -5 debootstrap.log; fail "debootstrap failed"; }
	tar -C root -c . | podman import - localhost/bookworm-base >/dev/null ||
		fail "podman import of the base failed"
	rm -rf root
fi

note "the build context: the tracked files"
mkdir ctx
if [ -d "$TOP/.git" ]; then
	git -C "$TOP" ls-files -z | (cd "$TOP" && tar --null -T - -c) | tar -x -C ctx
else
	tar -C "$TOP" --exclude=.git -c . | tar -x -C ctx
	make -C ctx -s distclean >/dev/null 2>&1 || true
fi
tag=$(tar -C ctx --sort=name --mtime=@0 --owner=0 --group=0 -c . | sha256sum | cut -c1-16)
IMG=localhost/fmfs-csi:src-$tag
# images of older sources go (each is a few hundred MB)
podman images --format '{{.Repository}}:{{.Tag}}' |
	grep '^localhost/fmfs-csi:src-' | grep -vx "$IMG" |
	xargs -r podman rmi -f >/dev/null 2>&1 || true
if podman image exists "$IMG"; then
	note "image $IMG built already (the same sources)"
else
	note "podman build of deploy/Containerfile"
	podman build --isolation=chroot --build-arg BASE=localhost/bookworm-base \
		-f deploy/Containerfile -t "$IMG" ctx >build.log 2>&1 ||
		{ tail -30 build.log; fail "the image did not build"; }
fi
rm -rf ctx
podman image prune -f >/dev/null 2>&1 || true
[ "$(podman image inspect "$IMG" --format '{{json .Config.Entrypoint}} {{json .Config.Cmd}}')" = \
	'["/usr/bin/fmfs-csi"] ["serve"]' ] || fail "entrypoint: $(podman image inspect "$IMG" --format '{{json .Config.Entrypoint}} {{json .Config.Cmd}}')"
note "image size: $(podman image inspect "$IMG" --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"

note "its contents, unpacked"
podman create --name fmfs-csi-check "$IMG" >/dev/null
mkdir img
podman export fmfs-csi-check | tar -x -C img
podman rm -f fmfs-csi-check >/dev/null
for f in usr/bin/fmfs usr/bin/fmckpt usr/bin/fmtrain usr/bin/fmfs-csi \
	usr/lib/fmfs/csi/serve.py usr/lib/fmfs/csi/controller.py \
	usr/lib/fmfs/csi/csi_pb2.py usr/lib/libfmckpt.so usr/bin/systemd-run; do
	[ -e "img/$f" ] || fail "the image has no /$f"
done
[ -L img/usr/sbin/mount.fmfs ] || fail "the image has no /usr/sbin/mount.fmfs"
[ -L img/sbin ] || fail "the image's /sbin is no longer a link to usr/sbin"
[ ! -e img/usr/bin/gcc ] || fail "the runtime image has the compiler"
chroot img /usr/bin/fmfs --version | grep -q "^fmfs " || fail "fmfs does not run in the image"
chroot img /usr/bin/fmckpt --help >/dev/null 2>&1 || fail "fmckpt does not run in the image"
chroot img /usr/bin/fmfs mount --help >/dev/null 2>&1 || fail "fmfs mount --help"
chroot img /usr/bin/python3 -c 'import grpc, google.protobuf' ||
	fail "the image's python3 has no grpc or protobuf"
chroot img /bin/sh -c 'ldd /usr/bin/fmfs /usr/bin/fmckpt' | grep 'not found' &&
	fail "a library is missing in the image"

note "the plugin in the image answers over its socket"
mkdir -p img/dev img/csi
mount --bind /dev img/dev
chroot img /usr/bin/env -i PATH=/usr/bin:/bin FMFS_CSI_RUNDIR=/run/fmfs-csi \
	/usr/bin/fmfs-csi serve --endpoint unix:///csi/csi.sock >plugin.log 2>&1 &
PLUGIN=$!
for _ in $(seq 100); do [ -S img/csi/csi.sock ] && break; sleep 0.1; done
[ -S img/csi/csi.sock ] || { cat plugin.log; fail "no socket from the plugin in the image"; }
/usr/bin/python3 - "$TEST_DIR/img/csi/csi.sock" "$TOP/tools/csi" <<'PY' ||
import sys
sys.path.insert(0, sys.argv[2])
import grpc, csi_pb2 as pb
ch = grpc.insecure_channel("unix://" + sys.argv[1])
def call(m):
    f = ch.unary_unary("/csi.v1.Identity/" + m,
                       request_serializer=getattr(pb, m + "Request").SerializeToString,
                       response_deserializer=getattr(pb, m + "Response").FromString)
    return f(getattr(pb, m + "Request")(), timeout=30)
assert call("Probe").ready.value, "not ready"
info = call("GetPluginInfo")
assert info.name == "s3.fmfs.io", info
print("  plugin in the image: %s %s, ready" % (info.name, info.vendor_version))
PY
	{ cat plugin.log; fail "the plugin in the image did not answer"; }
kill "$PLUGIN"; wait "$PLUGIN" 2>/dev/null; PLUGIN=
umount img/dev
rm -rf img
