"""Train a small CNN on Fashion-MNIST with Horovod's PyTorch API, data-parallel.

    horovodrun -np 2 /usr/bin/python3 examples/pytorch/pytorch_fashion_mnist.py

Each rank trains on its shard of every epoch (DistributedSampler); DistributedOptimizer
averages the gradients across ranks as each one becomes ready during the backward pass;
rank 0's initial weights and optimizer state are broadcast so every rank starts alike, and
the metrics are averaged across ranks. The data are Debian's dataset-fashion-mnist files
(gzip'd IDX), so nothing is downloaded. Written like Horovod's own pytorch_mnist.py: the same
flags where they apply.
"""
import argparse
import gzip
import hashlib
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed

import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch Fashion-MNIST example on hvd")
parser.add_argument("--batch-size", type=int, default=64, help="input batch size per rank")
parser.add_argument("--test-batch-size", type=int, default=1000)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank")
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--use-adasum", action="store_true", default=False,
                    help="combine the ranks' updates with Adasum instead of averaging gradients")
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="folder of the gzip'd IDX files (Debian: dataset-fashion-mnist)")
parser.add_argument("--train-limit", type=int, default=0, help="use only the first N images")
parser.add_argument("--test-limit", type=int, default=0)
parser.add_argument("--num-threads", type=int, default=0,
                    help="torch threads per rank (default: the cores of this host / local size)")

MEAN, STD = 0.2860, 0.3530  # of the training images


def read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        raise ValueError(f"{path}: not an IDX file of the expected kind")
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split, limit):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 0x803)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 0x801)
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = (torch.from_numpy(images.copy()).float().div_(255) - MEAN) / STD
    return torch.utils.data.TensorDataset(x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=5)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=5)
        self.fc1 = nn.Linear(512, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def train(epoch, args, model, optimizer, loader, sampler):
    model.train()
    sampler.set_epoch(epoch)  # a different shuffle every epoch, the same on every rank
    start, seen, loss_sum, correct = time.time(), 0, 0.0, 0
    for data, target in loader:
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        seen += len(data)
        loss_sum += loss.item() * len(data)
        correct += output.argmax(1).eq(target).sum().item()
    elapsed = time.time() - start
    loss = metric_average(loss_sum / max(seen, 1), "train.loss")
    acc = metric_average(correct / max(seen, 1), "train.accuracy")
    images_per_s = hvd.allreduce(torch.tensor(seen / elapsed), op=hvd.Sum,
                                 name="train.speed").item()
    if hvd.rank() == 0:
        print(f"epoch {epoch}/{args.epochs}: loss {loss:.4f}, train accuracy {100 * acc:.2f}%, "
              f"{images_per_s:.0f} images/s", flush=True)


def test(model, loader, sampler):
    model.eval()
    loss_sum, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            loss_sum += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(1).eq(target).sum().item()
            seen += len(data)
    # every rank tested its shard: sum the counts
    totals = hvd.allreduce(torch.tensor([loss_sum, float(correct), float(seen)],
                                        dtype=torch.float64), op=hvd.Sum, name="test.totals")
    loss, correct, seen = totals.tolist()
    if hvd.rank() == 0:
        print(f"test loss {loss / seen:.4f}, test accuracy {100 * correct / seen:.2f}% "
              f"({int(correct)} of {int(seen)} images)", flush=True)
    return correct / seen


def weights_digest(model):
    """SHA-256 of the model's weights (every tensor's bytes, in state_dict order), checked equal
    on every rank: the same digest from two launches means bit-identical training."""
    h = hashlib.sha256()
    for tensor in model.state_dict().values():
        h.update(tensor.detach().contiguous().numpy().tobytes())
    mine = torch.frombuffer(bytearray(h.digest()), dtype=torch.uint8)
    every = hvd.allgather(mine.unsqueeze(0), name="weights.digest")
    if not bool((every == mine).all()):
        raise RuntimeError(f"rank {hvd.rank()}: the ranks' weights differ after training")
    return h.hexdigest()


def main(argv=None):
    """Train; return the weights digest and the test accuracy (what horovod.spark.run hands
    back from each rank: examples/spark/). argv: the flags (sys.argv's when None)."""
    args = parser.parse_args(argv)
    hvd.init()
    torch.manual_seed(args.seed)
    # Ranks sharing a host share its cores: give each its part, as Horovod's docs advise.
    threads = args.num_threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)

    train_set = load(args.data_dir, "train", args.train_limit)
    test_set = load(args.data_dir, "test", args.test_limit)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()
    # The global batch grows with the ranks: so does the learning rate (Horovod's advice),
    # except with Adasum, which combines the ranks' updates instead of averaging them.
    lr_scaler = 1 if args.use_adasum else hvd.size()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * lr_scaler,
                                momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)
    if hvd.rank() == 0:
        print(f"training a CNN on {len(train_set)} Fashion-MNIST images with {hvd.size()} ranks, "
              f"global batch {args.batch_size * hvd.size()}", flush=True)
    for epoch in range(1, args.epochs + 1):
        train(epoch, args, model, optimizer, train_loader, train_sampler)
    accuracy = test(model, test_loader, test_sampler)
    digest = weights_digest(model)
    if hvd.rank() == 0:
        print(f"weights digest {digest[:16]} (the same on all {hvd.size()} ranks)", flush=True)
    return {"weights_digest": digest, "test_accuracy": accuracy}


if __name__ == "__main__":
    main()
