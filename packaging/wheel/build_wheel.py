#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the gradsync wheel: the pure-Python package and, in gradsync/_lib,
libgradsync.so, gradsyncd and gradsyncctl with the shared libraries they
need that a glibc system may lack (their RPATH $ORIGIN finds them there). No compile step at install time,
so any Python >= 3.9 with any PyTorch can use it.

    build_wheel.py VERSION PACKAGE_DIR LIB_DIR OUT_DIR
"""
import base64
import hashlib
import os
import sys
import zipfile

NAME = "gradsync"
# The bundled libraries come from Debian 12: glibc 2.36 and GCC 12's libstdc++.
TAG = "py3-none-manylinux_2_36_x86_64"


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def main(version, package_dir, lib_dir, out_dir):
    dist_info = "%s-%s.dist-info" % (NAME, version)
    files = []  # (path in the wheel, bytes, mode)
    for root, dirs, names in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                full = os.path.join(root, name)
                rel = os.path.relpath(full, os.path.dirname(package_dir))
                with open(full, "rb") as f:
                    files.append((rel, f.read(), 0o644))
    for name in sorted(os.listdir(lib_dir)):
        with open(os.path.join(lib_dir, name), "rb") as f:
            files.append(("%s/_lib/%s" % (NAME, name), f.read(), 0o755))
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + version,
        "Summary: Client of gradsyncd (the node-local gradient synchronisation daemon): "
        "Horovod's API for PyTorch, and gradsyncrun",
        "License: Apache-2.0",
        "Requires-Python: >=3.9",
        "Provides-Extra: torch",
        "Requires-Dist: torch; extra == \"torch\"",
        "",
        "gradsync.torch is Horovod's PyTorch API over a gradsyncd running on the node, and "
        "gradsync.torch.distributed its torch.distributed backend; gradsyncrun starts the ranks. "
        "The wheel carries gradsyncd and gradsyncctl for a private daemon per job; the gradsync "
        "Debian package runs the daemon as a service.",
        "",
    ])
    wheel = "Wheel-Version: 1.0\nGenerator: gradsync build_wheel.py\nRoot-Is-Purelib: false\nTag: %s\n" % TAG
    entry_points = ("[console_scripts]\ngradsyncrun = gradsync.runner.launch:main\n"
                    "gradsyncd = gradsync._binaries:gradsyncd\ngradsyncctl = gradsync._binaries:gradsyncctl\n\n"
                    # torch.distributed finds the "gradsync" backend without an import.
                    "[torch.distributed.backends]\ngradsync = gradsync.torch.distributed:_register\n")
    files += [(dist_info + "/METADATA", metadata.encode(), 0o644),
              (dist_info + "/WHEEL", wheel.encode(), 0o644),
              (dist_info + "/entry_points.txt", entry_points.encode(), 0o644)]
    record = [record_line(path, data) for path, data, _ in files] + [dist_info + "/RECORD,,"]
    files.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode(), 0o644))

    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "%s-%s-%s.whl" % (NAME, version, TAG))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data, mode in files:
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
