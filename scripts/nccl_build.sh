#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds NCCL from source for one GPU architecture, strips and compresses it,
# and caches the result outside the checkout (the GPU machine's PyTorch brings
# NCCL 2.28.9; several ranks on one GPU need 2.30, and PyPI's library is too
# large to travel). About 16 minutes on 2 cores, once; later calls reuse it.
#
#   scripts/nccl_build.sh SOURCE_DIR [VERSION_TAG] [SM]
#     SOURCE_DIR   a clone of github.com/NVIDIA/nccl
#     VERSION_TAG  default v2.30.7-1
#     SM           default 90 (H100 and H200)
#
# Prints the path of the cached libnccl.so.2.xz. scripts/gpu_bundle.sh copies
# it into .gpu_bundle/ and scripts/gpu_check.sh unpacks it on the GPU machine.
set -euo pipefail
src=${1:?usage: nccl_build.sh SOURCE_DIR [VERSION_TAG] [SM]}
tag=${2:-v2.30.7-1}
sm=${3:-90}
cache=${GRADSYNC_CACHE:-$HOME/.cache/gradsync}/nccl-$tag-sm$sm
out=$cache/libnccl.so.2.xz
if [[ -s $out ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d /tmp/nccl_build.XXXXXX)
trap 'rm -rf "$work"' EXIT
git -C "$src" archive --format=tar "$tag" | tar -x -C "$work"
mkdir -p "$work/src-tree"
# /usr/local/cuda/include carries NCCL 2.28's nccl.h and nccl_device/, which
# shadow the source tree's own headers: build against a CUDA_HOME without them.
cuda=$work/cuda
mkdir -p "$cuda/include"
for f in /usr/local/cuda/*; do
  [[ $(basename "$f") == include ]] || ln -s "$f" "$cuda/"
done
for f in /usr/local/cuda/include/*; do
  case $(basename "$f") in nccl*) ;; *) ln -s "$f" "$cuda/include/" ;; esac
done
make -C "$work" -j"$(nproc)" src.build CUDA_HOME="$cuda" \
  NVCC_GENCODE="-gencode=arch=compute_$sm,code=sm_$sm" > "$cache/build.log" 2>&1 ||
  { tail -n 40 "$cache/build.log" >&2; exit 1; }
lib=$(readlink -f "$work/build/lib/libnccl.so.2")
strip --strip-unneeded -o "$work/libnccl.so.2" "$lib"
xz -T0 -9 -c "$work/libnccl.so.2" > "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
