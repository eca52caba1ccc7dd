#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copies into DIR the shared libraries `ldd` names for each BINARY, except
# those every glibc system has (glibc itself, libstdc++, libgcc_s), under
# their sonames; a library already in DIR stays. libgradsync.so finds them
# beside itself through its RPATH ($ORIGIN). Used by the GPU bundle and the
# wheel.
#   scripts/bundle_shared_libs.sh DIR BINARY...
set -euo pipefail
dir=$1
shift
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s)'
for binary in "$@"; do
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
    [[ "$soname" =~ $skip ]] && continue
    [[ -e "$dir/$soname" ]] || cp -L "$path" "$dir/$soname"
  done
done
