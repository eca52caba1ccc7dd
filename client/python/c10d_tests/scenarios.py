# SPDX-License-Identifier: Apache-2.0
"""What each rank of a c10d test runs (worker.py calls one by name, after
init_process_group). A scenario checks what it can itself and returns what
the test compares across backends (gradsync against Gloo)."""
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

TIMEOUT = datetime.timedelta(seconds=60)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8]


def _close(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
    assert torch.allclose(a.double(), b.double(), rtol=1e-2, atol=1e-2), (a, b)


def collectives(backend):
    """Every c10d collective against values computed here."""
    r, n = dist.get_rank(), dist.get_world_size()
    for dtype in DTYPES:
        t = torch.full((3, 2), r + 1, dtype=dtype)
        dist.all_reduce(t)
        _close(t, torch.full((3, 2), n * (n + 1) // 2, dtype=dtype))
    sums = {dist.ReduceOp.SUM: sum(range(1, n + 1)), dist.ReduceOp.PRODUCT: 1.0,
            dist.ReduceOp.MIN: 1.0, dist.ReduceOp.MAX: float(n), dist.ReduceOp.AVG: (n + 1) / 2}
    for k in range(1, n + 1):
        sums[dist.ReduceOp.PRODUCT] *= k
    for op, want in sums.items():
        t = torch.full((4,), float(r + 1))
        dist.all_reduce(t, op=op)
        _close(t, torch.full((4,), float(want)))
    t = torch.full((4,), float(r + 1))
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    _close(t, torch.full((4,), sum(range(1, n + 1)) * 0.5))
    scalar = torch.tensor(float(r))
    dist.all_reduce(scalar)
    _close(scalar, torch.tensor(float(sum(range(n)))))
    strided = torch.arange(12.0).view(3, 4).t() * (r + 1)  # not contiguous
    dist.all_reduce(strided)
    _close(strided, torch.arange(12.0).view(3, 4).t() * sum(range(1, n + 1)))
    coalesced = [torch.full((k + 1,), float(r)) for k in range(3)]
    dist.all_reduce_coalesced(coalesced)
    for k, c in enumerate(coalesced):
        _close(c, torch.full((k + 1,), float(sum(range(n)))))
    t = torch.full((5,), float(r))
    dist.broadcast(t, src=n - 1)
    _close(t, torch.full((5,), float(n - 1)))
    outs = [torch.zeros(2, 2) for _ in range(n)]
    dist.all_gather(outs, torch.full((2, 2), float(r)))
    for k, o in enumerate(outs):
        _close(o, torch.full((2, 2), float(k)))
    out = torch.zeros(n, 3, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.full((3,), r, dtype=torch.int64))
    _close(out, torch.arange(n).unsqueeze(1).expand(n, 3).contiguous())
    out = torch.zeros(2)
    dist.reduce_scatter_tensor(out, torch.arange(2.0 * n) * (r + 1))
    _close(out, torch.arange(2.0 * r, 2.0 * r + 2) * sum(range(1, n + 1)))
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.full((2,), float(k + r)) for k in range(n)], op=dist.ReduceOp.MAX)
    _close(out, torch.full((2,), float(r + n - 1)))
    # alltoall with uneven splits: rank r sends k+1 rows to rank k.
    send = torch.cat([torch.full((k + 1, 2), float(10 * r + k)) for k in range(n)])
    got = torch.zeros(n * (r + 1), 2)
    dist.all_to_all_single(got, send, output_split_sizes=[r + 1] * n, input_split_sizes=[k + 1 for k in range(n)])
    _close(got, torch.cat([torch.full((r + 1, 2), float(10 * k + r)) for k in range(n)]))
    even = torch.zeros(n)
    dist.all_to_all_single(even, torch.arange(n, dtype=torch.float32) + 10 * r)
    _close(even, torch.tensor([10.0 * k + r for k in range(n)]))
    outs = [torch.zeros(k + 1) for k in range(n)]
    dist.all_to_all(outs, [torch.full((r + 1,), float(r * 10 + k)) for k in range(n)])
    for k, o in enumerate(outs):
        _close(o, torch.full((k + 1,), float(k * 10 + r)))
    t = torch.full((3,), float(r + 1))
    dist.reduce(t, dst=0)
    _close(t, torch.full((3,), float(sum(range(1, n + 1)) if r == 0 else r + 1)))
    gathered = [torch.zeros(2) for _ in range(n)] if r == 0 else None
    dist.gather(torch.full((2,), float(r)), gathered, dst=0)
    if r == 0:
        for k, g in enumerate(gathered):
            _close(g, torch.full((2,), float(k)))
    piece = torch.zeros(3)
    dist.scatter(piece, [torch.full((3,), float(k * 7)) for k in range(n)] if r == 1 else None, src=1)
    _close(piece, torch.full((3,), float(r * 7)))
    dist.barrier()
    dist.monitored_barrier(timeout=TIMEOUT)
    objects = [None] * n
    dist.all_gather_object(objects, {"rank": r})
    assert objects == [{"rank": k} for k in range(n)], objects
    box = [{"from": r}]
    dist.broadcast_object_list(box, src=n - 1)
    assert box == [{"from": n - 1}], box
    return {"ok": True}


def token_check(backend):
    """The group's token is the file's, and the store does not hold it."""
    import json
    group = dist.distributed_c10d._get_default_group()
    published = json.loads(group.store.get("gradsync/job"))
    assert published["token"] is None, published
    t = torch.ones(2)
    dist.all_reduce(t)
    _close(t, torch.full((2,), float(dist.get_world_size())))
    return {"ok": True} if group.job_id.startswith("c10d-") else {"ok": False}


def async_work(backend):
    """Work objects: wait(timeout), is_completed(), get_future().then(...)."""
    r, n = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1000) * (r + 1)
    work = dist.all_reduce(t, async_op=True)
    chained = work.get_future().then(lambda f: f.value()[0] * 2)
    assert work.wait(timeout=datetime.timedelta(seconds=30))
    assert work.is_completed()
    _close(chained.wait(), torch.ones(1000) * sum(range(1, n + 1)) * 2)
    works = [dist.all_reduce(torch.full((10,), float(k)), async_op=True) for k in range(20)]
    for w in reversed(works):
        w.wait()
    return {"ok": True}


