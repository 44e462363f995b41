"""Broadcasting a model's parameters, an optimizer's state and any picklable object, and
gathering objects from every rank."""

import cloudpickle
import torch

from horovod.common.basics import _basics
from horovod.common.process_sets import global_process_set
from horovod.torch.mpi_ops import (allgather, broadcast_, broadcast_async_, synchronize)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Copy root_rank's parameters to every rank, in place. `params` is a state_dict (or
    named_parameters()) or a list of tensors or (name, tensor) pairs."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        items = list(params)  # e.g. a named_parameters() generator
        items = [p if isinstance(p, tuple) else (None, p) for p in items]
    handles = []
    for i, (name, p) in enumerate(items):
        if p is None:
            continue
        tensor = p.data if isinstance(p, torch.nn.Parameter) else p
        label = f"broadcast_parameters.{name if name is not None else i}"
        handles.append(broadcast_async_(tensor, root_rank, name=label, process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (serialised with cloudpickle) on every rank."""
    name = name or type(obj).__name__
    if _basics.rank() == root_rank:
        payload = cloudpickle.dumps(obj)
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        length = torch.tensor([len(payload)], dtype=torch.int64)
        broadcast_(length, root_rank, name=f"{name}.sz", process_set=process_set)
        broadcast_(data, root_rank, name=f"{name}.t", process_set=process_set)
        return obj
    length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=f"{name}.sz", process_set=process_set)
    data = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(data, root_rank, name=f"{name}.t", process_set=process_set)
    return cloudpickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """A list of every rank's `obj`, in rank order."""
    name = name or type(obj).__name__
    payload = cloudpickle.dumps(obj)
    sizes = allgather(torch.tensor([len(payload)], dtype=torch.int64), name=f"{name}.sz",
                      process_set=process_set).tolist()
    data = allgather(torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload
                     else torch.empty(0, dtype=torch.uint8), name=f"{name}.t",
                     process_set=process_set).numpy().tobytes()
    out, pos = [], 0
    for n in sizes:
        out.append(cloudpickle.loads(data[pos:pos + n]))
        pos += n
    return out


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Copy root_rank's optimizer state (hyper-parameters and per-parameter tensors such as
    momentum) to every rank. An optimizer without state yet gets it first from a step with
    zero gradients, as Horovod does, so that every rank broadcasts the same tensors."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        # Create the state by a step of the wrapped class (no allreduce: a DistributedOptimizer
        # would wait for other ranks' gradients) with zero gradients.
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and id(p) not in [id(v) for v in optimizer.state.keys()]:
                    p.grad = p.data.new(p.size()).zero_()
        step = super(optimizer.__class__, optimizer).step if hasattr(
            optimizer, "_requires_update") else optimizer.step
        saved = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        for g in optimizer.param_groups:  # a step that moves nothing
            if "lr" in g:
                g["lr"] = 0.0
        step()
        for g, s in zip(optimizer.param_groups, saved):
            g.update(s)
        state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        # an optimizer that keeps no per-parameter state: the hyper-parameters only
        pass

    # Scalars (hyper-parameters and scalar state) travel as one object from the root.
    scalars = {}
    tensors = []
    for gi, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key != "params":
                scalars[f"group.{gi}.{key}"] = value
    for pid in sorted(state_dict["state"]):
        for key, value in sorted(state_dict["state"][pid].items()):
            if torch.is_tensor(value) and value.dim() > 0:
                tensors.append((f"{pid}.{key}", value))
            else:
                scalars[f"state.{pid}.{key}"] = value
    scalars = broadcast_object(scalars, root_rank, name="broadcast_optimizer_state.scalars",
                               process_set=process_set)
    broadcast_parameters([(f"optimizer_state.{n}", t) for n, t in tensors], root_rank,
                         process_set=process_set)
    for gi, group in enumerate(state_dict["param_groups"]):
        for key in list(group):
            if key != "params":
                group[key] = scalars[f"group.{gi}.{key}"]
    for pid in state_dict["state"]:
        for key, value in state_dict["state"][pid].items():
            label = f"state.{pid}.{key}"
            if label in scalars:
                v = scalars[label]
                state_dict["state"][pid][key] = (torch.tensor(v) if torch.is_tensor(value) and
                                                 not torch.is_tensor(v) else v)
    optimizer.load_state_dict(state_dict)
