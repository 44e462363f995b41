"""Horovod's TensorFlow operations on hvd: the ops of horovod/tensorflow/mpi_lib (C kernels
over libhvd, registered through TensorFlow's C kernel API) and their gradients.

The ops keep Horovod's names and attributes (HorovodAllreduce, HorovodAllgather, ...). They
run eagerly and inside tf.function; every collective is an asynchronous kernel that libhvd
completes from its background thread, negotiated and fused with every other named operation
of the process (the torch binding's included).
"""
import os
import re
import sysconfig

import tensorflow as tf
from tensorflow.python.framework import ops

from horovod import _hvd
from horovod.common.basics import _basics
from horovod.common.process_sets import ProcessSet, _registered, global_process_set


def _load_library(name):
    """The op library beside this file, built against this TensorFlow (pip install . builds
    it when TensorFlow is importable)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        name + sysconfig.get_config_var("EXT_SUFFIX"))
    if not os.path.exists(path):
        raise ImportError(
            f"horovod.tensorflow: {path} is missing: this hvd was installed without "
            "TensorFlow support; reinstall it with TensorFlow importable (pip install "
            "tensorflow first), or with HOROVOD_WITH_TENSORFLOW=1 to be told why not")
    try:
        return tf.load_op_library(path)
    except tf.errors.NotFoundError as e:
        raise ImportError(
            f"horovod.tensorflow: {path} does not load into TensorFlow {tf.__version__} ({e}); "
            "its kernels are built for one TensorFlow release: reinstall hvd with this "
            "TensorFlow") from e


MPI_LIB = _load_library("mpi_lib")

init = _basics.init
shutdown = _basics.shutdown
is_initialized = _basics.is_initialized
start_timeline = _basics.start_timeline
stop_timeline = _basics.stop_timeline
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

# Horovod's reduce operations (the op's reduce_op attribute takes these codes)
Average = _hvd.AVERAGE
Sum = _hvd.SUM
Adasum = _hvd.ADASUM
Min = _hvd.MIN
Max = _hvd.MAX
Product = _hvd.PRODUCT


def handle_average_backwards_compatibility(op, average):
    """The reduce op from Horovod's deprecated `average=` and the newer `op=` (Average when
    neither is given)."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        import warnings
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in "
                      "v1.0", DeprecationWarning)
        return Average if average else Sum
    return Average


