"""SyncBatchNorm: batch normalisation with the statistics of the whole global batch."""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from horovod.common.process_sets import global_process_set
from horovod.torch.mpi_ops import allgather, allreduce


class SyncBatchNorm(_BatchNorm):
    """torch.nn.BatchNorm over every rank's batch: in training the mean and variance are those
    of the concatenated batch (each rank's count, sum and sum of squares allgathered), and so
    are the gradients. In evaluation it is a plain BatchNorm with the running statistics."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training and self.track_running_stats:
            return super().forward(input)
        momentum = self.momentum if self.momentum is not None else 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked += 1
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, self.running_mean,
                                      self.running_var, self.eps, momentum, self.process_set)


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum,
                process_set):
        c = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        x = input.to(torch.float64)
        count = torch.tensor([float(input.numel() // c)], dtype=torch.float64)
        local = torch.cat([count, x.sum(dims), (x * x).sum(dims)])
        everyone = allgather(local.unsqueeze(0), process_set=process_set)
        n = everyone[:, 0].sum()
        mean = everyone[:, 1:1 + c].sum(0) / n
        var = everyone[:, 1 + c:].sum(0) / n - mean * mean
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
                unbiased = var * n / max(float(n) - 1, 1.0)
                running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
        shape = [1, c] + [1] * (input.dim() - 2)
        invstd = torch.rsqrt(var + eps)
        xhat = (x - mean.view(shape)) * invstd.view(shape)
        out = xhat
        if weight is not None:
            out = out * weight.to(torch.float64).view(shape) + bias.to(torch.float64).view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.n, ctx.process_set, ctx.dims, ctx.shape = n, process_set, dims, shape
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad):
        xhat, invstd, weight = ctx.saved_tensors
        g = grad.to(torch.float64)
        dims, shape = ctx.dims, ctx.shape
        local = torch.cat([g.sum(dims), (g * xhat).sum(dims)])
        total = allreduce(local, op=1, process_set=ctx.process_set)  # Sum over the ranks
        c = xhat.shape[1]
        sum_dy, sum_dy_xhat = total[:c], total[c:]
        w = weight.to(torch.float64) if weight is not None else torch.ones(c, dtype=torch.float64)
        dx = (g - sum_dy.view(shape) / ctx.n - xhat * (sum_dy_xhat.view(shape) / ctx.n)) * \
            (invstd * w).view(shape)
        dweight = (g * xhat).sum(dims) if weight is not None else None
        dbias = g.sum(dims) if weight is not None else None
        return (dx.to(grad.dtype),
                dweight.to(weight.dtype) if dweight is not None else None,
                dbias.to(weight.dtype) if dbias is not None else None,
                None, None, None, None, None)
