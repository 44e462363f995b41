"""Horovod's collective operations on torch tensors, over libhvd (horovod._hvd).

Every operation has an asynchronous form returning an integer handle (poll, synchronize) and
a blocking form; trailing underscore means in place. The blocking forms of allreduce,
allgather, broadcast, alltoall and reducescatter are autograd functions with the gradients
Horovod defines. Tensors cross into the library as data pointers: everything the library
reads or writes is kept alive, and contiguous, until its handle is synchronized.
"""
import threading
import warnings

import torch

from horovod import _hvd
from horovod.common.basics import _basics
from horovod.common.exceptions import HorovodInternalError
from horovod.common.process_sets import ProcessSet, global_process_set
from horovod.torch.compression import Compression

# The basics, here as in Horovod's mpi_ops (horovod.torch re-exports them from this module)
init = _basics.init
shutdown = _basics.shutdown
is_initialized = _basics.is_initialized
start_timeline = _basics.start_timeline
stop_timeline = _basics.stop_timeline
report_stragglers = _basics.report_stragglers
size = _basics.size
local_size = _basics.local_size
cross_size = _basics.cross_size
rank = _basics.rank
local_rank = _basics.local_rank
cross_rank = _basics.cross_rank
is_homogeneous = _basics.is_homogeneous
mpi_threads_supported = _basics.mpi_threads_supported
mpi_enabled = _basics.mpi_enabled
mpi_built = _basics.mpi_built
gloo_enabled = _basics.gloo_enabled
gloo_built = _basics.gloo_built
nccl_built = _basics.nccl_built
ddl_built = _basics.ddl_built
ccl_built = _basics.ccl_built
cuda_built = _basics.cuda_built
rocm_built = _basics.rocm_built

# reduce ops (Horovod's values)
Average = _hvd.AVERAGE
Sum = _hvd.SUM
Adasum = _hvd.ADASUM
Min = _hvd.MIN
Max = _hvd.MAX
Product = _hvd.PRODUCT

_DTYPES = {
    torch.uint8: _hvd.UINT8,
    torch.int8: _hvd.INT8,
    torch.int16: _hvd.INT16,
    torch.int32: _hvd.INT32,
    torch.int64: _hvd.INT64,
    torch.float16: _hvd.FLOAT16,
    torch.bfloat16: _hvd.BFLOAT16,
    torch.float32: _hvd.FLOAT32,
    torch.float64: _hvd.FLOAT64,
    torch.bool: _hvd.BOOL,
}


def _dtype_code(tensor):
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise ValueError(f"Tensor type {tensor.type()} is not supported.") from None


def _check_cpu(tensor):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_cpu:  # (is_cpu: a flag; tensor.device builds an object, 0.5 us a call)
        raise ValueError(f"hvd runs on CPU tensors; this tensor is on {tensor.device} "
                         "(this build has no CUDA support)")
    if tensor.is_sparse:
        raise ValueError("sparse tensors go through sparse_allreduce_async")


def _process_set_id(process_set):
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a horovod ProcessSet")
    if process_set.process_set_id is None:
        raise ValueError("the process set has not been registered (hvd.add_process_set)")
    return process_set.process_set_id


def _op_of(average, op, prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's rules: `average` is deprecated and exclusive with `op`; Average by default."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in "
                      "a future release", DeprecationWarning)
        op = Average if average else Sum
    if op is None:
        op = Average
    if op not in (Average, Sum, Adasum, Min, Max, Product):
        raise ValueError(f"unknown reduction op {op!r}")
    return op


# ---- handles ----

class _HandleTable:
    """What each handle's operation needs kept alive, and how to finish it. A plain dict
    without a lock: each method is one dict operation, atomic under the GIL, and a per-call
    lock cost a microsecond on the path every collective takes."""

    def __init__(self):
        self._items = {}

    def put(self, handle, finish):
        self._items[handle] = finish

    def take(self, handle):
        """The handle's finish, removed; None when never returned or taken already."""
        return self._items.pop(handle, None)

    def clear(self):
        self._items.clear()


