"""The backend's name and the tables every part of it reads: torch's reduce ops as libhvd's,
the bitwise ones done locally, the operation names' cycle, and the c10d types it builds on.
"""
import importlib.util

import torch
import torch.distributed as dist

from horovod import _hvd


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