def check_num_rank_power_of_2(num_rank):
    """Horovod's check for Adasum on MPI; hvd's Adasum takes any number of ranks."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def _normalize_name(name):
    """A tensor name as an op name (TensorFlow's name rules)."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _executing_eagerly():
    return tf.executing_eagerly()


def _auto_name(prefix, tensor, name):
    """Horovod's rule: in a graph, an unnamed op is named after its tensor; eagerly, the op's
    own name serves (eager ops of one thread run one at a time)."""
    if name is None and not _executing_eagerly():
        name = f"{prefix}_{_normalize_name(tensor.name)}"
    return name


def _auto_group_name(prefix, tensors, name):
    """_auto_name for a grouped op: named after its first and last tensors."""
    if name is None and not _executing_eagerly():
        name = f"{prefix}_{_normalize_name(tensors[0].name)}_{_normalize_name(tensors[-1].name)}"
    return name


def _reduce_attrs(op):
    """The keyword arguments that redo a reducing op as it was made (for its gradient)."""
    return dict(op=op.get_attr("reduce_op"), prescale_factor=op.get_attr("prescale_factor"),
                postscale_factor=op.get_attr("postscale_factor"),
                ignore_name_scope=op.get_attr("ignore_name_scope"),
                process_set=_ps_of(op.get_attr("process_set_id")))


def _ps_id(process_set):
    pid = process_set.process_set_id
    if pid is None:
        raise ValueError(f"{process_set} is not registered: pass it to hvd.init(process_sets=...) "
                         "or hvd.add_process_set first")
    return pid


def _ps_of(process_set_id):
    """The ProcessSet of an op's process_set_id attribute (gradients run on the same set)."""
    ps = _registered.get(process_set_id)
    if ps is None:
        ps = ProcessSet([])
        ps.process_set_id = process_set_id
    return ps


def _rows_known(out, tensor):
    """Give a graph output the dimensions it shares with the input (all but the first)."""
    if not _executing_eagerly() and tensor.shape.rank is not None and tensor.shape.rank > 0:
        out.set_shape([None] + tensor.shape.as_list()[1:])
    return out


def _filled(grads, outputs):
    """The gradients of a grouped op's outputs, zeros where TensorFlow gives None (an output
    the loss does not use), each in its output's type."""
    return [tf.zeros_like(o) if g is None else tf.cast(g, o.dtype)
            for g, o in zip(grads, outputs)]


# ---- allreduce ----

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """The HorovodAllreduce op on `tensor` (every rank's, reduced by `op`)."""
    name = _auto_name("HorovodAllreduce", tensor, name)
    return MPI_LIB.horovod_allreduce(tensor, name=name, reduce_op=op,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor,
                                     ignore_name_scope=ignore_name_scope,
                                     process_set_id=_ps_id(process_set))


@ops.RegisterGradient("HorovodAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the same allreduce of the gradients."""
    return _allreduce(grad, **_reduce_attrs(op))


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """One HorovodGroupedAllreduce op over `tensors` (negotiated and fused together)."""
    name = _auto_group_name("HorovodGroupedAllreduce", tensors, name)
    return MPI_LIB.horovod_grouped_allreduce(tensors, name=name, reduce_op=op,
                                             prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor,
                                             ignore_name_scope=ignore_name_scope,
                                             process_set_id=_ps_id(process_set))


@ops.RegisterGradient("HorovodGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(_filled(grads, op.outputs), **_reduce_attrs(op))


# ---- allgather ----

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension, in rank order. The first
    dimension may differ from rank to rank; the others must agree."""
    name = _auto_name("HorovodAllgather", tensor, name)
    out = MPI_LIB.horovod_allgather(tensor, name=name, ignore_name_scope=ignore_name_scope,
                                    process_set_id=_ps_id(process_set))
    return _rows_known(out, tensor)


def _my_rows(grad, x, ignore_name_scope, ps):
    """This rank's part of an allgathered gradient: the gradient averaged over the set, cut
    at every rank's first dimension."""
    grad = _allreduce(grad, op=Average, ignore_name_scope=ignore_name_scope, process_set=ps)
    with tf.device("/cpu:0"):
        rows = tf.reshape(tf.shape(x)[0], [1])
        rows = tf.reshape(allgather(rows, ignore_name_scope=ignore_name_scope, process_set=ps),
                          [ps.size()])
    return tf.split(grad, num_or_size_splits=rows, axis=0)[ps.rank()]


@ops.RegisterGradient("HorovodAllgather")
def _allgather_grad(op, grad):
    return _my_rows(grad, op.inputs[0], op.get_attr("ignore_name_scope"),
                    _ps_of(op.get_attr("process_set_id")))


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """allgather of every tensor in `tensors`, negotiated together."""
    name = _auto_group_name("HorovodGroupedAllgather", tensors, name)
    outs = MPI_LIB.horovod_grouped_allgather(tensors, name=name,
                                             ignore_name_scope=ignore_name_scope,
                                             process_set_id=_ps_id(process_set))
    return [_rows_known(o, t) for o, t in zip(outs, tensors)]


@ops.RegisterGradient("HorovodGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    ps = _ps_of(op.get_attr("process_set_id"))
    ins = op.get_attr("ignore_name_scope")
    return [_my_rows(g, x, ins, ps) for g, x in zip(_filled(grads, op.outputs), op.inputs)]


# ---- broadcast ----

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """`root_rank`'s `tensor` on every rank."""
    name = _auto_name("HorovodBroadcast", tensor, name)
    return MPI_LIB.horovod_broadcast(tensor, name=name, root_rank=root_rank,
                                     ignore_name_scope=ignore_name_scope,
                                     process_set_id=_ps_id(process_set))


@ops.RegisterGradient("HorovodBroadcast")
def _broadcast_grad(op, grad):
    """Every rank's gradient, averaged, flows to the root's input; the others get zeros."""
    root = op.get_attr("root_rank")
    ps = _ps_of(op.get_attr("process_set_id"))
    reduced = _allreduce(grad, op=Average, ignore_name_scope=op.get_attr("ignore_name_scope"),
                         process_set=ps)
    if rank() != root:
        return reduced * 0
    return reduced


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrite `variables` with `root_rank`'s values, in place; returns them. (Horovod
    does it with an in-place kernel on the variables' buffers; here each variable is assigned
    its broadcast value, one grouped negotiation for all.)"""
    variables = list(variables)
    if not variables:
        return []
    results = []
    for i, var in enumerate(variables):
        vname = None if name is None else f"{name}_{i}"
        if vname is None and not _executing_eagerly():
            vname = f"HorovodBroadcast_{_normalize_name(var.name)}"
        value = broadcast(tf.convert_to_tensor(var), root_rank, name=vname,
                          process_set=process_set)
        results.append(var.assign(value))
    return results if not _executing_eagerly() else variables


# ---- alltoall ----

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Send rows of `tensor` to every rank (splits[i] rows to rank i; None: equal parts) and
    receive theirs, concatenated in rank order. With `splits`, returns (output,
    received_splits), the rows that came from each rank; without, the output alone (as
    Horovod)."""
    splits_ = tf.constant([], dtype=tf.int32) if splits is None else \
        tf.convert_to_tensor(splits, dtype=tf.int32)
    name = _auto_name("HorovodAlltoall", tensor, name)
    out, received = MPI_LIB.horovod_alltoall(tensor, splits=splits_, name=name,
                                             ignore_name_scope=ignore_name_scope,
                                             process_set_id=_ps_id(process_set))
    out = _rows_known(out, tensor)
    return (out, received) if splits is not None else out


@ops.RegisterGradient("HorovodAlltoall")
def _alltoall_grad(op, grad_wrt_output, grad_wrt_received_splits):
    """The rows go back where they came from."""
    grad, _ = alltoall(grad_wrt_output, splits=op.outputs[1],
                       ignore_name_scope=op.get_attr("ignore_name_scope"),
                       process_set=_ps_of(op.get_attr("process_set_id")))
    return [grad, None]


# ---- reducescatter ----

def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """The HorovodReducescatter op: `tensor` reduced over the set, this rank's rows of it."""
    name = _auto_name("HorovodReducescatter", tensor, name)
    out = MPI_LIB.horovod_reducescatter(tensor, name=name, reduce_op=op,
                                        ignore_name_scope=ignore_name_scope,
                                        prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor,
                                        process_set_id=_ps_id(process_set))
    return _rows_known(out, tensor)


def _scatter_grad_scale(op, ps):
    """What a reducescatter's output gradient is multiplied by before it is gathered back:
    Horovod's convention, the set's size for Sum (1 for Average), times the scale factors."""
    factor = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == Sum:
        factor *= ps.size()
    return factor


@ops.RegisterGradient("HorovodReducescatter")
def _reducescatter_grad(op, grad):
    """Every rank's input rows went to one rank's output: the output gradients, scaled, are
    gathered back."""
    ps = _ps_of(op.get_attr("process_set_id"))
    factor = _scatter_grad_scale(op, ps)
    if factor != 1.0:
        grad = grad * tf.cast(factor, grad.dtype)
    return allgather(grad, ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=ps)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    name = _auto_group_name("HorovodGroupedReducescatter", tensors, name)
    outs = MPI_LIB.horovod_grouped_reducescatter(tensors, name=name, reduce_op=op,
                                                 ignore_name_scope=ignore_name_scope,
                                                 prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor,
                                                 process_set_id=_ps_id(process_set))
    return [_rows_known(o, t) for o, t in zip(outs, tensors)]


@ops.RegisterGradient("HorovodGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    # (one allgather each: TensorFlow may give float32 zeros for a float64 output's gradient)
    ps = _ps_of(op.get_attr("process_set_id"))
    factor = _scatter_grad_scale(op, ps)
    ins = op.get_attr("ignore_name_scope")
    out = []
    for g in _filled(grads, op.outputs):
        if factor != 1.0:
            g = g * tf.cast(factor, g.dtype)
        out.append(allgather(g, ignore_name_scope=ins, process_set=ps))
    return out


# ---- join, and the topology as ops ----

def join():
    """This rank has no more data: take part in the other ranks' collectives with zeros until
    every rank has joined. Returns the rank that joined last."""
    return MPI_LIB.horovod_join()


def barrier(process_set=global_process_set):
    """Wait until every rank of the set gets here."""
    _hvd.barrier(_ps_id(process_set))


def size_op(process_set_id=0, name=None):
    """The number of ranks (of the process set) as an op: the value when the graph runs."""
    return MPI_LIB.horovod_size(process_set_id=process_set_id, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this rank belongs to the process set, else 0, as an op."""
    return MPI_LIB.horovod_process_set_included(process_set_id=process_set_id, name=name)


def local_size_op(name=None):
    return MPI_LIB.horovod_local_size(name=name)


def rank_op(name=None):
    return MPI_LIB.horovod_rank(name=name)


def local_rank_op(name=None):
    return MPI_LIB.horovod_local_rank(name=name)


ops.NotDifferentiable("HorovodSize")
ops.NotDifferentiable("HorovodProcessSetIncluded")
ops.NotDifferentiable("HorovodLocalSize")
ops.NotDifferentiable("HorovodRank")
ops.NotDifferentiable("HorovodLocalRank")
ops.NotDifferentiable("HorovodJoin")
