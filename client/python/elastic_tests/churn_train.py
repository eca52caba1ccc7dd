# SPDX-License-Identifier: Apache-2.0
"""Elastic training under churn, for test_elastic_churn.py: the same exact
linear model as elastic_train.py (rank r's gradient at step s is
(s + 1) * (r + 1) / 4), a commit after every step (logged as "step size" to
$GRADSYNC_TEST_OUT/steps.<pid>), until the step in $GRADSYNC_TEST_OUT/stop_at
(written by the test once its kills are done). Results as elastic_train.py."""
import json
import os
import time

import torch

import gradsync.torch as hvd

OUT = os.environ["GRADSYNC_TEST_OUT"]
DIM = 8

hvd.init()
model = torch.nn.Linear(DIM, 1, bias=False).double()
with torch.no_grad():
    model.weight.fill_(1.0)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                     named_parameters=model.named_parameters())


def stop_at():
    try:
        with open(os.path.join(OUT, "stop_at")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def log_step(step, size):
    with open(os.path.join(OUT, "steps.%d" % os.getpid()), "a") as f:
        f.write("%d %d\n" % (step, size))


@hvd.elastic.run
def train(state):
    while True:
        target = stop_at()
        if target is not None and state.step >= target:
            return
        optimizer.zero_grad()
        x = torch.full((1, DIM), (state.step + 1) * (hvd.rank() + 1) / 4.0, dtype=torch.float64)
        model(x).sum().backward()
        optimizer.step()
        state.step += 1
        size = hvd.size()
        try:
            state.commit()
        except hvd.elastic.HostsUpdatedInterrupt:
            log_step(state.step - 1, size)  # committed: ranks were admitted at this commit
            raise
        log_step(state.step - 1, size)
        time.sleep(0.02)


state = hvd.elastic.TorchState(model, optimizer, step=0)
train(state)
with open(os.path.join(OUT, "result.%d" % os.getpid()), "w") as f:
    json.dump({"weights": [w.hex() for w in model.weight.detach().view(-1).tolist()], "epoch": hvd.elastic.epoch(),
               "size": hvd.size(), "steps": state.step, "rank": hvd.rank()}, f)
hvd.shutdown()
