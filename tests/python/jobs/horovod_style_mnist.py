"""A training script written the way Horovod 0.28.1's examples/pytorch/pytorch_mnist.py is, so
that CI checks what such scripts ask of `horovod` under horovodrun. Our own code, not a copy:
the real example is run by hand (README); tests/python/test_jobs.py runs this one.

What it shares with that example: its command-line flags (all but --num-proc, --hosts and
--communication, which go through horovod.run, not horovodrun), `import horovod` beside
`import horovod.torch as hvd`, packaging and filelock, torchvision's MNIST dataset with
download=True over local files under a FileLock in ~/.horovod_lock, one CPU thread per rank,
DistributedSampler over hvd.size() and hvd.rank(), the learning rate scaled by hvd.size()
(1 with Adasum), broadcast of parameters and optimizer state, DistributedOptimizer with
named_parameters, compression, op (hvd.Adasum or hvd.Average) and gradient_predivide_factor,
progress lines from every rank every --log-interval batches, and after each epoch a test whose
loss and accuracy are averaged by named allreduces of torch.tensor(value), printed by rank 0
in the example's format. The GPU paths (hvd.local_rank(), hvd.nccl_built()) are there as in
the example; --use-mixed-precision without CUDA stops with the same ValueError."""
import argparse
import os

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from filelock import FileLock
from packaging import version
from torchvision import datasets, transforms

import horovod  # noqa: F401  (the example imports the top-level package too)
import horovod.torch as hvd

parser = argparse.ArgumentParser(description="Horovod-style PyTorch MNIST training")
parser.add_argument("--batch-size", type=int, default=64, metavar="N")
parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N")
parser.add_argument("--epochs", type=int, default=10, metavar="N")
parser.add_argument("--lr", type=float, default=0.01, metavar="LR")
parser.add_argument("--momentum", type=float, default=0.5, metavar="M")
parser.add_argument("--no-cuda", action="store_true", default=False)
parser.add_argument("--seed", type=int, default=42, metavar="S")
parser.add_argument("--log-interval", type=int, default=10, metavar="N")
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--use-mixed-precision", action="store_true", default=False)
parser.add_argument("--use-adasum", action="store_true", default=False)
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--data-dir")


class Net(nn.Module):
    """The example's network: two convolutions (the second with channel dropout), two
    fully connected layers with dropout between them, log-probabilities out."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.max_pool2d(self.conv1(x), 2).relu()
        x = F.max_pool2d(self.conv2_drop(self.conv2(x)), 2).relu()
        x = F.dropout(self.fc1(x.flatten(1)).relu(), training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def mnist(data_dir, train, download=False):
    normalize = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((0.1307,), (0.3081,))])
    return datasets.MNIST(data_dir, train=train, download=download, transform=normalize)


def averaged(value, name):
    # value is a Python float (the loss) or a 0-d tensor (the accuracy); the example wraps
    # both in torch.tensor and averages them over the ranks by name
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main(args):
    hvd.init()
    torch.manual_seed(args.seed)
    if args.cuda:
        torch.cuda.set_device(hvd.local_rank())
        torch.cuda.manual_seed(args.seed)
    elif args.use_mixed_precision:
        raise ValueError("Mixed precision is only supported with cuda enabled.")
    if args.use_mixed_precision and version.parse(torch.__version__) < version.parse("1.6.0"):
        raise ValueError("Mixed precision needs torch >= 1.6.0 (torch.cuda.amp.autocast)")
    torch.set_num_threads(1)

    loader_kwargs = {}
    if args.cuda:
        loader_kwargs = {"num_workers": 1, "pin_memory": True}
        if "forkserver" in mp.get_all_start_methods():
            loader_kwargs["multiprocessing_context"] = "forkserver"

    data_dir = args.data_dir or "./data"
    with FileLock(os.path.expanduser("~/.horovod_lock")):
        train_set = mnist(data_dir, train=True, download=True)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size,
                                               sampler=train_sampler, **loader_kwargs)
    test_set = mnist(data_dir, train=False)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size,
                                              sampler=test_sampler, **loader_kwargs)

    model = Net()
    lr_scaler = 1 if args.use_adasum else hvd.size()
    if args.cuda:
        model.cuda()
        if args.use_adasum and hvd.nccl_built():
            lr_scaler = hvd.local_size()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor)

    def train(epoch):
        model.train()
        train_sampler.set_epoch(epoch)
        for step, (data, target) in enumerate(train_loader):
            if args.cuda:
                data, target = data.cuda(), target.cuda()
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if step % args.log_interval == 0:
                done = 100.0 * step / len(train_loader)
                print(f"Train Epoch: {epoch} [{step * len(data)}/{len(train_sampler)} "
                      f"({done:.0f}%)]\tLoss: {loss.item():.6f}")

    def test():
        model.eval()
        loss_sum, correct = 0.0, 0.0
        for data, target in test_loader:
            if args.cuda:
                data, target = data.cuda(), target.cuda()
            output = model(data)
            loss_sum += F.nll_loss(output, target, reduction="sum").item()
            guess = output.data.max(1, keepdim=True)[1]
            correct += guess.eq(target.data.view_as(guess)).cpu().float().sum()
        test_loss = averaged(loss_sum / len(test_sampler), "avg_loss")
        test_accuracy = averaged(correct / len(test_sampler), "avg_accuracy")
        if hvd.rank() == 0:
            print(f"\nTest set: Average loss: {test_loss:.4f}, "
                  f"Accuracy: {100.0 * test_accuracy:.2f}%\n")

    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test()


if __name__ == "__main__":
    arguments = parser.parse_args()
    arguments.cuda = not arguments.no_cuda and torch.cuda.is_available()
    main(arguments)
