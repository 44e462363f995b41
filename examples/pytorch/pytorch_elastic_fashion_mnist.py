"""Train the Fashion-MNIST CNN of pytorch_fashion_mnist.py in Horovod's elastic mode: workers
may die, and hosts may come and go, while the job goes on.

    horovodrun -np 2 --min-np 1 --host-discovery-script ./discover_hosts.sh \
        /usr/bin/python3 examples/pytorch/pytorch_elastic_fashion_mnist.py

(or `-np 2 --min-np 1 -H host1:1,host2:1` with a fixed set of hosts). The training function
runs under @hvd.elastic.run with its whole state in an hvd.elastic.TorchState: the model, the
optimizer, the ElasticSampler (which knows how much of the epoch is done) and the epoch
number. Every --batches-per-commit batches the state is committed. When a worker is lost,
the others roll back to the last commit, re-form without it and carry on; when hosts are
added, everyone re-forms at the next commit and the new workers get the state from rank 0.
The learning rate follows the number of workers (a reset callback).
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F
import torch.utils.data

import horovod.torch as hvd
from pytorch_fashion_mnist import Net, load, test

parser = argparse.ArgumentParser(description="PyTorch Fashion-MNIST example on hvd, elastic")
parser.add_argument("--batch-size", type=int, default=64, help="input batch size per rank")
parser.add_argument("--test-batch-size", type=int, default=1000)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank")
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--batches-per-commit", type=int, default=20,
                    help="commit the state every N batches (what a failure rolls back to)")
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="folder of the gzip'd IDX files (Debian: dataset-fashion-mnist)")
parser.add_argument("--train-limit", type=int, default=0, help="use only the first N images")
parser.add_argument("--test-limit", type=int, default=0)
parser.add_argument("--num-threads", type=int, default=0,
                    help="torch threads per rank (default: the cores of this host / local size)")


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.num_threads or max(1, (os.cpu_count() or 1) // hvd.local_size()))

    train_set = load(args.data_dir, "train", args.train_limit)
    test_set = load(args.data_dir, "test", args.test_limit)
    # Splits what is left of the epoch among the workers there are, after every reset too.
    train_sampler = hvd.elastic.ElasticSampler(train_set, seed=args.seed)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size,
                                               sampler=train_sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                                momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    # No broadcast here: hvd.elastic.run syncs the whole state from rank 0 before training.
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, train_sampler=train_sampler,
                                   epoch=1)

    def on_reset():
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f"reset: {hvd.size()} workers now", flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.epoch <= args.epochs:
            state.model.train()
            start, seen, loss_sum, correct = time.time(), 0, 0.0, 0
            for batch, (data, target) in enumerate(train_loader):
                state.optimizer.zero_grad()
                output = state.model(data)
                loss = F.nll_loss(output, target)
                loss.backward()
                state.optimizer.step()
                state.train_sampler.record_batch(batch, args.batch_size)
                seen += len(data)
                loss_sum += loss.item() * len(data)
                correct += output.argmax(1).eq(target).sum().item()
                if (batch + 1) % args.batches_per_commit == 0:
                    state.commit()
            # the part of the epoch since the last (re)start, averaged over the workers
            loss = hvd.allreduce(torch.tensor(loss_sum / max(seen, 1)), name="train.loss").item()
            acc = hvd.allreduce(torch.tensor(correct / max(seen, 1)), name="train.acc").item()
            speed = hvd.allreduce(torch.tensor(seen / (time.time() - start)), op=hvd.Sum,
                                  name="train.speed").item()
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}/{args.epochs}: loss {loss:.4f}, train accuracy "
                      f"{100 * acc:.2f}%, {speed:.0f} images/s, {hvd.size()} workers", flush=True)
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)  # at the end: a new order, none done
            state.commit()

    if hvd.rank() == 0:
        print(f"training a CNN on {len(train_set)} Fashion-MNIST images, elastic, starting "
              f"with {hvd.size()} workers", flush=True)
    train(state)

    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size,
                                              sampler=test_sampler)
    test(model, test_loader, test_sampler)


if __name__ == "__main__":
    main()
