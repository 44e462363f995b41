"""The Work objects of the "hvd" backend and the completion thread that fulfils their futures as
soon as libhvd is done, whether or not anyone waits; libhvd's errors in torch.distributed's
terms.
"""
import inspect
import re
import sys
import threading
import time
from collections import deque

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from horovod import _hvd
from horovod.torch import mpi_ops as _ops

from horovod.torch.distributed._common import _Work, _work_from_future


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