_handles = _HandleTable()
# Unnamed operations are numbered per process set: every member of a set calls the same
# sequence of the set's collectives, so the numbers (hence the names) agree across its ranks
# even when other sets run different numbers of operations. (Horovod numbers them by handle,
# per process, so ranks that ran different sets drift apart and stall.)
_noname_counters = {}
_noname_lock = threading.Lock()


def _auto_name(kind, name, ps=0):
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string")
        return f"{kind}.{name}"
    with _noname_lock:
        n = _noname_counters.get(ps, 0) + 1
        _noname_counters[ps] = n
    return f"{kind}.noname.{n}"


class _Group:
    """Several handles returned as one (the grouped operations)."""

    def __init__(self, handles):
        self.handles = handles


def _library(call, *args):
    """call(*args) into the extension, its failures raised as Horovod raises them: ValueError
    for bad arguments (it is not a RuntimeError), HorovodInternalError for the rest."""
    try:
        return call(*args)
    except RuntimeError as e:
        if isinstance(e, HorovodInternalError):
            raise
        raise HorovodInternalError(str(e)) from None


def _enqueue(kind, items):
    return _library(_hvd.enqueue, kind, items)


def _item(name, send, recv, tensor, op=Sum, prescale=1.0, postscale=1.0, root=0, splits=None,
          ps=0, allocate=False):
    # (the module converts the numbers itself and reads torch.Size, a tuple, as it is: every
    # conversion here was a call on the path of each operation)
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        _dtype_code(tensor)  # raises the error naming the type
    return (name, send.data_ptr() if send is not None else 0,
            recv.data_ptr() if recv is not None else 0, code, tensor.shape,
            op, prescale, postscale, root, splits, ps, allocate)


def _contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _ranks_size(ps):
    return _hvd.process_set_size(ps) if ps else _basics.size()


class _SparseHandle:
    """The handle of a sparse allreduce (two allgathers). As in Horovod, calling it waits and
    returns the result; poll and synchronize take it too."""

    def __init__(self, indices, values, finish):
        self._indices, self._values, self._finish = indices, values, finish
        self._result = None
        self._done = False

    def __call__(self):
        if not self._done:
            # values first, as Horovod (its issue 2961)
            values = synchronize(self._values)
            indices = synchronize(self._indices)
            self._result = self._finish(indices, values)
            self._done = True
        return self._result

    def poll(self):
        return self._done or (poll(self._values) and poll(self._indices))


def poll(handle):
    """True when the operation of `handle` is done (synchronize will not block)."""
    if isinstance(handle, _Group):
        return all(poll(h) for h in handle.handles)
    if isinstance(handle, _SparseHandle):
        return handle.poll()
    return _hvd.poll(handle)


def synchronize(handle):
    """Wait for the operation of `handle` and return its output (a list for a grouped one).
    Raises HorovodInternalError when it failed."""
    if type(handle) is not int:  # (an int is the common case: two isinstance calls less)
        if isinstance(handle, _Group):
            return [synchronize(h) for h in handle.handles]
        if isinstance(handle, _SparseHandle):
            return handle()
    finish = _handles.take(handle)
    if finish is None:
        return None  # as Horovod: a handle never returned, or synchronized already
    return finish(_library(_hvd.wait, handle))


def _run(kind, item, finish):
    """A blocking collective of one tensor: enqueue and wait in one call into the library
    (no handle), then finish as synchronize would."""
    return finish(_library(_hvd.run, kind, item))


# ---- allreduce ----

