# SPDX-License-Identifier: Apache-2.0
"""A small convolutional network trained data-parallel on a dataset made on
the fly (no downloads): each image is noise plus one of 4 class patterns.
Shows the usual Horovod recipe on gradsync:

  gradsyncrun -np 2 python3 examples/pytorch/train_convnet.py --epochs 3

- learning rate scaled by the number of ranks,
- parameters and optimizer state broadcast from rank 0 (also after resuming),
- each rank trains on its own shard of every epoch,
- checkpoints written by rank 0 only; metrics averaged over ranks.
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradsync.torch as hvd

CLASSES = 4


def make_dataset(n, seed):
    """Images 1x16x16: a class-specific pattern (stripes, checks, ...) plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    y, x = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing="ij")
    patterns = torch.stack([torch.sin(x), torch.sin(y), torch.sin(x + y), torch.sin(x) * torch.sin(y)])
    images = patterns[labels].unsqueeze(1) + 4.0 * torch.randn(n, 1, 16, 16, generator=g)
    return images, labels


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, CLASSES)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by the number of ranks")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--checkpoint", default="convnet_checkpoint.pt")
    args = p.parse_args()

    hvd.init()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    start_epoch = 0
    if hvd.rank() == 0 and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
    start_epoch = hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    images, labels = make_dataset(args.samples, seed=0)
    test_images, test_labels = make_dataset(1024, seed=1)
    for epoch in range(start_epoch, args.epochs):
        order = torch.randperm(args.samples, generator=torch.Generator().manual_seed(epoch))
        shard = order[hvd.rank()::hvd.size()]
        model.train()
        for begin in range(0, len(shard) - args.batch_size + 1, args.batch_size):
            batch = shard[begin:begin + args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            mine = test_images[hvd.rank()::hvd.size()], test_labels[hvd.rank()::hvd.size()]
            accuracy = (model(mine[0]).argmax(1) == mine[1]).float().mean()
        accuracy = hvd.allreduce(accuracy, name="accuracy.%d" % epoch).item()
        loss = hvd.allreduce(loss.detach(), name="loss.%d" % epoch).item()
        if hvd.rank() == 0:
            print("epoch %d: loss %.4f, test accuracy %.3f" % (epoch, loss, accuracy), flush=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       args.checkpoint)
    hvd.shutdown()


if __name__ == "__main__":
    main()
