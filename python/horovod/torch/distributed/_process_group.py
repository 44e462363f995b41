"""ProcessGroupHvd: every torch.distributed collective and point-to-point call as named
operations of libhvd's engine.
"""
import sys
import threading
import time
import warnings

import torch
from torch.distributed import distributed_c10d as _c10d

from horovod import _hvd
from horovod.torch import mpi_ops as _ops

from horovod.torch.distributed._common import (BACKEND, _BITWISE, _CYCLE_TEXT, _HVD_OPS,
                                               _HVD_OPS_BY_HASH, _NAME_CYCLE, _ProcessGroup,
                                               _RedOp, _op_key)
from horovod.torch.distributed._work import (_PASSED_FILES, _AllWork, _DONE, _DTYPE_NAMES,
                                             _KIND_NAMES, _OP_NAMES, _as_error, _waited_at_once,
                                             _work)


# (frames of this file stand between torch.distributed and the Work too: _work skips them)
_PASSED_FILES.add(sys._getframe(0).f_code.co_filename)


# ---- the process group --------------------------------------------------------------------

_DTYPE_CODES = _ops._DTYPES


def _dtype(tensor, what):
    try:
        return _DTYPE_CODES[tensor.dtype]
    except KeyError:
        raise RuntimeError(f"hvd backend: {what} does not support {tensor.dtype} tensors "
                           "(float16, bfloat16, float32, float64, uint8, int8, int16, int32, "
                           "int64 and bool are)") from None


def _check(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"hvd backend: {what} takes tensors, got {type(tensor).__name__}")
    if not tensor.is_cpu:
        raise RuntimeError(f"hvd backend: {what} runs on CPU tensors; this one is on "
                           f"{tensor.device}")
    if tensor.is_sparse:
        raise RuntimeError(f"hvd backend: {what} does not support sparse tensors")
    _dtype(tensor, what)


def _flat(tensor):
    """A contiguous 1-D tensor with tensor's elements (tensor itself viewed when it can be)."""
    return tensor.contiguous().view(-1) if tensor.dim() else tensor.contiguous().view(1)


def _in_place(tensors):
    """Contiguous 1-D buffers for tensors that libhvd writes in place (each tensor itself,
    viewed, when it is contiguous), and the finish that copies the results into the tensors
    that are not their own buffers."""
    bufs = [_flat(t) for t in tensors]

    def finish(_):
        for t, b in zip(tensors, bufs):
            if b.data_ptr() != t.data_ptr() or not t.is_contiguous():
                t.copy_(b.view(t.shape))
        return tensors
    return bufs, finish


# monitored_barrier's point-to-point tags: far above those programs use, one per call
_MONITORED_TAG = 1 << 30
_MONITORED_TAGS = 1 << 20


def _wait_some(works, deadline, stop_at_first):
    """Poll works (key -> Work) until all are complete or the deadline passes, and return the
    sorted keys of those still incomplete then (only the lowest with stop_at_first). A
    complete one that failed raises its error."""
    pending = sorted(works)
    while pending:
        pending = [k for k in pending if not works[k].is_completed()]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.001)
    for k in sorted(works):
        if k not in pending:
            works[k].wait()  # (raises a failed message's error)
    return pending[:1] if stop_at_first else pending


