# SPDX-License-Identifier: Apache-2.0
"""An elastic training run with a known answer, for test_elastic.py.

A linear "model" of float64 weights; at global step s, rank r's gradient is
(s + 1) * (r + 1) / 4 in every element, so the average over n ranks is
exact in binary and the final weights can be replayed exactly. One epoch of
an ElasticSampler over 60 samples, 2 per rank per step; a commit after
every step. With GRADSYNC_TEST_VICTIM=r, rank r starts a 16 MiB allreduce at
step 5 and SIGKILLs itself while it runs; with GRADSYNC_TEST_WAIT_FOR=n, the
survivors then commit until the job is back at n ranks (gradsyncrun starts a
replacement that joins at a commit) before going on. Each rank writes the sample
indices of every committed step to $GRADSYNC_TEST_OUT/samples.<pid>, and
at the end its weights and epoch to $GRADSYNC_TEST_OUT/result.<rank>.
GRADSYNC_TEST_DEVICE=cuda puts the model and every tensor on the GPU
(client/python/tests_gpu/elastic_nccl_check.py).
"""
import json
import os
import signal
import time

import torch

import gradsync.torch as hvd

OUT = os.environ["GRADSYNC_TEST_OUT"]
VICTIM = int(os.environ.get("GRADSYNC_TEST_VICTIM", "-1"))
WAIT_FOR = int(os.environ.get("GRADSYNC_TEST_WAIT_FOR", "0"))
DIM = 8
BATCH = 2
DEVICE = os.environ.get("GRADSYNC_TEST_DEVICE", "cpu")

hvd.init()
FIRST_RANK = hvd.rank()  # the victim is named by its rank at the start (a replacement is not it)
REPLACEMENT = bool(os.environ.get("GRADSYNC_ELASTIC_JOIN"))
model = torch.nn.Linear(DIM, 1, bias=False).double().to(DEVICE)
with torch.no_grad():
    model.weight.fill_(1.0)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(60)), shuffle=True, seed=7)
resets = []


def log_samples(batch):
    with open(os.path.join(OUT, "samples.%d" % os.getpid()), "a") as f:
        f.write(" ".join(str(i) for i in batch) + "\n")


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, 1):
        indices = list(iter(state.sampler))
        start = 0
        while start < len(indices):
            while hvd.size() < WAIT_FOR:  # admitted at a commit: HostsUpdatedInterrupt, sync, again
                state.commit()
                time.sleep(0.05)
            batch = indices[start:start + BATCH]
            if state.step == 5 and FIRST_RANK == VICTIM and not REPLACEMENT:
                hvd.allreduce_async(torch.ones(4 << 20, device=DEVICE), name="big.%d" % state.step)
                os.kill(os.getpid(), signal.SIGKILL)
            if state.step == 5:
                hvd.synchronize(hvd.allreduce_async(torch.ones(4 << 20, device=DEVICE), name="big.%d" % state.step))
            optimizer.zero_grad()
            x = torch.full((1, DIM), (state.step + 1) * (hvd.rank() + 1) / 4.0, dtype=torch.float64, device=DEVICE)
            model(x).sum().backward()
            optimizer.step()
            state.sampler.record_batch(start // BATCH, BATCH)
            state.step += 1
            try:
                state.commit()
            except hvd.elastic.HostsUpdatedInterrupt:
                log_samples(batch)  # committed: ranks were admitted at this commit
                raise
            log_samples(batch)
            start += BATCH
        state.sampler.set_epoch(state.epoch + 1)


state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)
state.register_reset_callbacks([lambda: resets.append(hvd.size())])
train(state)
with open(os.path.join(OUT, "result.%d" % hvd.rank()), "w") as f:
    json.dump({"weights": [w.hex() for w in model.weight.detach().cpu().view(-1).tolist()], "epoch": hvd.elastic.epoch(),
               "size": hvd.size(), "steps": state.step, "resets": resets}, f)
hvd.shutdown()