class _Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)
        self.unused = nn.Linear(4, 4) if unused else None

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _train_ddp(hook=None, optimizer="sgd", unused=False, no_sync_every=0, steps=6):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(1)
    model = DDP(_Net(unused), find_unused_parameters=unused, bucket_cap_mb=0.001)
    if hook is not None:
        state, fn = hook(dist.group.WORLD)
        model.register_comm_hook(state, fn)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    for step in range(steps):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        if no_sync_every and step % no_sync_every == 0:
            with model.no_sync():
                nn.functional.mse_loss(model(x), y).backward()
            continue
        opt.zero_grad() if not no_sync_every else None
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if no_sync_every:
            opt.zero_grad()
    return {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def _powersgd(group):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    return powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                  min_compression_rate=0.5), powersgd.powerSGD_hook


def _fp16(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return group, default_hooks.fp16_compress_hook


def _bf16(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return group, default_hooks.bf16_compress_hook


def ddp(backend):
    """DDP training in several configurations; the test compares the weights with Gloo's."""
    return {
        "sgd": _train_ddp(),
        "adam": _train_ddp(optimizer="adam"),
        "unused": _train_ddp(unused=True),
        "no_sync": _train_ddp(no_sync_every=2),
        "fp16": _train_ddp(hook=_fp16),
        "bf16": _train_ddp(hook=_bf16),
        "powersgd": _train_ddp(hook=_powersgd),
    }


def fsdp2(backend):
    """fully_shard on a CPU mesh; the test compares the full weights with Gloo's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(1)
    model = _Net()
    fully_shard(model.a, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(4):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()}


def checkpoint(backend):
    """A distributed checkpoint of a sharded model: saved, changed, loaded back."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(1)
    model = fully_shard(_Net(), mesh=mesh)
    path = os.environ["C10D_TEST_CHECKPOINT"]
    before = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    dcp.save(model.state_dict(), checkpoint_id=path)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    state = model.state_dict()
    dcp.load(state, checkpoint_id=path)
    model.load_state_dict(state)
    after = {k: v.full_tensor() for k, v in model.state_dict().items()}
    for k in before:
        _close(after[k], before[k])
    return {"ok": True}


def subgroups(backend):
    """new_group, new_subgroups, a 2-D DeviceMesh, DTensor and the
    functional collectives on its groups (4 ranks)."""
    from torch.distributed.device_mesh import init_device_mesh
    r, n = dist.get_rank(), dist.get_world_size()
    evens = dist.new_group([k for k in range(n) if k % 2 == 0])
    odds = dist.new_group([k for k in range(n) if k % 2 == 1])
    mine = evens if r % 2 == 0 else odds
    t = torch.full((2,), float(r))
    dist.all_reduce(t, group=mine)
    _close(t, torch.full((2,), float(sum(k for k in range(n) if k % 2 == r % 2))))
    sub, _ = dist.new_subgroups(group_size=2)
    t = torch.full((2,), float(r))
    dist.all_reduce(t, group=sub)
    _close(t, torch.full((2,), float((r // 2 * 2) * 2 + 1)))
    mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        t = torch.full((1,), float(r))
        dist.all_reduce(t, group=group)
        ranks = dist.get_process_group_ranks(group)
        _close(t, torch.full((1,), float(sum(ranks))))
    # DTensor reaches the groups through the functional collectives (C++).
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import torch.distributed._functional_collectives as funcol
    sharded = distribute_tensor(torch.arange(8.0 * n).view(2 * n, 4), mesh["tp"], [Shard(0)])
    _close(sharded.redistribute(mesh["tp"], [Replicate()]).to_local(), torch.arange(8.0 * n).view(2 * n, 4))
    reduced = funcol.all_reduce(torch.full((2,), float(r)), "sum", mesh.get_group("dp")).wait()
    _close(reduced, torch.full((2,), float(sum(dist.get_process_group_ranks(mesh.get_group("dp"))))))
    t = torch.ones(3)
    dist.all_reduce(t)  # the world group still works after the others
    _close(t, torch.full((3,), float(n)))
    return {"ok": True}


def repeated_steps(backend):
    """Steps that repeat their calls (as training does) reach the daemons'
    response cache: from the fifth step on, the calls' names are ones the
    leader has cached. Returns the cache hits this rank's daemon counted and
    the collectives it ran after the steady-state rounds (which only cached
    collectives take)."""
    import json
    import subprocess
    from gradsync.runner import daemon as daemons
    r, n = dist.get_rank(), dist.get_world_size()
    for step in range(12):
        for size in (7, 300, 5000):
            t = torch.full((size,), float(r + step))
            dist.all_reduce(t)
            _close(t, torch.full((size,), float(sum(range(n)) + n * step)))
        b = torch.full((3,), float(r))
        dist.broadcast(b, src=1)
        _close(b, torch.ones(3))
    dist.barrier()
    group = dist.distributed_c10d._get_default_group()
    ctl = daemons.find_binary("gradsyncctl", env_var="GRADSYNC_CTL") or "gradsyncctl"
    shown = subprocess.run([ctl, "--socket", group._node_daemon.socket_path, "--json", "jobs", group.job_id],
                           capture_output=True, text=True, timeout=30, check=True).stdout
    jobs = json.loads(shown).get("jobs", [])
    if not jobs:
        return {"cache_hits": -1, "steady_round_collectives": -1}
    return {"cache_hits": int(jobs[0].get("cache_hits", 0)),
            "steady_round_collectives": int(jobs[0].get("steady_round_collectives", 0))}


def mismatch(backend):
    """Ranks disagree on a shape: every rank raises the daemon's error, fast."""
    r = dist.get_rank()
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4 + r))
    except RuntimeError as error:
        return {"error": str(error), "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start}


def bad_splits(backend):
    """One rank's splits do not cover its input: every rank raises, fast."""
    r, n = dist.get_rank(), dist.get_world_size()
    start = time.monotonic()
    try:
        splits = [1] * n if r else [2] * n
        dist.all_to_all_single(torch.zeros(n), torch.zeros(n), input_split_sizes=splits)
    except (RuntimeError, ValueError) as error:
        return {"error": str(error), "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start}


def killed_in_backward(backend):
    """The last rank SIGKILLs itself inside DDP's backward: the others raise, naming it."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    r, n = dist.get_rank(), dist.get_world_size()
    model = DDP(_Net(), bucket_cap_mb=0.001)
    x = torch.randn(8, 16)
    model(x).sum().backward()  # one good step
    if r == n - 1:
        model.module.a.weight.register_hook(lambda g: os.kill(os.getpid(), 9))
    start = time.monotonic()
    try:
        model(x).sum().backward()
        dist.all_reduce(torch.ones(1))
    except RuntimeError as error:
        result = {"error": str(error), "seconds": time.monotonic() - start}
        torch.save(result, os.path.join(os.environ["C10D_TEST_OUT"], "%d.pt" % r))
        os._exit(0)  # the job is broken: leave without the collective shutdown
    return {"error": None, "seconds": time.monotonic() - start}


def point_to_point(backend):
    """A ring of isend/irecv, batch_isend_irecv both ways, blocking
    send/recv with tags, and a pipeline of 2 stages (4 ranks: 2 x 2)."""
    r, n = dist.get_rank(), dist.get_world_size()
    right, left = (r + 1) % n, (r - 1) % n
    got = torch.zeros(3)
    reqs = [dist.isend(torch.full((3,), float(r)), right), dist.irecv(got, left)]
    for q in reqs:
        q.wait()
    _close(got, torch.full((3,), float(left)))
    from_left, from_right = torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    ops = [dist.P2POp(dist.isend, torch.full((2,), r, dtype=torch.int64), right),
           dist.P2POp(dist.isend, torch.full((2,), r, dtype=torch.int64), left),
           dist.P2POp(dist.irecv, from_left, left), dist.P2POp(dist.irecv, from_right, right)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    _close(from_left, torch.full((2,), left, dtype=torch.int64))
    _close(from_right, torch.full((2,), right, dtype=torch.int64))
    if r < 2:  # tags are matched apart: tag 2 sent first, received second
        if r == 0:  # (a send completes once received, as NCCL's: both in flight)
            sends = [dist.isend(torch.full((1,), 2.0), 1, tag=2), dist.isend(torch.full((1,), 1.0), 1, tag=1)]
            for q in sends:
                q.wait()
        else:
            one, two = torch.zeros(1), torch.zeros(1)
            dist.recv(one, 0, tag=1)
            dist.recv(two, 0, tag=2)
            _close(one, torch.full((1,), 1.0))
            _close(two, torch.full((1,), 2.0))
    # A 2-stage pipeline: stage 0 (even ranks) sends activations forward,
    # stage 1 sends gradients back, 4 micro-batches.
    peer = r + 1 if r % 2 == 0 else r - 1
    for micro in range(4):
        if r % 2 == 0:
            dist.send(torch.full((4,), float(micro + r)), peer)
            grad = torch.zeros(4)
            dist.recv(grad, peer)
            _close(grad, torch.full((4,), float(micro + r) * 2))
        else:
            act = torch.zeros(4)
            dist.recv(act, peer)
            dist.send(act * 2, peer)
    dist.barrier()
    return {"ok": True}


# Libraries that call init_process_group themselves (worker.py leaves it to them).
SELF_INIT = ("lightning",)


def _regression_data():
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(64, 16, generator=gen)
    return torch.utils.data.TensorDataset(x, x @ torch.randn(16, 4, generator=gen))


def lightning(backend):
    """PyTorch Lightning's DDPStrategy with process_group_backend=`backend`."""
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.net = _Net()

        def training_step(self, batch, _):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    module = Module()
    trainer = pl.Trainer(accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]), max_epochs=2,
                         strategy=DDPStrategy(process_group_backend=backend, timeout=TIMEOUT),
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(_regression_data(), batch_size=8))
    assert dist.get_backend() == backend, dist.get_backend()
    return {k: v.detach().clone() for k, v in module.net.state_dict().items()}


def accelerate(backend):
    """Hugging Face Accelerate on the process group worker.py made. On the
    CPU, Accelerate sets up "gloo" or "mpi" only (InitProcessGroupKwargs'
    backend is refused there; on CUDA it is taken): a group initialized
    before Accelerator() is the one it uses."""
    from accelerate import Accelerator
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == dist.get_world_size()
    torch.manual_seed(1)
    model = _Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(_regression_data(), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
    assert dist.get_backend() == backend, dist.get_backend()
    return {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}


def restart(backend):
    """torchrun --max-restarts 1: the first attempt's last rank dies after a
    collective; the second attempt runs as a job of its own."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    t = torch.ones(2)
    dist.all_reduce(t)
    _close(t, torch.full((2,), float(dist.get_world_size())))
    if attempt == 0 and dist.get_rank() == dist.get_world_size() - 1:
        os._exit(1)
    dist.barrier()
    group = dist.distributed_c10d._get_default_group()
    return {"attempt": attempt, "job": getattr(group, "job_id", None)}


def c10d_contract(backend):
    """What PyTorch's own suite checks of a CPU backend, in c10d's words:
    all_gather_coalesced's outputs rank by rank, monitored_barrier naming
    who did not come (and a zero timeout), a barrier's timeout worded
    "Timed out", Work.wait(timeout) within its timeout, a sparse
    all_reduce, and torch.profiler events per collective. Returns what
    the test compares with Gloo."""
    r, n = dist.get_rank(), dist.get_world_size()
    seen = {}
    inputs = [torch.full((3,), float(r + 1)), torch.arange(4, dtype=torch.float32) + 10 * r]
    outputs = [[torch.zeros_like(t) for t in inputs] for _ in range(n)]  # [rank][input]
    dist.all_gather_coalesced(outputs, inputs)
    for rank in range(n):
        _close(outputs[rank][0], torch.full((3,), float(rank + 1)))
        _close(outputs[rank][1], torch.arange(4, dtype=torch.float32) + 10 * rank)
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=10))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=10), wait_all_ranks=True)
    # Rank 1 stays away: rank 0 names it, the others hear it from rank 0
    # (on a group of its own: a failed one is broken for Gloo).
    apart, zero, lonely = (dist.new_group(list(range(n))) for _ in range(3))
    if r != 1:
        try:
            dist.monitored_barrier(apart, timeout=datetime.timedelta(seconds=1))
            seen["monitored"] = "passed"
        except RuntimeError as error:
            text = str(error)
            want = "Rank 1 failed to pass monitoredBarrier" if r == 0 else (
                "Rank %d successfully reached monitoredBarrier, but received errors while waiting for send/recv "
                "from rank 0" % r)
            seen["monitored"] = want in text or text
    dist.barrier()
    if r == 0:  # a zero timeout is spent at once
        try:
            zero.monitored_barrier(datetime.timedelta(0))
            seen["zero"] = "passed"
        except RuntimeError as error:
            seen["zero"] = "Rank 0 timed out in monitoredBarrier" in str(error) or str(error)
    dist.barrier()
    # Sparse all_reduce: the sum, in place.
    indices = torch.tensor([[r, r + 1]])
    sparse = torch.sparse_coo_tensor(indices, torch.tensor([1.0, 2.0]), (n + 1,))
    dist.all_reduce(sparse)
    want = torch.zeros(n + 1)
    for rank in range(n):
        want[rank] += 1.0
        want[rank + 1] += 2.0
    _close(sparse.to_dense(), want)
    # One event per collective, named as the backend, with its inputs'
    # shapes, ending when its Work does: rank 1 comes 0.5 s late to the
    # allgather, which the others' events span.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        dist.all_reduce(torch.ones(5))
        dist.broadcast(torch.ones(2, 3), src=0)
        if r == 1:
            time.sleep(0.5)
        dist.all_gather([torch.zeros(4) for _ in range(n)], torch.ones(4), async_op=True).wait()
    events = [e for e in prof.events() if e.name.startswith(backend + ":")]
    seen["profiled"] = sorted((e.name, [list(shape) for shape in e.input_shapes]) for e in events)
    seen["spans"] = r == 1 or [e.time_range.elapsed_us() > 400000 for e in events if e.name.endswith(":all_gather")]
    # A barrier's timeout (1 s) when rank 0 waits alone, in c10d's words,
    # ending within the timeout plus a little.
    if r == 0:
        started = time.monotonic()
        try:
            dist.barrier(group=lonely, timeout=datetime.timedelta(seconds=1))
            seen["timeout"] = "passed"
        except RuntimeError as error:
            took = time.monotonic() - started
            seen["timeout"] = (" Timed out " in str(error) or str(error), 0.9 < took < 3.0 or took)
    # (Gloo's timeout breaks the group: the others wait on the world group.)
    dist.barrier()
    return seen


# The c10d half of the randomized check (tests/integration/random_test.cc is
# the other): a program drawn from C10D_RANDOM_SEED, the same on every rank,
# of collectives on the world, on new_group sets that may leave whole nodes
# out, on new_subgroups and on both dimensions of a 2-D DeviceMesh (each rank
# on its own group of the dimension, as a hybrid-shard mesh does), several in
# flight at once (async_op), each rank interleaving the groups in an order
# of its own (c10d's rule holds: one order within each group). Every result
# is checked against what this rank computes itself.
_RANDOM_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                  torch.uint8]
_RANDOM_SIZES = [0, 1, 3, 64, 1000, 40000, 300000]  # elements (300000 float64: 2.4 MB)


def _random_input(op, k, size):
    """Rank k's input to op `op` (small integers: exact in every dtype)."""
    base = (op["id"] * 7 + k * 3) % 11 + 1
    return ((torch.arange(size) % 5) + base).to(op["dtype"])


def _random_targets(plan, r, n):
    """The groups a program draws from: (name, this rank's group or None,
    its ranks or None)."""
    from torch.distributed.device_mesh import init_device_mesh
    targets = [("world", None, list(range(n)))]
    for i in range(plan.randint(1, 3)):
        members = sorted(plan.sample(range(n), plan.randint(1, n)))
        group = dist.new_group(members)  # every rank calls it, in the same order
        targets.append(("set %d %s" % (i, members), group if r in members else None,
                        members if r in members else None))
    if n % 2 == 0:
        sub, _ = dist.new_subgroups(group_size=2)
        targets.append(("subgroups of 2", sub, dist.get_process_group_ranks(sub)))
    if n % 2 == 0 and n >= 4:
        mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("replicate", "shard"))
        for dim in ("replicate", "shard"):
            group = mesh.get_group(dim)
            targets.append(("mesh " + dim, group, dist.get_process_group_ranks(group)))
    return targets


def _random_op(plan, op_id, targets):
    kind = plan.choice(["all_reduce", "all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"])
    op = {"id": op_id, "kind": kind, "target": plan.randrange(len(targets)), "dtype": plan.choice(_RANDOM_DTYPES),
          "size": plan.choice(_RANDOM_SIZES), "reduce": plan.choice(["sum", "max", "min"]),
          "root": plan.randrange(1 << 16)}
    if op["dtype"] == torch.uint8 or kind == "reduce_scatter":
        op["reduce"] = plan.choice(["sum", "max"])
    return op


def _random_issue(op, group, members, r):
    """Starts `op` on this rank's `group`; returns (work, check)."""
    from torch.distributed import ReduceOp
    g, pos, size = len(members), members.index(r), op["size"]
    mine = _random_input(op, r, size)
    everyone = {k: _random_input(op, k, size) for k in members}
    reduce = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN}[op["reduce"]]

    def reduced(parts):
        stacked = torch.stack([p.double() for p in parts])
        if op["reduce"] == "sum":
            return stacked.sum(0).to(op["dtype"])
        return (stacked.max(0).values if op["reduce"] == "max" else stacked.min(0).values).to(op["dtype"])

    kind = op["kind"]
    if kind == "all_reduce":
        t = mine.clone()
        return dist.all_reduce(t, op=reduce, group=group, async_op=True), lambda: (t, reduced(everyone.values()))
    if kind == "broadcast":
        root = members[op["root"] % g]
        t = mine.clone()
        return dist.broadcast(t, src=root, group=group, async_op=True), lambda: (t, everyone[root])
    if kind == "all_gather":
        out = torch.zeros(g * size, dtype=op["dtype"])
        work = dist.all_gather_into_tensor(out, mine, group=group, async_op=True)
        return work, lambda: (out, torch.cat([everyone[k] for k in members]))
    block = max(size // g, 1) if size else 0
    whole = {k: _random_input(op, k, block * g) for k in members}
    if kind == "reduce_scatter":
        out = torch.zeros(block, dtype=op["dtype"])
        work = dist.reduce_scatter_tensor(out, whole[r].clone(), op=reduce, group=group, async_op=True)
        return work, lambda: (out, reduced([whole[k][pos * block:(pos + 1) * block] for k in members]))
    out = torch.zeros(block * g, dtype=op["dtype"])
    work = dist.all_to_all_single(out, whole[r].clone(), group=group, async_op=True)
    return work, lambda: (out, torch.cat([whole[k][pos * block:(pos + 1) * block] for k in members]))


def random_program(backend):
    """C10D_RANDOM_FAULT=1: one rank drawn from the seed SIGKILLs itself
    before its k-th call (or at the final barrier), after writing the time
    to C10D_FAULT_FILE; the others return the first error they get and when."""
    import random
    seed = int(os.environ["C10D_RANDOM_SEED"])
    r, n = dist.get_rank(), dist.get_world_size()
    plan = random.Random(seed)  # the same draws on every rank
    targets = _random_targets(plan, r, n)
    order = random.Random(seed * 1009 + r)  # this rank's own interleaving
    fault = random.Random(seed * 7919 + 1)  # apart: the program's draws stay those without a fault
    victim, fault_at = fault.randrange(n), fault.randrange(12)
    faulty = os.environ.get("C10D_RANDOM_FAULT") == "1"

    def fault_point(calls):
        if faulty and r == victim and calls >= fault_at:
            with open(os.environ["C10D_FAULT_FILE"], "w") as out:
                out.write("%r %d %d" % (time.time(), victim, os.getpid()))
            os.kill(os.getpid(), 9)

    done = calls = 0
    op_id = 0
    try:
        for step in range(plan.randint(3, 6)):
            ops = []
            for _ in range(plan.randint(2, 8)):
                ops.append(_random_op(plan, op_id, targets))
                op_id += 1
            # Per group, the program's order; across groups, this rank's own.
            queues = {}
            for op in ops:
                if targets[op["target"]][1] is not None or targets[op["target"]][0] == "world":
                    queues.setdefault(op["target"], []).append(op)
            started = []
            while queues:
                target = order.choice(sorted(queues))
                op = queues[target].pop(0)
                if not queues[target]:
                    del queues[target]
                name, group, members = targets[target]
                fault_point(calls)
                work, check = _random_issue(op, group, members, r)
                calls += 1
                started.append((op, name, work, check))
            for op, name, work, check in started:
                work.wait()
                got, want = check()
                assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), (
                    "seed %d step %d: %s of %d %s on %s: rank %d got %s, want %s" % (
                        seed, step, op["kind"], op["size"], op["dtype"], name, r, got[:8], want[:8]))
                done += 1
        fault_point(fault_at)
        dist.barrier()
    except RuntimeError as error:
        if not faulty:
            raise
        result = {"ok": False, "error": str(error), "at": time.time(), "victim": victim}
        torch.save(result, os.path.join(os.environ["C10D_TEST_OUT"], "%d.pt" % r))
        os._exit(0)  # the job is broken: leave without the collective shutdown
    return {"ok": True, "collectives": done}
