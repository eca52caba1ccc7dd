# SPDX-License-Identifier: Apache-2.0
import os

import pytest

import gradsync.torch as hvd


def test_identity_matches_launcher(rank, size):
    assert hvd.is_initialized()
    assert rank == int(os.environ["GRADSYNC_RANK"])
    assert size == int(os.environ["GRADSYNC_SIZE"])
    assert hvd.local_rank() == rank and hvd.local_size() == size
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1


def test_process_sets_bound(rank, size):
    from conftest import EVEN_RANKS, FIRST_TWO
    assert hvd.global_process_set.size() == size
    assert EVEN_RANKS.process_set_id == 1 and FIRST_TWO.process_set_id == 2
    assert EVEN_RANKS.included() == (rank % 2 == 0)
    assert EVEN_RANKS.rank() == (rank // 2 if rank % 2 == 0 else -1)

