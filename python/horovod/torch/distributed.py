"""hvd as a torch.distributed backend: `dist.init_process_group("hvd")`.

Importing `horovod.torch` (or this module alone) registers the backend "hvd". A DDP script
written for gloo then runs on libhvd's transports by changing that one string:

    import horovod.torch  # registers "hvd"
    dist.init_process_group("hvd")

Where the world comes from:
 - under horovodrun, or after `hvd.init()`: the job's (hvd's rank and size; torch's must agree);
 - under torchrun or any env:// launcher, or with `store=`: libhvd forms its world through the
   c10d store torch hands the backend (hvd_init_store: every rank's data-plane address is
   exchanged there). The data plane authenticates with a job secret which rank 0 publishes in
   that store, unless HVD_SECRET_FILE (or _HOROVOD_SECRET_KEY) gives every rank the same one
   out of band.

Every collective becomes named operations of libhvd's engine (torch issues a group's
collectives in the same order on every member, so a per-group counter names them alike on
every rank), and its Work completes through a future that a completion thread fulfils as soon
as libhvd is done, whether or not anyone waits: DDP's bucket allreduces overlap the backward
pass as they do on gloo. `new_group(ranks)` is backed by an hvd process set.
"""
import atexit
import datetime
import importlib
import importlib.util
import inspect
import os
import re
import socket
import sys
import threading
import time
import warnings
from collections import deque
from urllib.parse import urlparse

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from horovod import _hvd
from horovod.common.basics import _basics
from horovod.torch import mpi_ops as _ops
from horovod.torch import store_attempt

# (torch.distributed.rendezvous, the attribute, is the function; this is its module)
_rdv = importlib.import_module("torch.distributed.rendezvous")

BACKEND = "hvd"
# How many operations of one signature may be in flight before a name comes round again
# (a later one then waits for the earlier to complete, ProcessGroupHvd._reuse).
_NAME_CYCLE = 16
_CYCLE_TEXT = [str(k) for k in range(_NAME_CYCLE)]

_ProcessGroup = torch._C._distributed_c10d.ProcessGroup
_Work = torch._C._distributed_c10d.Work
_work_from_future = torch._C._distributed_c10d._create_work_from_future
_RedOp = dist.ReduceOp

def _op_key(op):
    """A ReduceOp or its RedOpType, as a key of the tables below: the RedOpType (a ReduceOp
    wraps it as .op; torch 2's dist.ReduceOp.SUM is the RedOpType itself, torch 1.13's a
    ReduceOp, and neither version compares the two forms as dict keys)."""
    return getattr(op, "op", op)


# torch's reduce ops that libhvd runs itself
_OPS = [(_RedOp.SUM, _hvd.SUM), (_RedOp.PRODUCT, _hvd.PRODUCT), (_RedOp.MIN, _hvd.MIN),
        (_RedOp.MAX, _hvd.MAX)]
if hasattr(_RedOp, "AVG"):
    _OPS.append((_RedOp.AVG, _hvd.AVERAGE))
_HVD_OPS = {_op_key(k): v for k, v in _OPS}
# the bitwise ops, done locally over an allgather (integers and bool only)
_BITWISE_OPS = [(_RedOp.BAND, torch.bitwise_and), (_RedOp.BOR, torch.bitwise_or),
                (_RedOp.BXOR, torch.bitwise_xor)]
_BITWISE = {_op_key(k): v for k, v in _BITWISE_OPS}

# The same by the ReduceOp's hash, which is its op type: looking a ReduceOp up in _HVD_OPS
# takes an attribute and a comparison in Python (1.6 us a call), hashing it is 0.3. Empty
# (every lookup takes the long way) should a torch hash two of them alike.
_HVD_OPS_BY_HASH = {hash(k): v for k, v in _OPS}
if len(_HVD_OPS_BY_HASH) != len(_OPS) or \
        any(hash(k) in _HVD_OPS_BY_HASH for k, _ in _BITWISE_OPS):
    _HVD_OPS_BY_HASH = {}


