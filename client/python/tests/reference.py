# SPDX-License-Identifier: Apache-2.0
"""Reference inputs and results shared by the CPU and the CUDA suites
(tests_gpu puts this directory on its path)."""
import torch

import gradsync.torch as hvd

NUMERIC = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
           torch.float32, torch.float64]
OPS = {hvd.Sum: lambda xs: sum(xs), hvd.Min: lambda xs: torch.stack(xs).min(0).values,
       hvd.Max: lambda xs: torch.stack(xs).max(0).values, hvd.Product: lambda xs: torch.stack(xs).prod(0)}


def contribution(rank, shape, dtype):
    """Rank's input: small values (products stay in int8), different per rank."""
    values = torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64).reshape(shape)
    values = values % 3 + rank % 2 + 1 + (rank // 2)
    if dtype == torch.bool:
        return (values.long() % 2).bool()
    return values.to(dtype)


def close(actual, expected, dtype):
    """`actual` (on any device) equals `expected`, within rounding for half types."""
    actual = actual.cpu()
    if dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(actual.double(), expected.double(), rtol=2e-2, atol=2e-2)
    else:
        assert torch.equal(actual, expected.to(dtype)), (actual, expected)
