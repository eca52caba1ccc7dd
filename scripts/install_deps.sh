#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages gradsync builds and tests with, and grpcurl;
# packages named as arguments too (a benchmark's peers, say).
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap            # Bazel 4.2.3, offline
  g++ python3
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libucx-dev ucx-utils
  libspdlog-dev libfmt-dev
  libcpp-httplib-dev         # the Prometheus metrics endpoint
  libsystemd-dev             # sd_notify: Type=notify, the watchdog
  prometheus                 # promtool checks the metrics format in the tests
  libgtest-dev libgmock-dev libbenchmark-dev
  systemd                    # systemd-analyze verify, for the unit-file test
  iproute2                   # network-namespace tests
  nftables                   # packet loss in the fault campaign
  openssl                    # certificates for the peer TLS tests
  python3-torch python3-pytest  # gradsync.torch and its tests (PyTorch 1.13, CPU)
  python3-venv               # the PyPI torch environment (scripts/pypi_torch_env.sh)
  python3-sklearn            # the handwritten digits of the Quick start's main job
  dpkg-dev help2man          # the .deb: dpkg-shlibdeps, man pages from --help
  patchelf                   # the wheel's gradsyncd and gradsyncctl find their libraries beside them
  slurmd slurmctld slurm-client munge  # the c10d backend's test under srun (a one-node cluster the test starts)
  clang-format               # scripts/check_format.sh
  clang                      # the thread-safety analysis build (--config=threadsafety)
  lintian                    # packaging/check_packages.sh: the .deb has no lintian errors
)

PACKAGES+=("$@")
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install_deps: note: no CUDA toolkit at /usr/local/cuda; GPU code is linked from there where present" >&2
fi
# grpcurl for the reflection and health checks (operations_test needs it).
"$(dirname "$0")/install_grpcurl.sh"