# ---- the completion thread: Work futures complete when libhvd is done -----------------------

class _Completer:
    """Waits for every operation's handles in the order they were posted and completes each
    operation's future (libhvd's engine progresses them all meanwhile).

    A future's callbacks run inside set_result, and may themselves wait for a later
    operation (PowerSGD's hook does): so the thread that completes a future first hands the
    waiting on to another thread (leader and followers), and no callback can hold up the
    operations behind it."""

    def __init__(self):
        lock = threading.Lock()
        self._cv = threading.Condition(lock)
        self._drained = threading.Condition(lock)  # quiesce waits here, not woken by submit
        self._queue = deque()
        self._leading = False  # a thread is waiting for the head of the queue
        self._idle = 0         # threads parked, ready to lead
        self._busy = 0         # threads between taking an operation and completing its future

    def submit(self, handles, finish, fut):
        if sys.is_finalizing():
            # no thread starts any more (Thread.start waits for ever): a Work dropped unwaited
            # at the end of the script is waited for here (bounded by its deadline)
            _complete(fut, *_outcome(handles, finish))
            return
        with self._cv:
            self._queue.append((handles, finish, fut))
            if not self._leading:
                self._wake_locked()

    def _wake_locked(self):
        if self._idle:
            self._cv.notify()
        else:
            threading.Thread(target=self._run, name="hvd-dist-completion", daemon=True).start()

    def _run(self):
        while True:
            with self._cv:
                while self._leading or not self._queue:
                    self._idle += 1
                    self._cv.wait()
                    self._idle -= 1
                self._leading = True
                self._busy += 1
                handles, finish, fut = self._queue.popleft()
            try:
                # Resting: this thread waits while the training threads compute (DDP's
                # buckets during the backward pass); busy-polling here took their cores
                # (np 2 DDP step, three interleaved runs: 326-345 img/s spinning, 364-373
                # resting, 2026-11-27).
                value, error = finish(_wait_all(handles, _hvd.wait_resting)), None
            except BaseException as e:  # noqa: B902 (every failure goes to the future)
                value, error = None, _as_error(e)
            with self._cv:
                self._leading = False
                if self._queue:
                    self._wake_locked()
            try:
                if error is not None:  # (callbacks run here, while another thread leads)
                    fut.set_exception(error)
                else:
                    fut.set_result(value)
            finally:
                with self._cv:
                    self._busy -= 1
                    self._drained.notify_all()

    def quiesce(self, timeout):
        """Wait (at most timeout seconds) until no operation is queued and no thread is
        completing a future. At interpreter exit: a daemon thread still inside a future's
        C++ callbacks when Python finalizes is ended by pthread_exit, whose unwinding through
        C++ code that may not throw aborts the process ("terminate called without an active
        exception") after a script that succeeded. Parked threads wait in a Python lock,
        where ending them is harmless."""
        with self._drained:
            return self._drained.wait_for(lambda: not self._queue and not self._busy, timeout)


_completer = _Completer()


def _wait_all(handles, wait=_hvd.wait):
    """Every handle's result; each is waited for (and so released) even after one failed,
    and then the first failure is raised."""
    results, error = [], None
    for h in handles:
        try:
            results.append(wait(h))
        except RuntimeError as e:
            error = error or e
            results.append(None)
    if error:
        raise error
    return results


def _as_error(e):
    """The RuntimeError a Work raises for e: its message in torch.distributed's terms (the
    engine names operations by their engine names), without the completion thread's frames
    (which torch would print under it)."""
    text = str(e)
    if "'dist." in text or "'p2p:" in text:
        e = RuntimeError(_in_user_terms(text))
    return (e if isinstance(e, RuntimeError) else RuntimeError(text)).with_traceback(None)


