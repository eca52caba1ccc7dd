# SPDX-License-Identifier: Apache-2.0
"""The few macros every BUILD file uses: common copts, the test main, protoc."""

GS_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-fno-strict-aliasing",
]

def gradsync_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = GS_COPTS + copts, **kwargs)

def gradsync_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = GS_COPTS + copts, **kwargs)

def gradsync_cc_test(name, deps = [], copts = [], **kwargs):
    """A GoogleTest binary with the gtest/gmock main."""
    native.cc_test(
        name = name,
        # gtest's EXPECT macros inside an unbraced `if` trip -Wdangling-else.
        copts = GS_COPTS + ["-Wno-dangling-else"] + copts,
        deps = deps + ["@gtest_sys//:gtest_main"],
        **kwargs
    )

def gradsync_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    """Compiles srcs with the system protoc (and grpc_cpp_plugin when grpc=True)
    into a cc_library named `name`."""
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()
    plugin = "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin --grpc_out=$(GENDIR) " if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR) " + plugin +
              " ".join([pkg + "/" + s for s in srcs]),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        include_prefix = "",
        deps = deps + ["@grpc_sys//:grpc"],
        visibility = visibility,
    )

def gradsync_cuda_object(name, src, hdrs = []):
    """Compiles one .cu file with the CUDA toolkit's nvcc into a PIC object
    (`name`.o) for a cc_library's srcs. sm_90 machine code for H100/H200 and
    compute_90 PTX that newer GPUs compile at load time; no FMA contraction,
    so results match the CPU kernels bit for bit."""
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [name + ".o"],
        cmd = ("/usr/local/cuda/bin/nvcc -c -std=c++17 -O3 --fmad=false --expt-relaxed-constexpr " +
               "-Xcompiler -fPIC -Xcompiler -Wall -I. " +
               "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 " +
               "-o $@ $(location " + src + ")"),
    )

def gradsync_fuzz_target(name, srcs, deps = []):
    """A libFuzzer target `name` (built with --config=fuzz: clang, ASan and
    UBSan; tagged manual, so not part of //...) and `name`_regression_test,
    which replays corpus/`name`/ (the seeds, and every input that once
    crashed the target, named crash-*) with the normal toolchain."""
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = GS_COPTS,
        linkopts = ["-fsanitize=fuzzer"],
        deps = deps,
        tags = ["manual", "fuzz"],
    )
    native.cc_test(
        name = name + "_regression_test",
        size = "small",
        srcs = srcs,
        copts = GS_COPTS,
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/*"]),
        deps = deps + [":replay_main"],
    )
