# SPDX-License-Identifier: Apache-2.0
"""ElasticSampler (Horovod's): partitions a dataset across the ranks and,
after a membership change, the samples of the epoch not yet processed
across the new ranks."""
import math
import random

import torch.utils.data

from gradsync.torch import basics


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler, with a count of processed samples that a
    TorchState carries across membership changes.

    Put it in the TorchState, call record_batch(batch_idx, batch_size) after
    each batch and set_epoch(epoch) at the end of each epoch.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Call at the end of an epoch: the next one starts a new order."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank processed `batch_size` more samples."""
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[:self.total_size - len(indices)]  # pad to a multiple of the ranks
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