# The engine's names of the backend's operations (ProcessGroupHvd._name) and keys (_keys), as
# libhvd's messages quote them, with what it may say of them: "ALLREDUCE 'name' (...)".
_ENGINE_OP = re.compile(r"(?:[A-Z]+ )?'dist\.[^':#]+:([a-z_]+\([^']*\))(?:\[\d+/\d+\])?#\d+"
                        r"(?:@ps\d+)?'(?: \([^)]*\))?")
_ENGINE_KEY = re.compile(r"'dist\.([^'.#:]+)#(\d+)(?:\.\d+)?'")
_ENGINE_P2P = re.compile(r"(?:P2P )?'p2p:(\d+)->(\d+):tag=(\d+):#(\d+)'(?: \([^)]*\))?")
_KIND_NAMES = {_hvd.ALLREDUCE: "all_reduce", _hvd.ALLGATHER: "all_gather",
               _hvd.BROADCAST: "broadcast", _hvd.ALLTOALL: "all_to_all",
               _hvd.REDUCESCATTER: "reduce_scatter"}
_OP_NAMES = {getattr(_hvd, n): n for n in ("SUM", "AVERAGE", "MIN", "MAX", "PRODUCT")
             if hasattr(_hvd, n)}
_DTYPE_NAMES = {code: str(dt).replace("torch.", "") for dt, code in _ops._DTYPES.items()}


def _in_user_terms(text):
    """libhvd's message with the backend's operations as torch.distributed calls them
    ("all_reduce(float32[4], SUM)", "collective #3 of the default group")."""
    def key(m):  # (torch 2 names the default group "0"; torch 1.13 gives no name)
        group = ("the default group" if m.group(1) in ("world", "0") else
                 f"group {m.group(1)}")
        return f"collective #{m.group(2)} of {group}"
    def p2p(m):
        return f"the message from rank {m.group(1)} to rank {m.group(2)} (tag {m.group(3)}, #{m.group(4)})"
    text = _ENGINE_P2P.sub(p2p, text)
    return _ENGINE_KEY.sub(key, _ENGINE_OP.sub(lambda m: m.group(1), text))


def _unwrap(fut):
    return fut.value()  # (raises the error that set_exception stored as the value)


def _public_future(base):
    """What a Work hands out for base, which the operation completes. torch's Python
    set_exception stores the exception as the future's value, which a C++ reader (DDP's
    reducer) then takes for a value (and crashed on); a callback that raises it makes a
    real error of it in the child future."""
    return base.then(_unwrap)


def _outcome(handles, finish):
    """Wait for handles on this thread: (finish's value, None) or (None, the error)."""
    try:
        return finish(_wait_all(handles)), None
    except BaseException as e:  # noqa: B902 (every failure goes to the Work)
        return None, _as_error(e)


def _complete(fut, value, error):
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


