# SPDX-License-Identifier: Apache-2.0
"""The training scripts' linear model, replayed in one process: at step s,
rank r's gradient is (s + 1) * (r + 1) / 4 in every one of DIM weights, so
the average over n ranks is exact in binary and a schedule of (step, size)
pairs gives the exact final weights."""
DIM = 8


def replay(schedule):
    """Weights after the steps of `schedule` ((step, size) pairs)."""
    w = [1.0] * DIM
    for step, size in schedule:
        mean = sum((step + 1) * (r + 1) / 4.0 for r in range(size)) / size
        w = [x - mean for x in w]
    return w
