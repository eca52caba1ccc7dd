# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own distributed suite (DistributedTest, which PyTorch's
test/distributed/test_distributed_spawn.py runs for Gloo) against a backend.

BACKEND=gloo runs it as PyTorch does. GRADSYNC_SUITE_BACKEND=gradsync runs
the very same tests, those PyTorch runs for Gloo, on gradsync instead: every
process group the suite asks Gloo for is made with gradsync (the test
module still believes BACKEND is gloo, so it picks Gloo's cases, tolerances
and expected errors). Run by scripts/torch_suite.sh."""
import os
import sys

import torch
import torch.distributed as dist

torch.backends.cuda.matmul.allow_tf32 = False

TARGET = os.environ.get("GRADSYNC_SUITE_BACKEND", "gloo")

if TARGET == "gradsync":
    import gradsync.torch.distributed  # noqa: F401  registers the backend

    def _swap(backend):
        if backend is None or backend == "gloo" or backend == dist.Backend.GLOO:
            return "gradsync"
        if isinstance(backend, str) and "gloo" in backend:
            return backend.replace("gloo", "gradsync")
        return backend

    _init, _new_group = dist.init_process_group, dist.new_group

    def _init_process_group(backend=None, *args, **kwargs):
        return _init(_swap(backend), *args, **kwargs)

    def _new_group_swapped(ranks=None, timeout=None, backend=None, *args, **kwargs):
        return _new_group(ranks, timeout, _swap(backend), *args, **kwargs)

    dist.init_process_group = _init_process_group
    dist.new_group = _new_group_swapped
    dist.distributed_c10d.new_group = _new_group_swapped

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
