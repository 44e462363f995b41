"""Horovod's Python API on hvd, Horovod's distributed-training runtime written in C.

`import horovod.torch as hvd` works as with Horovod: the same functions, arguments, defaults
and errors, running on libhvd (negotiation, response cache, fusion, timeline, stall
inspector, elastic) through one extension module, horovod._hvd.
"""
__version__ = "0.28.1"
# hvd's own version, for those who need to tell it from Horovod
runtime = "hvd"

from horovod.runner import run  # noqa: E402  (Horovod's horovod.run)