class _PyWork(_Work):
    """The Work handed to torch.distributed's Python functions (dist.all_reduce and the
    others), which keep it in Python. Its wait() raises the operation's error (a Work made
    from a future, what C++ callers get, returns from wait() whatever happened), and a caller
    that waits runs the wait on its own thread and keeps the outcome in the Work: no future
    and no hand-off to the completion thread, which take over only for get_future() or when
    the Work is dropped unwaited. (A future made and completed for every call was 3 of the
    ~20 us of a blocking 1-element dist.all_reduce, 2026-11-28.)"""

    def __init__(self, handles, finish):
        super().__init__()
        self._handles, self._finish = handles, finish
        self._lock = threading.Lock()
        self._claimed = False  # someone (this Work's caller or the completer) settles it
        self._settled = False  # the outcome below is the operation's
        self._value = self._error = None
        self._base = None  # the future the completer (or the outcome) completes, once asked
        self._fut = None   # _public_future(self._base), made when asked for

    def _claim(self):
        with self._lock:
            mine, self._claimed = not self._claimed, True
        return mine

    def _settle(self):
        value, error = _outcome(self._handles, self._finish)
        with self._lock:
            self._value, self._error, self._settled = value, error, True
            base = self._base  # (made by a get_future meanwhile: completed here, once)
        if base is not None:
            _complete(base, value, error)

    def _wait_settled(self):
        if self._claim():
            self._settle()
        elif not self._settled:
            with self._lock:
                base = self._base
            if base is not None:  # the completer settles it
                base.wait()  # (raises its error)
                return
            while not self._settled:  # another thread's wait() is settling it
                time.sleep(0.0001)
        if self._error is not None:
            raise self._error

    def wait(self, timeout=None):
        self._wait_settled()
        return True

    def get_future(self):
        with self._lock:
            mine, self._claimed = not self._claimed, True
            if self._base is None:
                self._base = torch.futures.Future()
                done = self._settled
            else:
                done = False
            base = self._base
        if mine:
            _completer.submit(self._handles, self._finish, base)
        elif done:
            _complete(base, self._value, self._error)
        if self._fut is None:
            self._fut = _public_future(base)
        return self._fut

    def is_completed(self):
        if self._settled:
            return True
        if self._base is not None:
            return self._base.done()
        if not self._claimed and all(_hvd.poll(h) for h in self._handles) and self._claim():
            self._settle()
            return True
        return False

    def is_success(self):
        return self.is_completed() and self.exception() is None

    def exception(self):
        if self._settled:
            return self._error
        if self._base is None or not self._base.done():
            return None
        try:
            self._base.value()
        except RuntimeError as e:
            return e
        return None

    def result(self):
        self._wait_settled()
        return self._value if self._settled else self._base.value()

    def synchronize(self):
        self.wait()

    def __del__(self):
        if getattr(self, "_handles", None) is not None and self._claim():
            # (releases the handles)
            _completer.submit(self._handles, self._finish, torch.futures.Future())


_THIS_FILE = sys._getframe(0).f_code.co_filename  # (as frames name it)
# Files whose frames stand between torch.distributed and the backend's methods without being
# the caller: this file, and torch.compiler.disable's wrapper once _run_eagerly applies it.
_PASSED_FILES = {_THIS_FILE}
# torch.distributed.all_reduce's own code (under any decorator a torch version wraps it in)
_ALL_REDUCE_CODE = getattr(inspect.unwrap(dist.all_reduce), "__code__", None)


def _waited_at_once():
    """Whether ProcessGroupHvd.allreduce was called by torch.distributed.all_reduce with
    async_op False, which waits for the Work at once and drops it."""
    frame = sys._getframe(2)
    return frame.f_code is _ALL_REDUCE_CODE and frame.f_locals.get("async_op") is False


