# SPDX-License-Identifier: Apache-2.0
# Sourced by the Python test scripts. Under --config=asan (GRADSYNC_SANITIZER
# set by .bazelrc) libgradsync.so and gradsyncd carry ASan/UBSan: Python must
# load the runtimes first (LD_PRELOAD), and is itself not leak-checked (the
# interpreter keeps memory at exit); the daemon is, through a wrapper that
# gradsyncrun starts in its place (its non-zero exit fails the run).
# Under --config=tsan the same holds for ThreadSanitizer: every Python
# process preloads it (libgradsync.so is instrumented), and the daemon runs
# with TSAN_OPTIONS from the test environment (halt_on_error, suppressions).
if [ "${GRADSYNC_SANITIZER:-}" = asan ]; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
  daemon_wrapper="${TEST_TMPDIR:-/tmp}/gradsyncd-asan"
  printf '#!/bin/sh\nASAN_OPTIONS=detect_leaks=1:abort_on_error=1 exec "%s" "$@"\n' "$GRADSYNC_DAEMON" >"$daemon_wrapper"
  chmod +x "$daemon_wrapper"
  export GRADSYNC_DAEMON="$daemon_wrapper"
elif [ "${GRADSYNC_SANITIZER:-}" = tsan ]; then
  export LD_PRELOAD="$(gcc -print-file-name=libtsan.so)"
fi