def _allreduce_item(tensor, output, name, op, prescale, postscale, ps):
    """One tensor's enqueue item and the finish that hands its result over."""
    _check_cpu(tensor)
    src = _contiguous(tensor)
    dst = output if output.is_contiguous() else torch.empty_like(output,
                                                                 memory_format=torch.contiguous_format)
    if src is not tensor and output is tensor:
        dst = src  # in place on a non-contiguous tensor: work on its contiguous copy
    item = _item(name, src, dst, src, op, prescale, postscale, ps=ps)

    def finish(_, src=src, dst=dst, output=output):
        if dst is not output:
            output.copy_(dst)
        return output
    return item, finish


def _allreduce_items(tensors, outputs, names, op, prescale, postscale, ps):
    items, finishes = [], []
    for tensor, output, name in zip(tensors, outputs, names):
        item, finish = _allreduce_item(tensor, output, name, op, prescale, postscale, ps)
        items.append(item)
        finishes.append(finish)
    return items, finishes


def _reduce_one(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """The item and finish of one tensor's allreduce into output (None: a new tensor)."""
    if output is None:
        output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    ps = _process_set_id(process_set)
    return _allreduce_item(tensor, output, _auto_name("allreduce", name, ps), op,
                           prescale_factor, postscale_factor, ps)


def _reduce_run(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """The blocking allreduce of one tensor into output (None: a new tensor); returns it."""
    item, finish = _reduce_one(tensor, output, name, op, prescale_factor, postscale_factor,
                               process_set)
    return _run(_hvd.ALLREDUCE, item, finish)


def _reduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set):
    """A grouped allreduce: the tensors enqueued as one unit; returns a _Group."""
    ps = _process_set_id(process_set)
    base = _auto_name("allreduce", name, ps)
    names = [f"{base}.{i}" for i in range(len(tensors))]
    items, finishes = _allreduce_items(tensors, outputs, names, op, prescale_factor,
                                       postscale_factor, ps)
    handles = _enqueue(_hvd.ALLREDUCE, items)
    for h, f in zip(handles, finishes):
        _handles.put(h, f)
    return _Group(handles)


def _reduce_start(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """The allreduce of one tensor into output (None: a new tensor), started; returns its
    handle."""
    item, finish = _reduce_one(tensor, output, name, op, prescale_factor, postscale_factor,
                               process_set)
    handle = _enqueue(_hvd.ALLREDUCE, [item])[0]
    _handles.put(handle, finish)
    return handle


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Start averaging (or summing, ...) `tensor` over every rank into a new tensor; returns a
    handle for poll and synchronize."""
    op = _op_of(average, op)
    return _reduce_start(tensor, None, name, op, prescale_factor, postscale_factor,
                         process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async writing the result into `tensor` itself."""
    op = _op_of(average, op)
    return _reduce_start(tensor, tensor, name, op, prescale_factor, postscale_factor,
                         process_set)


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale, postscale, process_set
        return _reduce_run(tensor, None, name, op, prescale, postscale, process_set)

    @staticmethod
    def backward(ctx, grad):
        out = allreduce(grad, op=ctx.op, prescale_factor=ctx.prescale,
                        postscale_factor=ctx.postscale, process_set=ctx.process_set)
        return out, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Average (by default), sum, min, max or multiply `tensor` over every rank of the process
    set; returns a new tensor of the same shape and dtype. Differentiable: the gradient is
    the same reduction of the output's gradient. `compression` applies to the wire format."""
    op = _op_of(average, op)
    if not isinstance(tensor, torch.Tensor):
        _check_cpu(tensor)  # raises the TypeError naming what was passed
    if compression is Compression.none and not (tensor.requires_grad and torch.is_grad_enabled()):
        # the common case, without the compressor's two calls
        return _reduce_run(tensor, None, name, op, prescale_factor, postscale_factor, process_set)
    compressed, cctx = compression.compress(tensor)
    if compressed.requires_grad and torch.is_grad_enabled():
        out = _AllreduceFn.apply(compressed, name, op, prescale_factor, postscale_factor,
                                 process_set)
    else:  # no gradient to carry: the autograd function's 3 us per call buy nothing
        out = _reduce_run(compressed, None, name, op, prescale_factor, postscale_factor,
                          process_set)
    return compression.decompress(out, cctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """allreduce in place: `tensor` receives the result and is returned."""
    return _reduce_run(tensor, tensor, name, _op_of(average, op), prescale_factor,
                       postscale_factor, process_set)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Start allreduces of a list of tensors enqueued (and fused) as one unit."""
    op = _op_of(average, op)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _reduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                         process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _op_of(average, op)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    return _reduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor,
                         process_set)


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.process_set = op, prescale, postscale, process_set
        return tuple(synchronize(grouped_allreduce_async(
            tensors, name=name, op=op, prescale_factor=prescale, postscale_factor=postscale,
            process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        outs = grouped_allreduce(list(grads), op=ctx.op, prescale_factor=ctx.prescale,
                                 postscale_factor=ctx.postscale, process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(outs)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """allreduce of every tensor of a list, negotiated and fused together."""
    op = _op_of(average, op)
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                     *[c for c, _ in pairs])
    return [compression.decompress(o, cctx) for o, (_, cctx) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduce a sparse COO tensor as Horovod does: allgather its indices and values (so the
    result holds every rank's entries, duplicates summed when coalesced); Average divides
    the values by the number of ranks. Returns a handle that, as in Horovod, is called to
    wait for the result (handle()); synchronize(handle) and poll(handle) work too."""
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse tensor")
    if op not in (Average, Sum):
        raise ValueError("sparse allreduce supports Average and Sum only")
    t = tensor.coalesce()
    indices = allgather_async(t.indices().t().contiguous(), name=f"{name}.indices",
                              process_set=process_set)
    values = allgather_async(t.values().contiguous(), name=f"{name}.values",
                             process_set=process_set)
    size = _ranks_size(_process_set_id(process_set))

    def finish(idx, val):
        if op == Average:
            val = val / size
        return torch.sparse_coo_tensor(idx.t(), val, t.shape)
    return _SparseHandle(indices, values, finish)


# ---- allgather ----

def _shaped(buf, counts, tensor):
    """The output tensor of an allocated allgather/alltoall: rows from every rank."""
    rest = tuple(tensor.shape[1:])
    row = 1
    for d in rest:
        row *= d
    total = sum(counts)
    if total == 0:
        out = torch.empty((0,) + rest, dtype=tensor.dtype)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the buffer is writable; torch warns regardless
            out = torch.frombuffer(buf, dtype=tensor.dtype).reshape((total // row if row else 0,)
                                                                    + rest)
    rows = [c // row if row else 0 for c in counts]
    return out, rows


def _allgather_async(tensors, name, process_set, grouped):
    ps = _process_set_id(process_set)
    base = _auto_name("allgather", name, ps)
    names = [f"{base}.{i}" for i in range(len(tensors))] if grouped else [base]
    items, finishes = [], []
    for tensor, n in zip(tensors, names):
        _check_cpu(tensor)
        if tensor.dim() == 0:
            raise ValueError("allgather of a 0-dimensional tensor: give it at least one "
                             "dimension (Horovod: rank zero tried to ALLGATHER a rank-zero tensor)")
        src = _contiguous(tensor)
        items.append(_item(n, src, None, src, ps=ps, allocate=True))
        finishes.append(lambda result, src=src: _shaped(result[0], result[1], src)[0])
    handles = _enqueue(_hvd.ALLGATHER, items)
    for h, f in zip(handles, finishes):
        _handles.put(h, f)
    return _Group(handles) if grouped else handles[0]


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Start concatenating every rank's `tensor` along the first dimension (which may differ
    between ranks; the others may not)."""
    return _allgather_async([tensor], name, process_set, False)


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        # Horovod: average the gradient over the ranks, then take this rank's rows
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        rows = synchronize(allgather_async(torch.tensor([ctx.rows]),
                                           process_set=ctx.process_set)).tolist()
        me = _hvd.process_set_rank(_process_set_id(ctx.process_set))
        start = sum(rows[:me])
        return reduced.narrow(0, start, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension, in rank order."""
    return _AllgatherFn.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather needs at least one tensor")
    return _allgather_async(tensors, name, process_set, True)


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        # as allgather's, tensor by tensor: the averaged gradient's rows of this rank
        reduced = grouped_allreduce(list(grads), op=Average, process_set=ctx.process_set)
        rows = grouped_allgather([torch.tensor([r]) for r in ctx.rows],
                                 process_set=ctx.process_set)
        me = _hvd.process_set_rank(_process_set_id(ctx.process_set))
        out = [g.narrow(0, sum(r.tolist()[:me]), n) for g, r, n in zip(reduced, rows, ctx.rows)]
        return (None, None) + tuple(out)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of every tensor of a list, negotiated together. Differentiable."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather needs at least one tensor")
    return list(_GroupedAllgatherFn.apply(name, process_set, *tensors))


# ---- broadcast ----

def _broadcast_async(tensor, output, root_rank, name, process_set):
    ps = _process_set_id(process_set)
    _check_cpu(tensor)
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError("root_rank must be an int")
    buf = output if output.is_contiguous() else torch.empty_like(
        output, memory_format=torch.contiguous_format)
    if buf is not tensor:
        buf.copy_(tensor)  # the root sends it; elsewhere it is overwritten
    item = _item(_auto_name("broadcast", name, ps), None, buf, buf, root=root_rank, ps=ps)
    handle = _enqueue(_hvd.BROADCAST, [item])[0]

    def finish(_):
        if buf is not output:
            output.copy_(buf)
        return output
    _handles.put(handle, finish)
    return handle


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Start copying root_rank's `tensor` to a new tensor on every rank."""
    return _broadcast_async(tensor, torch.empty_like(tensor, memory_format=torch.contiguous_format),
                            root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """broadcast_async into `tensor` itself."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        # Horovod: the gradients of every rank are averaged; only the root's input gets them
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        if _basics.rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor` on every rank (a new tensor). Differentiable."""
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """broadcast into `tensor` itself; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall ----

def _splits_tuple(splits, size):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dim() != 1:
            raise ValueError("alltoall expects a 1D splits tensor")
        if splits.dtype != torch.int32:
            raise ValueError("alltoall expects splits to contain 32-bit integer elements.")
        splits = splits.tolist()
    splits = tuple(int(s) for s in splits)
    if len(splits) != size:
        raise ValueError("Number of entries in splits does not equal number of workers.")
    return splits


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Start scattering slices of `tensor` (first dimension, `splits[j]` rows to rank j, or an
    even split) and gathering what every rank sends here. synchronize returns
    (output, received_splits)."""
    ps = _process_set_id(process_set)
    _check_cpu(tensor)
    if tensor.dim() == 0:
        raise ValueError("alltoall of a 0-dimensional tensor: give it at least one dimension")
    sp = _splits_tuple(splits, _ranks_size(ps))
    src = _contiguous(tensor)
    item = _item(_auto_name("alltoall", name, ps), src, None, src, splits=sp, ps=ps,
                 allocate=True)
    handle = _enqueue(_hvd.ALLTOALL, [item])[0]

    def finish(result, src=src):
        out, rows = _shaped(result[0], result[1], src)
        return out, torch.tensor(rows, dtype=torch.int32)
    _handles.put(handle, finish)
    return handle


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        out, _ = alltoall(grad, splits=ctx.received, process_set=ctx.process_set)
        return out, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatter slices of `tensor` to every rank and gather theirs. Returns the output, and
    with `splits` given also the rows received from each rank (as Horovod). Differentiable."""
    out, received = _AlltoallFn.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# ---- reducescatter ----

def _reducescatter_async(tensors, name, op, prescale_factor, postscale_factor, process_set,
                         grouped):
    ps = _process_set_id(process_set)
    if op not in (Average, Sum):
        # Horovod fails the enqueue (a RuntimeError), as for any other op it rejects
        raise RuntimeError("Reducescatter currently only supports AVERAGE and SUM.")
    size = _ranks_size(ps)
    me = _hvd.process_set_rank(ps) if ps else _basics.rank()
    base = _auto_name("reducescatter", name, ps)
    names = [f"{base}.{i}" for i in range(len(tensors))] if grouped else [base]
    items, finishes = [], []
    for tensor, n in zip(tensors, names):
        _check_cpu(tensor)
        if tensor.dim() == 0:
            raise ValueError("reducescatter of a 0-dimensional tensor: give it at least one "
                             "dimension")
        src = _contiguous(tensor)
        rows = src.shape[0] // size + (1 if me < src.shape[0] % size else 0)
        out = torch.empty((rows,) + tuple(src.shape[1:]), dtype=src.dtype)
        items.append(_item(n, src, out, src, op, prescale_factor, postscale_factor, ps=ps))
        finishes.append(lambda _, out=out, src=src: out)
    handles = _enqueue(_hvd.REDUCESCATTER, items)
    for h, f in zip(handles, finishes):
        _handles.put(h, f)
    return _Group(handles) if grouped else handles[0]


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Start reducing `tensor` over every rank and scattering the result by rows: rank r gets
    dim0 // size rows, one more for the first dim0 % size ranks."""
    return _reducescatter_async([tensor], name, op, prescale_factor, postscale_factor,
                                process_set, False)


def _reducescatter_grad_scale(grad, op, process_set, scale):
    """The factor Horovod 0.28.1 applies to a reducescatter's gradient before gathering it:
    the set's size for Sum (1 for Average), times the pre- and postscale factors."""
    if op == Sum:
        scale = scale * _ranks_size(_process_set_id(process_set))
    return grad * scale if scale != 1.0 else grad


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.op, ctx.process_set, ctx.scale = op, process_set, prescale * postscale
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale,
                                               postscale))

    @staticmethod
    def backward(ctx, grad):
        g = _reducescatter_grad_scale(grad, ctx.op, ctx.process_set, ctx.scale)
        return allgather(g, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce `tensor` over every rank and return this rank's rows of the result."""
    compressed, cctx = compression.compress(tensor)
    out = _ReducescatterFn.apply(compressed, name, op, process_set, prescale_factor,
                                 postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_reducescatter needs at least one tensor")
    return _reducescatter_async(tensors, name, op, prescale_factor, postscale_factor,
                                process_set, True)


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.op, ctx.process_set, ctx.scale = op, process_set, prescale * postscale
        return tuple(synchronize(grouped_reducescatter_async(tensors, name, op, process_set,
                                                             prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        scaled = [_reducescatter_grad_scale(g, ctx.op, ctx.process_set, ctx.scale)
                  for g in grads]
        return (None,) * 5 + tuple(grouped_allgather(scaled, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of every tensor of a list, negotiated together. Differentiable."""
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatterFn.apply(name, op, process_set, prescale_factor,
                                         postscale_factor, *[c for c, _ in pairs])
    return [compression.decompress(o, cctx) for o, (_, cctx) in zip(outs, pairs)]


# ---- join and barrier ----

def join(device=-1):
    """For a rank out of data: take part with zeros in the others' allreduces until every rank
    has joined; returns the rank that joined last."""
    try:
        return _hvd.join()
    except HorovodInternalError:
        raise
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from None


def barrier(process_set=global_process_set):
    """Return once every rank of the process set has called barrier."""
    try:
        _hvd.barrier(_process_set_id(process_set))
    except HorovodInternalError:
        raise
    except RuntimeError as e:
        raise HorovodInternalError(str(e)) from None


def _reset_handles():
    """Forget every pending handle (after shutdown: their operations failed or ended)."""
    _handles.clear()
    with _noname_lock:
        _noname_counters.clear()  # a new job (elastic: a new world) numbers from the start
