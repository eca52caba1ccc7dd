# SPDX-License-Identifier: Apache-2.0
"""The Quick start's main job: a small convolutional network learns the
handwritten digits that scikit-learn ships (1,797 real 8x8 scans, no
download), data-parallel with Horovod's recipe on gradsync:

  gradsyncrun -np 2 /usr/bin/python3 examples/pytorch/train_digits.py

Each rank trains on its own shard of every epoch; gradients are averaged by
DistributedOptimizer; parameters and optimizer state start from rank 0's;
loss and accuracy are averaged over the ranks. It prints the accuracy per
epoch, the final test accuracy, and whether every rank ends with the same
weights (exit code 1 if not, or if the test accuracy is below --min-accuracy).
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradsync.torch as hvd


def load_digits(seed):
    """(train images, train labels, test images, test labels): the same
    shuffled 80/20 split on every rank, images scaled to [0, 1]."""
    from sklearn.datasets import load_digits as sklearn_digits
    digits = sklearn_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    images, labels = images[order], labels[order]
    cut = len(labels) * 4 // 5
    return images[:cut], labels[:cut], images[cut:], labels[cut:]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)   # 8x8 -> 4x4
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)   # 4x4 -> 2x2
        return self.fc(x.flatten(1))


def evaluate(model, images, labels):
    """Accuracy over every rank's shard of (images, labels)."""
    model.eval()
    with torch.no_grad():
        mine = slice(hvd.rank(), None, hvd.size())
        correct = (model(images[mine]).argmax(1) == labels[mine]).sum()
    model.train()
    counts = hvd.allreduce(torch.tensor([correct.item(), len(labels[mine])], dtype=torch.int64), op=hvd.Sum,
                           name="eval.counts")
    return counts[0].item() / counts[1].item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="per rank; scaled by the number of ranks")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed + hvd.rank())  # different on purpose: the broadcast below aligns them
    torch.set_num_threads(1)
    train_x, train_y, test_x, test_y = load_digits(args.seed)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    for epoch in range(1, args.epochs + 1):
        # Every rank shuffles the same way and takes its own shard.
        order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        shard = order[hvd.rank()::hvd.size()]
        steps = len(shard) // args.batch_size  # equal on every rank (shards differ by at most one sample)
        steps = int(hvd.allreduce(torch.tensor([steps]), op=hvd.Min, name="steps").item())
        total = 0.0
        for step in range(steps):
            batch = shard[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[batch]), train_y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item()
        loss = hvd.allreduce(torch.tensor([total / max(1, steps)]), name="epoch.loss").item()
        accuracy = evaluate(model, test_x, test_y)
        if hvd.rank() == 0:
            print("epoch %d: loss %.4f, test accuracy %.2f%%" % (epoch, loss, 100 * accuracy), flush=True)

    accuracy = evaluate(model, test_x, test_y)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0), name="final.weights")
    identical = all(torch.equal(everyone[0], row) for row in everyone)
    print("rank %d: test accuracy %.2f%% on %d held-out digits; weights identical on all %d ranks: %s"
          % (hvd.rank(), 100 * accuracy, len(test_y), hvd.size(), identical), flush=True)
    hvd.shutdown()
    return 0 if identical and accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
