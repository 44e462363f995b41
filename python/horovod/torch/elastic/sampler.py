"""A sampler that re-partitions what is left of an epoch when the workers change."""
import math
import random

import torch.utils.data

from horovod.common.basics import _basics


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler, but records how many samples the job processed this epoch,
    so that after a reset (tracked by a TorchState) the remaining ones are split among the new
    set of workers. Call record_batch after each batch and set_epoch at the end of each epoch.

    dataset: of constant length; shuffle: shuffle the indices (with seed + epoch, the same on
    every rank); seed: identical on every rank."""

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
        self.reset()

    def set_epoch(self, epoch):
        """Start `epoch`: a new order, nothing processed yet. Call it at the end of an epoch,
        so that a reset mid-epoch does not process samples twice."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Count a batch of `batch_size` per rank as processed by every rank."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Partition the epoch's unprocessed indices among the current ranks."""
        self.num_replicas = _basics.size()
        self.rank = _basics.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        # pad by repeating the first ones so that every rank gets num_samples
        padding = self.total_size - len(indices)
        while padding > 0:
            indices += indices[:padding]
            padding = self.total_size - len(indices)
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