class ProcessGroupHvd(_ProcessGroup):
    """A torch.distributed process group over libhvd: the world (process set 0) or a group made
    by new_group (an hvd process set)."""

    def __init__(self, rank, size, pset, global_ranks, group_id, timeout=None):
        super().__init__(rank, size)
        self._pset = pset
        self._global = list(global_ranks)  # group rank -> global rank
        self._prefix = f"dist.{group_id or 'world'}"  # (of its engine names and keys)
        self._bases = {}     # signature -> the start of its engine names (_name)
        self._inflight = {}  # name -> the handle that last had it
        self._lock = threading.Lock()
        self._timeout = timeout or _c10d.default_pg_timeout  # (monitored_barrier's default)
        # every collective's deadline in libhvd: past it, its error names the ranks that never
        # called it and what they do instead
        self._timeout_ms = min(int(self._timeout.total_seconds() * 1000), 2**31 - 1)
        self._seq = 0        # collectives posted so far (_next)
        self._monitored = 0  # monitored barriers so far (their message tags)

    # torch asks the backend its name through either of these
    def getBackendName(self):
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    # -- plumbing

    def _next(self):
        """The place of the group's next collective in the order every member calls the
        group's collectives in (1, 2, ...)."""
        with self._lock:
            self._seq += 1
            return self._seq

    def _name(self, kind, item, i, n, seq):
        """The engine's name of item i of n of the group's collective number seq: what it is,
        in torch.distributed's words (only what every rank agrees on: alltoall's shapes
        differ), so that libhvd's stall warnings and timeline read as the program does, and
        seq modulo _NAME_CYCLE, so that a training loop's operations come round to the same
        names (libhvd's response cache) and the ranks name a collective alike whatever came
        before it (an earlier failure included): "dist.0:all_reduce(float32[4], SUM)#3"."""
        _, _, _, dtype, shape, op, _, _, root, _, _, _ = item
        sig = (kind, dtype, None if kind == _hvd.ALLTOALL else shape, op, root, i, n)
        base = self._bases.get(sig)
        if base is None:
            args = _DTYPE_NAMES.get(dtype, str(dtype))
            if sig[2] is not None:
                args += f"[{', '.join(map(str, shape))}]"
            if kind in (_hvd.ALLREDUCE, _hvd.REDUCESCATTER):
                args += f", {_OP_NAMES.get(op, op)}"
            elif kind == _hvd.BROADCAST:
                args += f", src={self._global.index(root) if root in self._global else root}"
            part = f"[{i}/{n}]" if n > 1 else ""
            base = self._bases[sig] = (
                f"{self._prefix}:{_KIND_NAMES.get(kind, kind)}({args}){part}#")
        return base + _CYCLE_TEXT[seq % _NAME_CYCLE]

    def _keys(self, n, seq):
        """The engine's keys of the group's collective number seq (of n items): members that
        call different collectives there are told at once (libhvd's hvd_enqueue_ex)."""
        key = f"{self._prefix}#{seq}"
        return [key] if n == 1 else [f"{key}.{i}" for i in range(n)]

    def _reuse(self, name):
        """Wait until the operation that had name last on this rank is done: a name may be in
        flight once (all ranks posted the earlier one already, so it completes)."""
        h = self._inflight.get(name)
        while h is not None:
            try:
                if _hvd.poll(h):
                    break
            except ValueError:  # released already: done
                break
            time.sleep(0.0005)

    def _item(self, name, send, recv, like, op=_hvd.SUM, root=0, splits=None, allocate=False):
        return (name, send.data_ptr() if send is not None else 0,
                recv.data_ptr() if recv is not None else 0, _dtype(like, "this operation"),
                tuple(like.shape), op, 1.0, 1.0, int(root), splits, self._pset, bool(allocate))

    def _post(self, kind, items, finish, keep, then=None):
        """Enqueue items atomically; the returned Work completes with finish(results) (then
        then(that), when given). keep: what must stay alive until libhvd is done (buffers it
        reads or writes)."""
        n, seq = len(items), self._next()
        items = [(self._name(kind, it, i, n, seq),) + it[1:] for i, it in enumerate(items)]
        for it in items:
            self._reuse(it[0])
        try:
            handles = _hvd.enqueue(kind, items, self._timeout_ms, self._keys(n, seq))
        except ValueError as e:
            raise ValueError(f"hvd backend: {e}") from None
        inflight, lock = self._inflight, self._lock
        names = [it[0] for it in items]
        for name, h in zip(names, handles):
            inflight[name] = h

        def done(results, keep=keep):
            # these operations are over: a later _reuse of their names need not ask libhvd
            # about released handles (an error raised and caught, 2 us a call)
            with lock:
                for name, h in zip(names, handles):
                    if inflight.get(name) == h:
                        del inflight[name]
            value = finish(results)
            return then(value) if then is not None else value
        return _work(handles, done)

    def _root(self, root, what):
        if not 0 <= root < self.size():
            raise ValueError(f"hvd backend: {what}: root {root} is not a rank of this group of "
                             f"{self.size()}")
        return self._global[root]

    # -- allreduce

    def _allreduce(self, tensors, op, what, then=None):
        for t in tensors:
            _check(t, what)
        hop = _HVD_OPS_BY_HASH.get(hash(op)) if type(op) is _RedOp else None
        if hop is None:
            key = _op_key(op)
            if key in _BITWISE:
                return self._bitwise_allreduce(tensors, _BITWISE[key], what, then)
            if key not in _HVD_OPS:
                raise RuntimeError(f"hvd backend: {what} does not support the reduce op {op}")
            hop = _HVD_OPS[key]
        if len(tensors) == 1 and tensors[0].is_contiguous():
            # the common case, DDP's buckets and dist.all_reduce: in place, nothing to copy
            t = tensors[0]
            ptr = t.data_ptr()
            item = (None, ptr, ptr, _DTYPE_CODES[t.dtype], (t.numel(),), hop, 1.0, 1.0, 0, None,
                    self._pset, False)
            return self._post(_hvd.ALLREDUCE, [item], lambda _: tensors, tensors, then)
        bufs, finish = _in_place(tensors)
        items = [self._item(None, b, b, b, op=hop) for b in bufs]
        return self._post(_hvd.ALLREDUCE, items, finish, (tensors, bufs), then)

    def _bitwise_allreduce(self, tensors, fn, what, then=None):
        for t in tensors:
            if t.is_floating_point():
                raise RuntimeError(f"hvd backend: {what}: bitwise reductions take integer or "
                                   f"bool tensors, not {t.dtype}")
        size = self.size()
        srcs = [_flat(t) for t in tensors]
        outs = [torch.empty(size * s.numel(), dtype=s.dtype) for s in srcs]
        names = [None] * len(tensors)
        items = [self._item(n, s, o, s) for n, s, o in zip(names, srcs, outs)]

        def finish(_, tensors=tensors, outs=outs):
            for t, o in zip(tensors, outs):
                rows = o.view(size, -1)
                acc = rows[0].clone()
                for r in range(1, size):
                    acc = fn(acc, rows[r])
                t.copy_(acc.view(t.shape))
            return tensors
        return self._post(_hvd.ALLGATHER, items, finish, (srcs, outs), then)

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            raise RuntimeError("hvd backend: allreduce takes one tensor per process (use "
                               "all_reduce_coalesced for several)")
        op = _RedOp.SUM if opts is None else getattr(opts, "reduceOp", opts)
        t = tensors[0]
        if type(op) is _RedOp and _waited_at_once() and type(t) is torch.Tensor and \
                t.is_cpu and not t.is_sparse and t.is_contiguous():
            hop, code = _HVD_OPS_BY_HASH.get(hash(op)), _DTYPE_CODES.get(t.dtype)
            if hop is not None and code is not None:
                return self._allreduce_now(t, hop, code)
        return self._allreduce(tensors, op, "all_reduce")

    def _allreduce_now(self, t, hop, code):
        """dist.all_reduce without async_op: the operation, run to its end here (enqueue
        and wait in one call into libhvd), and a Work that is done. The Work torch would
        wait for at once and drop cost more than the rest of the call (5 of ~17 us at np
        1, 2026-11-28); a failure raises from here, where torch's wait() would have."""
        ptr = t.data_ptr()
        item = (None, ptr, ptr, code, (t.numel(),), hop, 1.0, 1.0, 0, None, self._pset, False)
        seq = self._next()
        name = self._name(_hvd.ALLREDUCE, item, 0, 1, seq)
        self._reuse(name)
        with self._lock:  # (its previous operation is over: _reuse saw to it)
            self._inflight.pop(name, None)
        try:
            _hvd.run(_hvd.ALLREDUCE, (name,) + item[1:], self._timeout_ms, self._keys(1, seq)[0])
        except ValueError as e:
            raise ValueError(f"hvd backend: {e}") from None
        except RuntimeError as e:
            raise _as_error(e) from None
        return _DONE

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else _RedOp.SUM
        return self._allreduce(list(tensors), op, "all_reduce_coalesced")

    # -- broadcast

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        root = opts.rootRank if opts is not None else 0
        groot = self._root(root, "broadcast")
        for t in tensors:
            _check(t, "broadcast")
        bufs, finish = _in_place(tensors)
        items = [self._item(None, b, b, b, root=groot) for b in bufs]
        return self._post(_hvd.BROADCAST, items, finish, (tensors, bufs))

    # -- allgather and gather

    def _gather_into(self, outputs_per_input, inputs, what):
        """Allgather each input; outputs_per_input[i] is the list of size tensors it fills
        (None: this rank keeps nothing, as gather's non-root ranks)."""
        size = self.size()
        for t in inputs:
            _check(t, what)
        srcs = [_flat(t) for t in inputs]
        outs = [torch.empty(size * s.numel(), dtype=s.dtype) for s in srcs]
        names = [None] * len(inputs)
        items = [self._item(n, s, o, s) for n, s, o in zip(names, srcs, outs)]

        def finish(_, outs=outs):
            if outputs_per_input is None:
                return []
            done = []
            for lst, o in zip(outputs_per_input, outs):
                rows = o.view(size, -1)
                for r, t in enumerate(lst):
                    t.copy_(rows[r].view(t.shape))
                done.extend(lst)
            return done
        return self._post(_hvd.ALLGATHER, items, finish, (srcs, outs))

    def _check_outputs(self, outputs, inputs, what):
        if len(outputs) != len(inputs):
            raise RuntimeError(f"hvd backend: {what}: {len(outputs)} output lists for "
                               f"{len(inputs)} inputs")
        for lst, t in zip(outputs, inputs):
            if len(lst) != self.size():
                raise RuntimeError(f"hvd backend: {what}: the output list has {len(lst)} "
                                   f"tensors; the group has {self.size()} ranks")
            for o in lst:
                _check(o, what)
                if o.numel() != t.numel() or o.dtype != t.dtype:
                    raise RuntimeError(f"hvd backend: {what}: every output tensor must have "
                                       f"the input's size and dtype ({t.numel()} {t.dtype}); "
                                       f"got {o.numel()} {o.dtype}")

    def allgather(self, output_tensors, input_tensors, opts=None):
        self._check_outputs(output_tensors, input_tensors, "all_gather")
        return self._gather_into(output_tensors, input_tensors, "all_gather")

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        self._check_outputs(output_lists, input_list, "all_gather_coalesced")
        return self._gather_into(output_lists, input_list, "all_gather_coalesced")

    def _check_whole(self, whole, part, what, role):
        """whole (the role tensor of what) must hold one part per rank of the group."""
        _check(whole, what)
        _check(part, what)
        if whole.numel() != self.size() * part.numel() or whole.dtype != part.dtype:
            raise RuntimeError(f"hvd backend: {what}: the {role} must hold {self.size()} x "
                               f"{part.numel()} {part.dtype} elements; it has {whole.numel()} "
                               f"{whole.dtype}")

    def _allgather_base(self, output, input, opts=None):
        self._check_whole(output, input, "all_gather_into_tensor", "output")
        src = _flat(input)
        out = _flat(output)
        name = None

        def finish(_, output=output, out=out):
            if out.data_ptr() != output.data_ptr() or not output.is_contiguous():
                output.copy_(out.view(output.shape))
            return [output]
        return self._post(_hvd.ALLGATHER, [self._item(name, src, out, src)], finish, (src, out))

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._root(root, "gather")
        if self.rank() == root:
            self._check_outputs(output_tensors, input_tensors, "gather")
        elif output_tensors and any(output_tensors):
            raise RuntimeError("hvd backend: gather: only the root passes output tensors")
        return self._gather_into(output_tensors if self.rank() == root else None, input_tensors,
                                 "gather")

    # -- scatter, reduce, reduce_scatter, all_to_all

    def _alltoall_rows(self, send, splits, output, what, then=None):
        """alltoall of send's rows (splits rows to each group rank) into output (flat copy of
        what every rank sent here, in rank order)."""
        name = None
        item = self._item(name, send, None, send, splits=tuple(int(s) for s in splits),
                          allocate=True)

        def finish(results, output=output, send=send):
            buf, counts = results[0]
            got = sum(counts)
            if got != output.numel():
                raise RuntimeError(f"hvd backend: {what}: {got} elements arrived for an output "
                                   f"of {output.numel()}")
            if got:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    flat = torch.frombuffer(buf, dtype=output.dtype)
                output.copy_(flat.view(output.shape))
            return [output]
        return self._post(_hvd.ALLTOALL, [item], finish, (send, output), then)

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._root(root, "scatter")
        if len(output_tensors) != 1:
            raise RuntimeError("hvd backend: scatter takes one output tensor")
        out = output_tensors[0]
        _check(out, "scatter")
        size = self.size()
        if self.rank() == root:
            if len(input_tensors) != 1 or len(input_tensors[0]) != size:
                raise RuntimeError(f"hvd backend: scatter: the root passes a list of {size} "
                                   "tensors")
            for t in input_tensors[0]:
                _check(t, "scatter")
                if t.numel() != out.numel() or t.dtype != out.dtype:
                    raise RuntimeError("hvd backend: scatter: every tensor of the list must "
                                       f"have the output's size and dtype ({out.numel()} "
                                       f"{out.dtype})")
            send = torch.cat([_flat(t) for t in input_tensors[0]])
            splits = [out.numel()] * size
        else:
            send = torch.empty(0, dtype=out.dtype)
            splits = [0] * size
        return self._alltoall_rows(send, splits, out, "scatter")

    def reduce(self, tensors, opts=None):
        if len(tensors) != 1:
            raise RuntimeError("hvd backend: reduce takes one tensor")
        root = opts.rootRank if opts is not None else 0
        self._root(root, "reduce")
        op = opts.reduceOp if opts is not None else _RedOp.SUM
        t = tensors[0]
        if self.rank() == root:
            return self._allreduce([t], op, "reduce")
        scratch = t.detach().clone()  # the non-root ranks' tensors stay as they were
        return self._allreduce([scratch], op, "reduce")

    def _reduce_scatter_flat(self, output, send, op, what):
        """output (n elements) receives this rank's block of the reduction of send (size * n)."""
        key = _op_key(op)
        n, rank = output.numel(), self.rank()
        if _HVD_OPS.get(key) in (_hvd.SUM, _hvd.AVERAGE):
            out = _flat(output)
            name = None
            item = self._item(name, send, out, send, op=_HVD_OPS[key])

            def finish(_, output=output, out=out):
                if out.data_ptr() != output.data_ptr() or not output.is_contiguous():
                    output.copy_(out.view(output.shape))
                return [output]
            return self._post(_hvd.REDUCESCATTER, [item], finish, (send, out))
        # other ops: the whole reduction, then this rank's block
        whole = send.clone()
        return self._allreduce([whole], op, what, then=lambda _, output=output, whole=whole: [
            output.copy_(whole[rank * n:(rank + 1) * n].view(output.shape))])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if len(output_tensors) != 1 or len(input_tensors) != 1:
            raise RuntimeError("hvd backend: reduce_scatter takes one output and one list")
        out, lst = output_tensors[0], input_tensors[0]
        _check(out, "reduce_scatter")
        if len(lst) != self.size():
            raise RuntimeError(f"hvd backend: reduce_scatter: the input list has {len(lst)} "
                               f"tensors; the group has {self.size()} ranks")
        for t in lst:
            _check(t, "reduce_scatter")
            if t.numel() != out.numel() or t.dtype != out.dtype:
                raise RuntimeError("hvd backend: reduce_scatter: every input must have the "
                                   f"output's size and dtype ({out.numel()} {out.dtype})")
        send = torch.cat([_flat(t) for t in lst])
        op = opts.reduceOp if opts is not None else _RedOp.SUM
        return self._reduce_scatter_flat(out, send, op, "reduce_scatter")

    def _reduce_scatter_base(self, output, input, opts=None):
        self._check_whole(input, output, "reduce_scatter_tensor", "input")
        op = opts.reduceOp if opts is not None else _RedOp.SUM
        return self._reduce_scatter_flat(output, _flat(input), op, "reduce_scatter_tensor")

    def alltoall(self, output_tensors, input_tensors, opts=None):
        size = self.size()
        if len(output_tensors) != size or len(input_tensors) != size:
            raise RuntimeError(f"hvd backend: all_to_all takes {size} input and {size} output "
                               "tensors")
        for t in list(output_tensors) + list(input_tensors):
            _check(t, "all_to_all")
        send = torch.cat([_flat(t) for t in input_tensors])
        splits = [t.numel() for t in input_tensors]
        total = sum(t.numel() for t in output_tensors)
        staging = torch.empty(total, dtype=input_tensors[0].dtype)
        def scatter_out(_, outs=output_tensors, staging=staging):
            pos = 0
            for o in outs:
                o.copy_(staging[pos:pos + o.numel()].view(o.shape))
                pos += o.numel()
            return list(outs)
        return self._alltoall_rows(send, splits, staging, "all_to_all", then=scatter_out)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _check(output, "all_to_all_single")
        _check(input, "all_to_all_single")
        size = self.size()
        if input.dim() == 0:
            raise RuntimeError("hvd backend: all_to_all_single takes tensors of at least one "
                               "dimension")
        rows = input.shape[0]
        if not input_split_sizes:
            if rows % size:
                raise RuntimeError(f"hvd backend: all_to_all_single: {rows} rows do not split "
                                   f"evenly among {size} ranks; pass input_split_sizes")
            input_split_sizes = [rows // size] * size
        if len(input_split_sizes) != size or sum(input_split_sizes) != rows:
            raise RuntimeError(f"hvd backend: all_to_all_single: input_split_sizes "
                               f"{list(input_split_sizes)} must have {size} entries summing to "
                               f"the input's {rows} rows")
        if output_split_sizes and (len(output_split_sizes) != size or
                                   sum(output_split_sizes) != output.shape[0]):
            raise RuntimeError(f"hvd backend: all_to_all_single: output_split_sizes "
                               f"{list(output_split_sizes)} must have {size} entries summing to "
                               f"the output's {output.shape[0]} rows")
        send = input.contiguous()
        return self._alltoall_rows(send, input_split_sizes, output, "all_to_all_single")

    # torch 2's names for the operations above (its dist functions call these; the base
    # class's would look for a C++ backend, which a Python process group has not)

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._each(outputs, inputs, self._allgather_base, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._each(outputs, inputs, self._reduce_scatter_base, opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def _each(self, outputs, inputs, fn, opts):
        """One operation per pair, and a Work that waits for them all (libhvd fuses what
        arrives together)."""
        if len(outputs) != len(inputs):
            raise RuntimeError(f"hvd backend: {len(outputs)} outputs for {len(inputs)} inputs")
        works = [fn(o, i, opts) for o, i in zip(outputs, inputs)]
        return _AllWork(works, list(outputs))

    # -- barrier

    def barrier(self, opts=None):
        token = torch.zeros(1, dtype=torch.int32)
        name = None
        return self._post(_hvd.ALLREDUCE, [self._item(name, token, token, token)],
                          lambda _: [token], token)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """gloo's monitored barrier, as torch.distributed.monitored_barrier documents it:
        every rank reports to rank 0 of the group, which acknowledges once all have; one that
        has not reported within timeout fails rank 0's call, naming it (all of them with
        wait_all_ranks), and the others' calls fail for want of rank 0's acknowledgement. Point
        to point messages with a tag of their own per call (torch.distributed refuses this call
        for any backend but gloo: horovod.torch.distributed routes it here for hvd's groups)."""
        seconds = (timeout or self._timeout).total_seconds()
        deadline = time.monotonic() + seconds
        tag = _MONITORED_TAG + self._monitored % _MONITORED_TAGS
        self._monitored += 1
        ms = int(seconds * 1000)
        if self.rank() == 0:
            slots = {r: torch.zeros(1, dtype=torch.int32) for r in range(1, self.size())}
            works = {r: self._p2p([t], r, tag, False) for r, t in slots.items()}
            missing = _wait_some(works, deadline, stop_at_first=not wait_all_ranks)
            if missing:
                who = (f"Ranks {', '.join(map(str, missing))}" if len(missing) > 1 else
                       f"Rank {missing[0]}")
                raise RuntimeError(f"hvd backend: {who} failed to pass monitoredBarrier in "
                                   f"{ms} ms (group of {self.size()}; rank 0 waited)")
            for r in slots:
                self._p2p([torch.ones(1, dtype=torch.int32)], r, tag, True)
        else:
            self._p2p([torch.ones(1, dtype=torch.int32)], 0, tag, True)
            ack = self._p2p([torch.zeros(1, dtype=torch.int32)], 0, tag, False)
            if _wait_some({0: ack}, deadline, stop_at_first=True):
                raise RuntimeError(f"hvd backend: rank {self.rank()}: no acknowledgement from "
                                   f"rank 0 within {ms} ms in monitoredBarrier: a rank of the "
                                   "group failed to reach it (rank 0's error names it)")

    # -- point to point

    def _p2p(self, tensors, peer, tag, send):
        what = "send" if send else "recv"
        if len(tensors) != 1:
            raise RuntimeError(f"hvd backend: {what} takes one tensor")
        t = tensors[0]
        _check(t, what)
        if not 0 <= peer < self.size() or peer == self.rank():
            raise ValueError(f"hvd backend: {what}: {peer} is not another rank of this group "
                             f"of {self.size()}")
        buf = _flat(t) if send else (t.view(-1) if t.is_contiguous() and t.dim() else
                                     torch.empty(t.numel(), dtype=t.dtype))
        post = _hvd.send if send else _hvd.recv
        try:
            handle = post(buf.data_ptr(), buf.numel(), _dtype(t, what), self._global[peer],
                          int(tag), self._timeout_ms)
        except ValueError as e:
            raise ValueError(f"hvd backend: {what}: {e}") from None

        def finish(_, t=t, buf=buf):
            if not send and buf.data_ptr() != t.data_ptr():
                t.copy_(buf.view(t.shape))
            return [t]
        return _work([handle], finish)

    def send(self, tensors, dst, tag=0):
        return self._p2p(tensors, dst, tag, True)

    def recv(self, tensors, src, tag=0):
        return self._p2p(tensors, src, tag, False)

    def recv_anysource(self, tensors, tag):
        raise RuntimeError("hvd backend: recv from any source is not supported; name the "
                           "source rank")
