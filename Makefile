# SPDX-License-Identifier: MIT
#
# One Makefile for everything: make, make check, make install, make bench.
# It is not generated: ./configure writes config.mak (compiler, flags,
# what each library needs) and config.h, and this file includes
# config.mak.  Each module (one folder, docs/layout.md) is a static
# archive; <M>_A names the archives a program of module M links, in link
# order, and <M>_LIBS the system libraries they need.

ifeq ($(wildcard config.mak),)
ifeq ($(filter clean distclean,$(MAKECMDGOALS)),)
$(error config.mak is missing: run ./configure first)
endif
endif
-include config.mak

ifeq ($(V),1)
Q =
E = @:
else
Q = @
E = @echo
endif

# The first target, so a bare `make` builds everything (its
# prerequisites come below).
all:

prefix ?= /usr/local
bindir = $(prefix)/bin
libdir = $(prefix)/lib
includedir = $(prefix)/include
mandir = $(prefix)/share/man
pkgconfigdir = $(libdir)/pkgconfig
# The Python package fmckpt (python/fmckpt): where Debian's python3 looks
# (dist-packages of /usr, or of /usr/local for its minor version); for
# another prefix, PYTHONPATH must name it.
PYTHON3 ?= $(firstword $(wildcard /usr/bin/python3) python3)
PYTHON3_VER = $(shell $(PYTHON3) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
pythondir ?= $(if $(filter /usr,$(prefix)),$(prefix)/lib/python3/dist-packages,$(prefix)/lib/python$(PYTHON3_VER)/dist-packages)
# mount(8) looks for mount.TYPE in /sbin only: there for the system
# prefixes, under the prefix otherwise (a private install must not touch
# /sbin).
mounthelperdir ?= $(if $(filter /usr /usr/local,$(prefix)),/sbin,$(prefix)/sbin)

CPPFLAGS = -I. $(CURL_CFLAGS)

# ---- modules, bottom up ------------------------------------------------

# util/: CRC32C, clocks, messages, whole reads and writes, ETags in
# binary, assertions
UTIL_OBJS = util/util.o util/crc32c.o util/io.o util/etag.o
UTIL_A = util/libutil.a
UTIL_LIBS = -lpthread

# metrics/: the Prometheus text format and the /metrics endpoint
# (libmicrohttpd)
METRICS_OBJS = metrics/metrics.o
METRICS_A = metrics/libmetrics.a $(UTIL_A)
METRICS_LIBS = $(MHD_LIBS) $(UTIL_LIBS)
$(METRICS_OBJS): CPPFLAGS += $(MHD_CFLAGS)

# peer/: the cache group (docs/cluster-cache.md): member list, placement,
# wire format and its HMAC authentication (libcrypto)
PEER_OBJS = peer/member.o peer/proto.o peer/tcp.o peer/tcp_server.o \
	peer/tcp_client.o peer/fabric.o
PEER_A = peer/libpeer.a $(UTIL_A)
PEER_LIBS = $(FABRIC_LIBS) $(CRYPTO_LIBS) $(UTIL_LIBS)

# objstore/: object-store clients behind one interface
OBJSTORE_OBJS = objstore/objstore.o objstore/url.o objstore/creds.o \
	objstore/sigv4.o objstore/s3.o objstore/s3_engine.o \
	objstore/s3_xml.o objstore/s3_redact.o objstore/posix.o \
	objstore/posix_mpu.o objstore/posix_sweep.o objstore/posix_list.o
OBJSTORE_A = objstore/libobjstore.a $(UTIL_A)
OBJSTORE_LIBS = $(CURL_LIBS) $(CRYPTO_LIBS) $(EXPAT_LIBS) $(UTIL_LIBS)

# cache/: the persistent NVMe cache (blocks, SQLite index, io_uring,
# write-back)
CACHE_OBJS = cache/cache.o cache/ensure.o cache/open.o cache/evict.o \
	cache/index.o cache/attr.o cache/flush.o cache/fetch.o \
	cache/uring.o cache/wb.o cache/wb_db.o cache/wb_replay.o cache/wb_names.o \
	cache/wb_upload.o cache/wb_meta.o \
	cache/listing.o cache/group.o cache/dir.o
CACHE_A = cache/libcache.a $(PEER_A) $(OBJSTORE_A)
CACHE_LIBS = $(SQLITE_LIBS) $(URING_LIBS) $(PEER_LIBS) $(OBJSTORE_LIBS)

# ns/: the namespace: names, listings, lookups, metadata encoding,
# renames by server-side copy (docs/layout.md "ns/")
NS_OBJS = ns/store.o ns/listing.o ns/lookup.o ns/index.o ns/meta.o \
	ns/rename.o ns/heads.o
NS_A = ns/libns.a $(CACHE_A)
NS_LIBS = $(CACHE_LIBS)

# fs/: the FUSE adapter over ns + cache
FS_OBJS = fs/fs.o fs/inode.o fs/attr.o fs/mount.o fs/ctl.o fs/write.o fs/names.o \
	fs/link.o fs/passthrough.o fs/uring.o fs/takeover.o fs/tk_replay.o \
	fs/tk_replies.o fs/prober.o fs/metrics.o
FS_A = fs/libfs.a $(NS_A) $(METRICS_A)
FS_LIBS = $(FUSE_LIBS) $(NS_LIBS) $(METRICS_LIBS)
$(FS_OBJS): CPPFLAGS += $(FUSE_CFLAGS) $(MHD_CFLAGS)

# ckpt/: libfmckpt, the asynchronous checkpoint writer and reader.  Its
# objects and those below it are position-independent: they also make
# the shared libfmckpt.so that `make install` ships.
CKPT_OBJS = ckpt/ckpt.o ckpt/open.o ckpt/wait.o ckpt/writer.o ckpt/drain.o \
	ckpt/format.o ckpt/list.o \
	ckpt/store.o ckpt/load.o ckpt/reshard.o ckpt/ffi.o ckpt/node.o ckpt/cuda.o
CKPT_A = ckpt/libckpt.a $(OBJSTORE_A)
CKPT_LIBS = $(URING_LIBS) $(OBJSTORE_LIBS)
ifeq ($(HAVE_CUDA),1)
CKPT_LIBS += $(CUDA_LIBS)
$(CKPT_OBJS): CPPFLAGS += $(CUDA_CFLAGS)
endif
$(UTIL_OBJS) $(OBJSTORE_OBJS) $(CKPT_OBJS): CFLAGS += -fPIC

# train/: the training engine (CPU reference: OpenBLAS, OpenMP; data:
# shards, tokenizer, loader; the CUDA back end when configure found
# CUDA, else its stub).  nvcc builds sm_90 code (H100/H200) and
# compute_80 PTX, which the driver compiles for any other GPU from
# Ampere on; NVCC_ARCH overrides.
TRAIN_OBJS = train/model.o train/layers.o train/shard.o train/tokenize.o \
	train/loader_open.o \
	train/loader.o train/rendezvous.o
ifeq ($(HAVE_CUDA),1)
TRAIN_OBJS += train/gpu.o train/gpu_init.o train/gpu_kernels.o train/gpu_attn.o
else
TRAIN_OBJS += train/gpu_none.o
endif
TRAIN_A = train/libtrain.a $(UTIL_A)
TRAIN_LIBS = $(BLAS_LIBS) $(OPENMP_LIBS) -lm $(UTIL_LIBS)
ifeq ($(HAVE_CUDA),1)
TRAIN_LIBS += $(CUDA_LIBS) $(NCCL_LIBS) -lstdc++
endif
NVCC_ARCH = -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_80,code=compute_80
NVCCFLAGS = -O2 -std=c++17 $(NVCC_ARCH) -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
$(TRAIN_OBJS) tests/unit/test_train.o: CPPFLAGS += $(BLAS_CFLAGS)
$(TRAIN_OBJS) tests/unit/test_train.o: CFLAGS += $(OPENMP_CFLAGS)

LIBS_A = util/libutil.a metrics/libmetrics.a peer/libpeer.a \
	objstore/libobjstore.a \
	cache/libcache.a ns/libns.a fs/libfs.a ckpt/libckpt.a train/libtrain.a
util/libutil.a: $(UTIL_OBJS)
metrics/libmetrics.a: $(METRICS_OBJS)
peer/libpeer.a: $(PEER_OBJS)
objstore/libobjstore.a: $(OBJSTORE_OBJS)
cache/libcache.a: $(CACHE_OBJS)
ns/libns.a: $(NS_OBJS)
fs/libfs.a: $(FS_OBJS)
ckpt/libckpt.a: $(CKPT_OBJS)
train/libtrain.a: $(TRAIN_OBJS)

# ---- programs -----------------------------------------------------------

# tools/: the three front ends (tools/tools.h: their shape)
TOOLS_COMMON = tools/tools.o
FMFS_OBJS = tools/fmfs.o tools/fmfs_mount.o tools/fmfs_mount_opts.o tools/fmfs_cachedir.o tools/fmfs_group.o tools/fmfs_ctl.o \
	tools/fmfs_obj.o tools/fmfs_helper.o tools/fmfs_keeper.o $(TOOLS_COMMON)
FMCKPT_OBJS = tools/fmckpt.o tools/fmckpt_store.o tools/fmckpt_status.o \
	tools/fmckpt_bench.o $(TOOLS_COMMON)
FMTRAIN_OBJS = tools/fmtrain.o tools/fmtrain_tokenize.o \
	tools/fmtrain_train.o tools/fmtrain_run.o tools/fmtrain_ckpt.o \
	tools/fmtrain_cpu.o tools/fmtrain_cuda.o tools/fmtrain_metrics.o \
	$(TOOLS_COMMON)
tools/fmtrain_run.o: CFLAGS += $(OPENMP_CFLAGS)

tools/fmfs: $(FMFS_OBJS) $(FS_A)
tools/fmfs: LINK_LIBS = $(FS_LIBS)
tools/fmckpt: $(FMCKPT_OBJS) $(CKPT_A)
tools/fmckpt: LINK_LIBS = $(CKPT_LIBS) -lm
tools/fmtrain: $(FMTRAIN_OBJS) train/libtrain.a $(CKPT_A) $(METRICS_A)
tools/fmtrain: LINK_LIBS = $(TRAIN_LIBS) $(CKPT_LIBS) $(METRICS_LIBS)
PROGS = tools/fmfs tools/fmckpt tools/fmtrain

# Unit tests: one cmocka program per module.
UNIT_TESTS = tests/unit/test_sigv4 tests/unit/test_objstore \
	tests/unit/test_cache tests/unit/test_ckpt tests/unit/test_reshard tests/unit/test_data \
	tests/unit/test_train tests/unit/test_rendezvous tests/unit/test_peer \
	tests/unit/test_group tests/unit/test_ns tests/unit/test_util
tests/unit/test_sigv4: tests/unit/test_sigv4.o $(OBJSTORE_A)
tests/unit/test_objstore: tests/unit/test_objstore.o $(OBJSTORE_A)
tests/unit/test_sigv4 tests/unit/test_objstore: LINK_LIBS = $(OBJSTORE_LIBS) $(CMOCKA_LIBS)
tests/unit/test_peer: tests/unit/test_peer.o $(PEER_A)
tests/unit/test_peer: LINK_LIBS = $(PEER_LIBS) $(CMOCKA_LIBS)
tests/unit/test_cache: tests/unit/test_cache.o $(CACHE_A)
tests/unit/test_cache: LINK_LIBS = $(CACHE_LIBS) $(CMOCKA_LIBS)
tests/unit/test_group: tests/unit/test_group.o $(CACHE_A)
tests/unit/test_group: LINK_LIBS = $(CACHE_LIBS) $(CMOCKA_LIBS)
# test_ns wraps the store calls of ns/ to count them and inject faults.
tests/unit/test_util: tests/unit/test_util.o $(UTIL_A)
tests/unit/test_util: LINK_LIBS = $(UTIL_LIBS) $(CMOCKA_LIBS)
tests/unit/test_ns: tests/unit/test_ns.o $(NS_A)
tests/unit/test_ns: LINK_LIBS = $(NS_LIBS) $(CMOCKA_LIBS)
tests/unit/test_ns: LDFLAGS += -Wl,--wrap=obj_list,--wrap=obj_head,--wrap=obj_copy,--wrap=obj_copy_typed,--wrap=obj_check_bucket
tests/unit/test_ckpt: tests/unit/test_ckpt.o $(CKPT_A)
tests/unit/test_ckpt: LINK_LIBS = $(CKPT_LIBS) $(CMOCKA_LIBS)
tests/unit/test_reshard: tests/unit/test_reshard.o $(CKPT_A)
tests/unit/test_reshard: LINK_LIBS = $(CKPT_LIBS) $(CMOCKA_LIBS)
tests/unit/test_data: tests/unit/test_data.o $(TRAIN_A)
tests/unit/test_train: tests/unit/test_train.o $(TRAIN_A)
tests/unit/test_rendezvous: tests/unit/test_rendezvous.o $(TRAIN_A)
tests/unit/test_data tests/unit/test_train tests/unit/test_rendezvous: LINK_LIBS = $(TRAIN_LIBS) $(CMOCKA_LIBS)
ifeq ($(HAVE_CUDA),1)
UNIT_TESTS += tests/unit/test_train_gpu
tests/unit/test_train_gpu: tests/unit/test_train_gpu.o $(TRAIN_A)
tests/unit/test_train_gpu: LINK_LIBS = $(TRAIN_LIBS)
endif

# Helpers of the integration tests.  tests/fmtrain-fakegpu is fmtrain
# with train/gpu.h answered by the CPU model and local TCP
# (tests/fake_gpu.c): its --device cuda paths with several ranks, on any
# machine.  Its objects come before libtrain.a, so gpu_none.o (or the
# CUDA back end) is not linked.
tests/ckpt-writer: tests/ckpt-writer.o $(CKPT_A)
tests/ckpt-writer: LINK_LIBS = $(CKPT_LIBS)
tests/fmtrain-fakegpu: tests/fake_gpu.o $(FMTRAIN_OBJS) train/libtrain.a $(CKPT_A) $(METRICS_A)
tests/fmtrain-fakegpu: LINK_LIBS = $(TRAIN_LIBS) $(CKPT_LIBS) $(METRICS_LIBS)
tests/fmtrain-fakegpu: LDFLAGS += -Wl,--wrap=ckpt_add
# tests/crashfs (tests/crashfs.c): a FUSE passthrough that simulates a
# power cut, for the power-loss tests (docs/testing.md).
tests/crashfs: tests/crashfs.o
tests/crashfs: LINK_LIBS = $(FUSE_LIBS)
tests/crashfs.o: CPPFLAGS += $(FUSE_CFLAGS)
# tests/peer-fault (tests/peer-fault.c): a cache-group member that
# answers wrongly, for 58-mount-group-faults.
tests/peer-fault: tests/peer-fault.o $(PEER_A)
tests/peer-fault: LINK_LIBS = $(PEER_LIBS)
TEST_PROGS = tests/ckpt-writer tests/fmtrain-fakegpu tests/crashfs \
	tests/peer-fault

tools/bench/objbench: tools/bench/objbench.o $(OBJSTORE_A)
tools/bench/objbench: LINK_LIBS = $(OBJSTORE_LIBS)
tools/bench/gpubench: tools/bench/gpubench.o $(TRAIN_A)
tools/bench/gpubench: LINK_LIBS = $(TRAIN_LIBS)
BENCH_PROGS = tools/bench/objbench tools/bench/gpubench

# ---- libfmckpt, as installed ----------------------------------------------

# One archive and one shared library with libfmckpt and what it uses of
# objstore/ and util/, so a program links -lfmckpt alone.  Only the
# ckpt_ functions of ckpt/ckpt.h are exported from the shared library
# (ckpt/libfmckpt.map).
FMCKPT_SO_VERSION = 0
FMCKPT_LIB_OBJS = $(CKPT_OBJS) $(OBJSTORE_OBJS) $(UTIL_OBJS)
FMCKPT_SO = ckpt/libfmckpt.so.$(FMCKPT_SO_VERSION)
FMCKPT_INSTALL = ckpt/libfmckpt.a $(FMCKPT_SO)
ckpt/libfmckpt.a: $(FMCKPT_LIB_OBJS)
LIBS_A += ckpt/libfmckpt.a

$(FMCKPT_SO): $(FMCKPT_LIB_OBJS) ckpt/libfmckpt.map
	$(E) "  LINK    $@"
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-soname,libfmckpt.so.$(FMCKPT_SO_VERSION) \
		-Wl,--version-script=ckpt/libfmckpt.map -o $@ \
		$(FMCKPT_LIB_OBJS) $(CKPT_LIBS)

# fmckpt.pc is written at install time, for the prefix installed to.
FMCKPT_PC_SED = -e 's|@prefix@|$(prefix)|' -e 's|@libdir@|$(libdir)|' \
	-e 's|@includedir@|$(includedir)|' -e 's|@version@|$(VERSION)|' \
	-e 's|@libs_private@|$(strip $(CKPT_LIBS))|'

# ---- rules ------------------------------------------------------------------

# The CSI plugin's messages for fmfs-csi serve (tools/csi/serve.py), made
# by protoc from our tools/csi/csi.proto.  Without protoc
# (protobuf-compiler) they are not made, and fmfs-csi serve says so.
# (Defined before the rules that name them: make expands prerequisites
# as it reads them.)
PROTOC ?= $(shell command -v protoc 2>/dev/null)
CSI_PB = $(if $(PROTOC),tools/csi/csi_pb2.py)
CSI_LIB = tools/csi/serve.py tools/csi/controller.py

all: $(PROGS) $(UNIT_TESTS) $(BENCH_PROGS) $(TEST_PROGS) $(FMCKPT_INSTALL) \
	$(CSI_PB)
tools/csi/csi_pb2.py: tools/csi/csi.proto
	$(E) "  PROTOC  $@"
	$(Q)$(PROTOC) -Itools/csi --python_out=tools/csi $<

%.o: %.c config.mak config.h
	$(E) "  CC      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

%.o: %.cu config.mak config.h
	$(E) "  NVCC    $@"
	$(Q)$(NVCC) -I. $(CUDA_CFLAGS) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

%.a:
	$(E) "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# Every program: its objects and archives in the order given ($+ keeps
# an archive named twice, as util/libutil.a is, in both places), then
# its LINK_LIBS.
$(PROGS) $(UNIT_TESTS) $(TEST_PROGS) $(BENCH_PROGS):
	$(E) "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$+) $(LINK_LIBS)

# make check: unit tests, then integration tests against a private Ceph
# RADOS gateway started by the test runner, several at a time.  The last
# line is the summary.  make check-quick: the quick tier of
# docs/testing.md (unit tests and the integration tests under 30 s).
check: all
	$(Q)tests/run-tests.sh $(UNIT_TESTS)

check-quick: all
	$(Q)FMFS_TIER=quick tests/run-tests.sh $(UNIT_TESTS)

check-unit: all
	$(Q)FMFS_SKIP_INTEGRATION=1 tests/run-tests.sh $(UNIT_TESTS)

bench: all
	$(Q)tools/bench/bench-objstore.sh
	$(Q)tools/bench/bench-mount.sh
	$(Q)tools/bench/bench-ckpt.sh
	$(Q)tools/bench/bench-write.sh
	$(Q)tools/bench/bench-train.sh

MAN_PAGES = docs/fmfs.1 docs/fmckpt.1 docs/fmtrain.1 docs/fmfs-csi.1

install: $(PROGS) $(FMCKPT_INSTALL) $(CSI_PB)
	install -d $(DESTDIR)$(bindir) $(DESTDIR)$(mandir)/man1 \
		$(DESTDIR)$(libdir) $(DESTDIR)$(pkgconfigdir) \
		$(DESTDIR)$(includedir)/fmfs/objstore
	install -m 755 $(PROGS) tools/fmfs-csi $(DESTDIR)$(bindir)/
	install -d $(DESTDIR)$(libdir)/fmfs/csi
	install -m 644 $(CSI_LIB) $(CSI_PB) $(DESTDIR)$(libdir)/fmfs/csi/
	install -d $(DESTDIR)$(mounthelperdir)
	ln -sf $(bindir)/fmfs $(DESTDIR)$(mounthelperdir)/mount.fmfs
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(mandir)/man1/
	install -m 644 ckpt/libfmckpt.a $(DESTDIR)$(libdir)/
	install -m 755 $(FMCKPT_SO) $(DESTDIR)$(libdir)/
	ln -sf libfmckpt.so.$(FMCKPT_SO_VERSION) $(DESTDIR)$(libdir)/libfmckpt.so
	install -m 644 ckpt/ckpt.h $(DESTDIR)$(includedir)/fmfs/
	install -m 644 objstore/objstore.h $(DESTDIR)$(includedir)/fmfs/objstore/
	sed $(FMCKPT_PC_SED) ckpt/fmckpt.pc.in >$(DESTDIR)$(pkgconfigdir)/fmckpt.pc
	install -d $(DESTDIR)$(pythondir)/fmckpt
	install -m 644 python/fmckpt/__init__.py $(DESTDIR)$(pythondir)/fmckpt/
	printf '# written by make install: where libfmckpt.so.0 is\nLIBDIR = "%s"\n' \
		'$(libdir)' >$(DESTDIR)$(pythondir)/fmckpt/_config.py

uninstall:
	rm -f $(addprefix $(DESTDIR)$(bindir)/,$(notdir $(PROGS)) fmfs-csi) \
		$(DESTDIR)$(mounthelperdir)/mount.fmfs \
		$(addprefix $(DESTDIR)$(mandir)/man1/,$(notdir $(MAN_PAGES))) \
		$(DESTDIR)$(libdir)/libfmckpt.a $(DESTDIR)$(libdir)/libfmckpt.so \
		$(DESTDIR)$(libdir)/libfmckpt.so.$(FMCKPT_SO_VERSION) \
		$(DESTDIR)$(pkgconfigdir)/fmckpt.pc
	rm -rf $(DESTDIR)$(includedir)/fmfs $(DESTDIR)$(libdir)/fmfs/csi \
		$(DESTDIR)$(pythondir)/fmckpt

clean:
	rm -f $(PROGS) $(UNIT_TESTS) tests/unit/test_train_gpu $(BENCH_PROGS) \
		$(TEST_PROGS) $(LIBS_A) $(FMCKPT_INSTALL) tools/csi/csi_pb2.py
	find . -name '*.o' -o -name '*.d' | xargs rm -f

distclean: clean
	rm -f config.mak config.h config.log

.PHONY: all check check-quick check-unit bench install uninstall clean distclean

-include $(shell find . -name '*.d' 2>/dev/null)
