#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds what the GPU test machine runs and gathers it in .gpu_bundle/ (git
# ignored): gradsyncd, gradsyncctl, gradsync_bench, libgradsync.so, and the
# shared libraries `ldd` names that such a machine lacks (gRPC, protobuf,
# abseil, UCX, spdlog, fmt, ...). glibc, libstdc++ and libgcc_s stay behind:
# the machine's own are newer, and PyTorch there needs them. NCCL stays
# behind too (over 200 MB): gradsyncd loads the one PyTorch brings there,
# unless scripts/nccl_build.sh has cached a build of its own (NCCL 2.30 for
# several ranks on one GPU): that one travels compressed, in nccl/. Every file
# travels xz-compressed; scripts/gpu_check.sh unpacks them on that machine.
# The device tool carries the folder (limit 64 MiB with the working tree):
#   run(command="scripts/gpu_check.sh tests", carry=[".gpu_bundle"])
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //:gradsyncd //:gradsyncctl //:libgradsync //:gradsync_bench //daemon/collective/cuda:local_reduce_bench
out=.gpu_bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp bazel-bin/daemon/exe/gradsyncd bazel-bin/tools/gradsyncctl/gradsyncctl bazel-bin/tools/bench/gradsync_bench \
  bazel-bin/daemon/collective/cuda/local_reduce_bench "$out/bin/"
# An older build of the kernel bench to compare with (GPU_BUNDLE_BEFORE=DIR:
# a checkout of that commit, built here).
if [[ -n ${GPU_BUNDLE_BEFORE:-} ]]; then
  (cd "$GPU_BUNDLE_BEFORE" && bazel build //daemon/collective/cuda:local_reduce_bench)
  cp "$GPU_BUNDLE_BEFORE/bazel-bin/daemon/collective/cuda/local_reduce_bench" "$out/bin/local_reduce_bench.before"
fi
cp bazel-bin/client/libgradsync.so "$out/lib/"
chmod u+w "$out"/bin/* "$out"/lib/*
strip --strip-debug "$out"/bin/* "$out"/lib/libgradsync.so
scripts/bundle_shared_libs.sh "$out/lib" "$out"/bin/* "$out"/lib/libgradsync.so
nccl=$(ls "${GRADSYNC_CACHE:-$HOME/.cache/gradsync}"/nccl-*-sm90/libnccl.so.2.xz 2>/dev/null | sort -V | tail -n 1 || true)
if [[ -n $nccl ]]; then
  mkdir -p "$out/nccl"
  cp "$nccl" "$out/nccl/"
  echo "gpu_bundle: with $nccl"
fi
xz -T0 -6 "$out"/bin/* "$out"/lib/*
git rev-parse HEAD > "$out/COMMIT"
size=$(du -sb "$out" | cut -f1)
echo "gpu_bundle: $out holds $(ls "$out/lib" | wc -l) libraries, $((size / 1048576)) MiB (limit 64 MiB with the tree)"
if (( size > 60 * 1048576 )); then
  echo "gpu_bundle: too large to travel" >&2
  exit 1
fi
