"""torch.compile: the process group's methods that dynamo must not trace into run eagerly,
applied once torch._dynamo is imported.
"""
import importlib.util
import sys

import torch

from horovod.torch.distributed._work import _PASSED_FILES
from horovod.torch.distributed._process_group import ProcessGroupHvd


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
