#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: builds gradsync and trains a convolutional network on
# scikit-learn's handwritten digits with N ranks (default 2) under
# gradsyncrun (which starts a private gradsyncd and stops it afterwards).
# Prints the accuracy per epoch, the test accuracy and whether the ranks'
# weights are identical. scripts/run_c_example.sh is the C API example.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-2}
scripts/install_deps.sh
bazel build //:gradsyncd //:gradsyncctl //:libgradsync
exec client/python/bin/gradsyncrun -np "$NP" /usr/bin/python3 examples/pytorch/train_digits.py "${@:2}"
