// SPDX-License-Identifier: Apache-2.0
// Clang's thread-safety analysis (-Wthread-safety), in the manner of
// Abseil's thread_annotations.h: members say which mutex guards them,
// functions which mutex they need held (or not held). Under GCC they vanish;
// the Clang build (bazel build --config=threadsafety, part of
// scripts/test.sh) checks them.
#pragma once

#if defined(__clang__)
#define GS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GS_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (Mutex), and an RAII type that holds one (MutexLock).
#define GS_CAPABILITY(x) GS_THREAD_ANNOTATION(capability(x))
#define GS_SCOPED_CAPABILITY GS_THREAD_ANNOTATION(scoped_lockable)
// A member read or written only with `x` held; a pointer whose target is.
#define GS_GUARDED_BY(x) GS_THREAD_ANNOTATION(guarded_by(x))
#define GS_PT_GUARDED_BY(x) GS_THREAD_ANNOTATION(pt_guarded_by(x))
// A function called with the mutexes held, or with them not held.
#define GS_REQUIRES(...) GS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define GS_EXCLUDES(...) GS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that takes or releases the mutexes.
#define GS_ACQUIRE(...) GS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define GS_RELEASE(...) GS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define GS_RETURN_CAPABILITY(x) GS_THREAD_ANNOTATION(lock_returned(x))
// Lock order: a mutex taken only after (or before) the others named, where
// both are held at once (checked with -Wthread-safety-beta, as the
// threadsafety config builds).
#define GS_ACQUIRED_AFTER(...) GS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define GS_ACQUIRED_BEFORE(...) GS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
// Turns the analysis off for one function (say why where it is used).
#define GS_NO_THREAD_SAFETY_ANALYSIS GS_THREAD_ANNOTATION(no_thread_safety_analysis)