class _DoneWork(_Work):
    """The Work of an operation already over (ProcessGroupHvd._allreduce_now)."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None


_DONE = _DoneWork()


class _AllWork(_Work):
    """The Work of several operations posted together (the coalesced forms)."""

    def __init__(self, works, result):
        super().__init__()
        self._works, self._result = works, result

    def wait(self, timeout=None):
        for w in self._works:
            w.wait()
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def is_success(self):
        return all(w.is_success() for w in self._works)

    def exception(self):
        errors = (w.exception() for w in self._works)
        return next((e for e in errors if e is not None), None)

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        def all_done(fut, result=self._result):
            for f in fut.value():
                f.value()  # (raises an operation's error)
            return result
        return torch.futures.collect_all([w.get_future() for w in self._works]).then(all_done)


def _work(handles, finish):
    """The Work of an operation: a _PyWork for torch.distributed's Python functions; for a
    caller in C++ (DDP's reducer, _broadcast_coalesced, ...), which may hold a Work after
    its Python object is gone, a Work made from a future the completion thread fulfils."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in _PASSED_FILES:
        frame = frame.f_back
    if frame is not None and frame.f_code.co_filename == _c10d.__file__:
        return _PyWork(handles, finish)
    base = torch.futures.Future()
    _completer.submit(handles, finish, base)
    return _work_from_future(_public_future(base))


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


# ---- torch.compile ---------------------------------------------------------------------------

# Methods dynamo must not trace into. torch.compile's dynamo inlines the Python it meets, a
# process group's methods too, and then fails on their attributes (a ProcessGroup is an opaque
# object to it, with a few members registered): torch.compile(DDP(model)) broke on the
# backend's broadcast, which DDP's forward calls to sync buffers. Run eagerly, they stay
# outside the traced graph, as a C++ backend's calls do.
_EAGER_METHODS = ("broadcast",)


def _run_eagerly(dynamo):
    for name in _EAGER_METHODS:
        setattr(ProcessGroupHvd, name, dynamo.disable(getattr(ProcessGroupHvd, name)))
    # (the wrapper's frames lie between torch.distributed.broadcast and the method: _work
    # looks past them for the caller)
    _PASSED_FILES.add(sys.modules["torch._dynamo.eval_frame"].__file__)


class _WhenDynamoLoads:
    """Applies _run_eagerly once torch._dynamo is imported, and not before: importing it
    costs 1.6 s of CPU, which a process that never compiles should not pay. A finder on
    sys.meta_path that only watches for that one name, and leaves once it has seen it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_wrap(module):
            exec_module(module)
            _run_eagerly(module)
        loader.exec_module = exec_then_wrap
        return spec


if "torch._dynamo" in sys.modules:
    _run_eagerly(sys.modules["torch._dynamo"])
elif hasattr(torch, "compiler"):  # (torch 1.13 has no dynamo)
    sys.meta_path.insert(0, _WhenDynamoLoads())


# ---- the store of a horovodrun job ----------------------------------------------------------

class _JobStore(dist.Store):
    """The store torch is given under horovodrun without MASTER_ADDR: no port of its own (the
    job's world is hvd's, formed through horovodrun's authenticated rendezvous). torch uses
    its default store for one thing here, the barrier that ends init_process_group and
    new_group, which every rank of the job runs alike: add() is therefore a collective (a sum
    over the job, kept per key), and a key set on one rank is seen by that rank only."""

    def __init__(self):
        super().__init__()
        self._values = {}
        self._adds = 0

    def add(self, key, amount):
        self._adds += 1
        t = torch.tensor([int(amount)], dtype=torch.int64)
        _ops.allreduce_(t, op=_ops.Sum, name=f"dist.store.{self._adds}")
        value = int(self._values.get(key, 0)) + int(t.item())
        self._values[key] = value
        return value

    def set(self, key, value):
        self._values[key] = bytes(value) if not isinstance(value, str) else value.encode()

    def get(self, key):
        if key not in self._values:
            raise RuntimeError(f"hvd backend: the store of a horovodrun job serves torch's own "
                               f"barriers; it has no {key!r} on this rank (start the job with "
                               "MASTER_ADDR and MASTER_PORT set to use torch's TCPStore)")
        v = self._values[key]
        return v if isinstance(v, bytes) else str(v).encode()

    def check(self, keys):
        return all(k in self._values for k in keys)

    def wait(self, keys, timeout=None):
        for k in keys:
            self.get(k)  # (a key this rank has not set never comes: say so at once)

    def num_keys(self):
        return len(self._values)

    def delete_key(self, key):
        return self._values.pop(key, None) is not None


# The Python side of the store, alive for the life of the process: torch's C++ (a PrefixStore
# of it that a program kept) may call it after the world is gone.
_job_store = {}


def _under_horovodrun():
    return bool(os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or
                os.environ.get("HOROVOD_RANK"))


def _for_hvd():
    """Whether the init_process_group running this rendezvous is for the "hvd" backend (a
    gloo job under horovodrun keeps torch's own env:// and its errors)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "init_process_group":
        frame = frame.f_back
    return frame is not None and str(frame.f_locals.get("backend", "")).lower() == BACKEND


def _env_handler(url, timeout=_c10d.default_pg_timeout, **kwargs):
    """torch's env:// rendezvous, except in a horovodrun job without MASTER_ADDR: there the
    world is hvd's, initialised here, with _JobStore as torch's store."""
    if os.environ.get("MASTER_ADDR") or not _under_horovodrun() or not _for_hvd():
        yield from _orig_env_handler(url, timeout=timeout, **kwargs)
        return
    query = dict(q.split("=", 1) for q in urlparse(url).query.split("&") if "=" in q)
    if not _hvd.is_initialized():
        _basics.init()
        _owned["init"] = True
    _owned["fresh"] = True
    rank, size = _hvd.rank(), _hvd.size()
    _agree(int(query.get("rank", rank)), int(query.get("world_size", size)))
    store = _job_store.setdefault("store", _JobStore())
    yield (store, rank, size)
    raise RuntimeError("hvd backend: a horovodrun job cannot re-rendezvous")


# ---- creating groups --------------------------------------------------------------------

_state = threading.local()
_owned = {"init": False}   # this module initialised hvd (and shuts it down with the world)
_psets = {}                # sorted global ranks -> hvd process set id


def _store_callbacks(store):
    def set_(key, value):
        store.set(key, value)

    def get(key, timeout_ms):
        try:
            store.wait([key], datetime.timedelta(milliseconds=max(timeout_ms, 1)))
        except RuntimeError as e:
            # torch 1.13's stores have no check(): a wait that ran out says so ("Socket
            # Timeout", "Wait timeout"); anything else (the store gone) stays an I/O error
            if "timeout" in str(e).lower():
                raise TimeoutError(str(e)) from None
            raise
        return bytes(store.get(key))
    return set_, get


def _route_addr():
    addr = os.environ.get("MASTER_ADDR")
    if not addr:
        return None
    try:
        return socket.gethostbyname(addr)
    except OSError:
        return None


def _init_world(store, rank, size, timeout):
    """hvd's world for torch's default group."""
    if _owned.pop("fresh", False):  # initialised by _env_handler for this very group
        _agree(rank, size)
        return
    if _hvd.is_initialized():
        if _owned["init"]:  # ours, from an init_process_group never destroyed: start again
            _shutdown_world()
        else:  # the program's hvd.init() (horovodrun): the world is hvd's
            _agree(rank, size)
            return
    if _under_horovodrun():
        _basics.init()
        _agree(rank, size)
    else:
        seconds = max(1, int(timeout.total_seconds())) if timeout else 0
        if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun: one store for every attempt
            # (torch always gives a timeout; without one, libhvd's default rendezvous wait)
            token = store_attempt.agree(store, rank, size, seconds or 30)
            store = dist.PrefixStore(f"hvd.{token}", store)
        set_, get = _store_callbacks(store)
        _hvd.init_store(rank, size, _route_addr(), set_, get, seconds)
    _owned["init"] = True


def _agree(rank, size):
    if _hvd.rank() != rank or _hvd.size() != size:
        raise RuntimeError(f"hvd backend: torch.distributed says rank {rank} of {size} but the "
                           f"hvd job says rank {_hvd.rank()} of {_hvd.size()}: under horovodrun "
                           "pass no rank or world_size (or the job's)")


def _shutdown_world():
    _psets.clear()
    _basics.shutdown()
    _owned["init"] = False


def _create(opts, pg_options=None):
    # (TORCH_DISTRIBUTED_DEBUG=DETAIL's checks, torch's ProcessGroupWrapper, wrap only C++
    # backends; hvd checks every collective's operation, dtype, shape, op and root across the
    # ranks itself, at every level: ProcessGroupHvd._keys)
    return _named(_create_group(opts), opts)


def _create_group(opts):
    ranks = list(opts.global_ranks_in_group)
    rank, size = opts.group_rank, opts.group_size
    if not ranks:
        _init_world(opts.store, rank, size, opts.timeout)
        return ProcessGroupHvd(rank, size, 0, range(size), opts.group_id, opts.timeout)
    if len(ranks) == _hvd.size():
        return ProcessGroupHvd(rank, size, 0, ranks, opts.group_id, opts.timeout)
    pset = getattr(_state, "pset", None)
    if pset is None:
        raise RuntimeError("hvd backend: a group of some ranks needs every rank of the job to "
                           "call new_group (torch's rule) through this torch's new_group; this "
                           "group was created some other way")
    return ProcessGroupHvd(rank, size, pset, ranks, opts.group_id, opts.timeout)


_Fake = getattr(torch._C._distributed_c10d, "FakeProcessGroup", None)


def _named(pg, opts):
    """torch 2 keeps a group's name in its C++ backends (ProcessGroup.group_name raises "name
    not set" without one), and functional collectives (DTensor, fully_shard) find a group by
    that name: a Python process group gets a placeholder backend for the CPU to carry it.
    Every operation still reaches this group's Python methods (torch calls the group's, which
    are ours, and the functional collectives call the group's virtual methods)."""
    if _Fake is None or not hasattr(pg, "_register_backend"):
        return pg  # (torch 1.13: no backends, no functional collectives)
    create = getattr(_Fake, "_create_internal", None) or _Fake
    holder = create(opts.group_rank, opts.group_size)
    pg._register_backend(torch.device("cpu"), _ProcessGroup.BackendType.CUSTOM, holder)
    pg._set_default_backend(_ProcessGroup.BackendType.CUSTOM)
    return pg


def _register_pset(ranks):
    key = tuple(sorted(ranks))
    if key not in _psets:
        _psets[key] = _hvd.add_process_set(list(key))
    return _psets[key]


# torch creates a subgroup's backend on its members only, but an hvd process set is
# registered by every rank of the job: torch's helper, which every rank calls for new_group,
# registers it first.
_orig_helper = _c10d._new_process_group_helper


def _helper(group_size, group_rank, global_ranks_in_group, backend, store, *args, **kwargs):
    ranks = list(global_ranks_in_group or [])
    ours = str(backend).lower() == BACKEND
    if ours and ranks and _hvd.is_initialized() and len(ranks) < _hvd.size():
        _state.pset = _register_pset(ranks)
    try:
        return _orig_helper(group_size, group_rank, global_ranks_in_group, backend, store, *args,
                            **kwargs)
    finally:
        _state.pset = None


_orig_monitored_barrier = _c10d.monitored_barrier


def _monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier, which torch implements for gloo only: on a group
    of this backend, ProcessGroupHvd.monitored_barrier."""
    pg = _c10d._get_default_group() if group is None or group is _c10d.GroupMember.WORLD \
        else group
    if isinstance(pg, ProcessGroupHvd):
        return pg.monitored_barrier(timeout, wait_all_ranks)
    return _orig_monitored_barrier(group=group, timeout=timeout, wait_all_ranks=wait_all_ranks)


_orig_env_handler = _rdv._rendezvous_handlers["env"]
_orig_destroy = _c10d.destroy_process_group


def _destroy(group=None):
    world = group is None or group is _c10d.GroupMember.WORLD
    was_ours = world and _c10d.is_initialized() and \
        _c10d.get_backend(_c10d._get_default_group()) == BACKEND
    _orig_destroy(group)
    if was_ours and _owned["init"]:
        _shutdown_world()


# Operations a finished script left in flight get this long to complete at exit.
_EXIT_DRAIN_SECONDS = 10


def _at_exit():
    _completer.quiesce(_EXIT_DRAIN_SECONDS)
    if _owned["init"] and _hvd.is_initialized():
        _shutdown_world()
        _completer.quiesce(_EXIT_DRAIN_SECONDS)  # what the shutdown failed completes now


def _register():
    if BACKEND.upper() in dist.Backend._plugins:
        return
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        # (torch 2: a backend that names no devices is taken for cpu, cuda and xpu, with a
        # warning at every import)
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
    else:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)
    _rdv._rendezvous_handlers["env"] = _env_handler
    _c10d._new_process_group_helper = _helper
    _c10d.destroy_process_group = _destroy
    dist.destroy_process_group = _destroy
    _c10d.monitored_barrier = _monitored_barrier
    dist.monitored_barrier = _monitored_barrier
    atexit.register(_at_exit)


_register()
