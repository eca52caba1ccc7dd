#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes, once, a Python environment with PyPI's current PyTorch for the
# suite's second pass (scripts/test.sh), outside the checkout so that a
# rerun reuses it; prints its directory. `source DIR/env.sh` sets PYTHON and
# LD_LIBRARY_PATH.
#
# PyPI's torch for Linux is a CUDA build that pulls in gigabytes of NVIDIA
# wheels. The CUDA 13 toolkit at /usr/local/cuda already has most of those
# libraries (cudart, cuBLAS, cuDNN, cuFFT, cuSPARSE, ...): torch is installed
# without its dependencies, and only the libraries the toolkit lacks come
# from PyPI, at the versions torch pins (NCCL, cuSPARSELt, NVSHMEM, cuFile;
# about 520 MB instead of several GB). When that environment cannot import
# torch (no toolkit, other versions), torch is installed with all of its
# dependencies instead.
#
#   GRADSYNC_PYPI_TORCH   torch version (default below: PyPI's current)
#   GRADSYNC_TORCH_ENV    where the environment lives
set -euo pipefail

version="${GRADSYNC_PYPI_TORCH:-2.15.0}"
dir="${GRADSYNC_TORCH_ENV:-/var/cache/gradsync/torch-pypi-$version}"
cuda_lib=/usr/local/cuda/lib64

works() {
  [ -f "$dir/ready" ] && (source "$dir/env.sh" && "$PYTHON" -c "import torch, pytest" 2>/dev/null)
}

write_env() {  # $1: extra library directories (colon separated, may be empty)
  cat > "$dir/env.sh" <<ENV
# Made by scripts/pypi_torch_env.sh (torch $version).
PYTHON="$dir/venv/bin/python"
export LD_LIBRARY_PATH="$1\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
ENV
}

# What the c10d backend's tests use beside torch: numpy (c10d's object
# collectives), PyPI's PyTorch Lightning and Accelerate (trained unchanged).
# Those that require torch come without their dependencies (pip would
# otherwise pull the gigabytes of NVIDIA wheels torch was installed without),
# the rest with theirs.
add_libraries() {
  "$dir/venv/bin/python" -c "import numpy, lightning, accelerate" 2>/dev/null && return
  local add=("$dir/venv/bin/pip" install -q --disable-pip-version-check --no-warn-conflicts)
  "${add[@]}" numpy pyyaml tqdm packaging psutil safetensors huggingface_hub >&2
  "${add[@]}" --no-deps lightning lightning-utilities torchmetrics accelerate >&2
}

if works; then
  add_libraries  # an environment made before they were needed
  echo "$dir"
  exit 0
fi
echo "pypi_torch_env: making $dir (torch $version from PyPI)" >&2
rm -rf "$dir"
mkdir -p "$dir"
python3 -m venv "$dir/venv"
pip=("$dir/venv/bin/pip" install -q --disable-pip-version-check --no-warn-conflicts)
"${pip[@]}" --no-deps "torch==$version"
# torch's own Python requirements, and the test runner.
"${pip[@]}" filelock "typing-extensions>=4.13.0" "setuptools>=77.0.3" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 \
  "fsspec>=0.8.5" pytest

# The NVIDIA wheels torch pins that the toolkit does not have.
mapfile -t extra < <("$dir/venv/bin/python" - <<'PY'
import re
from importlib.metadata import requires
wanted = ("nvidia-nccl-", "nvidia-cusparselt-", "nvidia-nvshmem-", "cuda-toolkit")
for req in requires("torch") or []:
    spec = req.split(";")[0].strip()
    if spec.startswith(wanted):
        # cuda-toolkit: only its cuFile part.
        print(re.sub(r"^cuda-toolkit\[[^]]*\]", "cuda-toolkit[cufile]", spec))
PY
)
site="$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
libs=""
if [ -f "$cuda_lib/libcublas.so.13" ] && [ -f "$cuda_lib/libcudnn.so.9" ] && [ ${#extra[@]} -gt 0 ]; then
  "${pip[@]}" "${extra[@]}"  # their dependencies: only cuFile's own wheel
  for d in "$site"/nvidia/*/lib; do libs="$libs$d:"; done
  libs="$libs$cuda_lib"
fi
write_env "$libs"
touch "$dir/ready"
if ! works; then
  echo "pypi_torch_env: torch does not import with $cuda_lib; installing it with all its dependencies" >&2
  "${pip[@]}" "torch==$version"
  write_env ""
fi
works || { echo "pypi_torch_env: torch $version does not import from $dir" >&2; exit 1; }
add_libraries
echo "$dir"
