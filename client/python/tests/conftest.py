# SPDX-License-Identifier: Apache-2.0
"""Runs under `gradsyncrun -np N python -m pytest`: every rank runs the same
tests in the same order, so their collectives pair up."""
import pytest

import gradsync.torch as hvd

# Static process sets, the same on every rank (ids 1 and 2).
EVEN_RANKS = hvd.ProcessSet([])
FIRST_TWO = hvd.ProcessSet([])


def pytest_configure(config):
    import os
    size = int(os.environ["GRADSYNC_SIZE"])
    EVEN_RANKS.ranks = list(range(0, size, 2))
    FIRST_TWO.ranks = list(range(min(2, size)))
    hvd.init(process_sets=[EVEN_RANKS, FIRST_TWO])


def pytest_unconfigure(config):
    hvd.shutdown()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()
