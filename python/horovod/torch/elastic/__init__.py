"""Elastic training with PyTorch (Horovod's horovod.torch.elastic): run, TorchState,
ElasticSampler. Use under horovodrun --host-discovery-script ... (or --min-np/--max-np)."""
from horovod.common.basics import _basics
from horovod.common.elastic import ObjectState, State, run_fn
from horovod.torch.elastic.sampler import ElasticSampler
from horovod.torch.elastic.state import TorchState


def run(func):
    """Decorator for the training function `func(state, *args, **kwargs)`: recovers from lost
    workers and host changes by re-initialising and carrying on from `state`'s last commit.
    The decorated function must not be called from inside another collective, and func's
    first collectives must be the same on every rank (new workers start in it after the
    sync)."""
    return run_fn(func, _basics._after_reinit)


__all__ = ["ElasticSampler", "ObjectState", "State", "TorchState", "run"]
