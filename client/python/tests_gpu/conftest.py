# SPDX-License-Identifier: Apache-2.0
"""The CUDA suite: runs under `gradsyncrun -np N python -m pytest` on a GPU
machine (scripts/gpu_check.sh); every rank runs the same tests in the same
order. All ranks share the GPU(s) the daemon serves."""
import os
import sys

import pytest
import torch

import gradsync.torch as hvd

# The reference inputs and results of the CPU suite (tests/reference.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def pytest_configure(config):
    hvd.init()


def pytest_unconfigure(config):
    hvd.shutdown()


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        if os.environ.get("GRADSYNC_REQUIRE_CUDA") == "1":
            raise pytest.UsageError("GRADSYNC_REQUIRE_CUDA=1 but torch sees no CUDA device")
        skip = pytest.mark.skip(reason="no CUDA device in this process")
        for item in items:
            item.add_marker(skip)


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()


@pytest.fixture
def device():
    # Several ranks share one GPU: the local rank picks among the visible ones.
    count = torch.cuda.device_count()
    return torch.device("cuda", int(os.environ.get("GRADSYNC_LOCAL_RANK", "0")) % count)
