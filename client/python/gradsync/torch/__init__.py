# SPDX-License-Identifier: Apache-2.0
"""gradsync.torch: Horovod's PyTorch API over the node's gradsyncd.

A Horovod training script runs on gradsync by changing its import to
`import gradsync.torch as hvd`. CPU tensors travel through a shared-memory
arena; CUDA tensors are reduced in place by the daemon through CUDA IPC
(allreduce, broadcast and their grouped/async forms so far).
"""
from gradsync.errors import GradsyncError
from gradsync.torch.basics import (cross_rank, cross_size, gloo_built, gloo_enabled, init, is_initialized,
                                   local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                                   nccl_built, rank, rejoin, release_cuda_exports, shutdown, size, start_timeline,
                                   stop_timeline)
from gradsync.torch.compression import Compression
from gradsync.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                      broadcast_parameters)
from gradsync.torch.mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum, allgather,
                                    allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_,
                                    alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                                    broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_allreduce,
                                    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
                                    grouped_reducescatter, grouped_reducescatter_async, join, reducescatter,
                                    reducescatter_async, sparse_allreduce_async)
from gradsync.torch.mpi_ops import _poll as poll
from gradsync.torch.mpi_ops import _synchronize as synchronize
from gradsync.torch.optimizer import DistributedOptimizer
from gradsync.torch.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from gradsync.torch import arena  # noqa: E402
from gradsync.torch import elastic  # noqa: E402 (uses the modules above)
from gradsync.errors import MembershipChangedError
