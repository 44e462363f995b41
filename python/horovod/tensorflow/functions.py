"""Variables and Python objects across ranks: broadcast_variables, broadcast_object,
broadcast_object_fn and allgather_object of horovod.tensorflow."""
import cloudpickle
import numpy as np
import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.mpi_ops import _executing_eagerly, allgather, broadcast, rank
from horovod.tensorflow.util import _tf_variable


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Give every variable `root_rank`'s value. Eagerly it happens now; in a graph the op that
    does it is returned (run it once, after the variables are initialised). `inplace` is
    accepted for Horovod's signature: the variables are assigned either way."""
    variables = [_tf_variable(v) for v in variables]
    if _executing_eagerly():
        _broadcast_group(variables, root_rank, process_set)
        return None
    return tf.group(*[var.assign(broadcast(var, root_rank, process_set=process_set))
                      for var in variables])


@tf.function
def _broadcast_in_graph(variables, root_rank, process_set):
    for var in variables:
        var.assign(broadcast(var, root_rank, process_set=process_set))


def _broadcast_group(variables, root_rank, process_set):
    # One graph for all the variables: their broadcasts are negotiated together instead of
    # one eager round trip each (a model has hundreds of variables).
    if variables:
        _broadcast_in_graph(variables, root_rank, process_set)


def _run(tensor, session):
    if session is not None:
        return session.run(tensor)
    if _executing_eagerly():
        return tensor.numpy()
    return tf.compat.v1.get_default_session().run(tensor)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """`root_rank`'s `obj` (serialised with cloudpickle) on every rank. In a graph outside
    eager mode, `session` (or the default session) runs the broadcasts."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8)
        length = tf.constant([len(payload)], dtype=tf.int64)
    else:
        payload = None
        length = tf.constant([0], dtype=tf.int64)
    n = int(_run(broadcast(length, root_rank, name=f"{name}.sz", process_set=process_set),
                 session)[0])
    data = tf.constant(payload if payload is not None else np.zeros(n, dtype=np.uint8))
    out = _run(broadcast(data, root_rank, name=f"{name}.t", process_set=process_set), session)
    if rank() == root_rank:
        return obj
    return cloudpickle.loads(out.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function of one object that returns `root_rank`'s (broadcast_object with these
    arguments)."""
    def fn(obj):
        return broadcast_object(obj, root_rank, session=session, name=name,
                                process_set=process_set)
    return fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """A list of every rank's `obj`, in rank order."""
    name = name or type(obj).__name__
    payload = np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8)
    sizes = _run(allgather(tf.constant([len(payload)], dtype=tf.int64), name=f"{name}.sz",
                           process_set=process_set), session)
    data = _run(allgather(tf.constant(payload), name=f"{name}.t", process_set=process_set),
                session).tobytes()
    out, pos = [], 0
    for n in sizes.tolist():
        out.append(cloudpickle.loads(data[pos:pos + n]))
        pos += n
    return out
