"""Small helpers of horovod.tensorflow (Horovod's horovod.tensorflow.util)."""
import tensorflow as tf


def _executing_eagerly():
    """Whether ops run now (eager) rather than being added to a graph."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """f as a tf.function (one graph for its collectives, traced once per signature)."""
    return tf.function(f)


def _cache(f):
    """Memoize f on its positional arguments; eagerly, per eager context, since a function
    traced under one context cannot run under another."""
    cache = {}

    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]

    return wrapper


def _var_key(var):
    """A hashable key of a variable: tf.Variable's ref(); a Keras 3 Variable has none (and
    compares elementwise), so its TensorFlow variable's ref, else its identity."""
    if hasattr(var, "ref"):
        return var.ref()
    inner = getattr(var, "value", None)
    if inner is not None and hasattr(inner, "ref"):
        return inner.ref()
    return id(var)


def _tf_variable(var):
    """The tf.Variable behind a variable: itself, or a Keras 3 Variable's (TensorFlow backend),
    which tf.function would otherwise take as a plain tensor."""
    if isinstance(var, tf.Variable):
        return var
    inner = getattr(var, "value", None)
    return inner if isinstance(inner, tf.Variable) else var


def vars_to_refs(variables):
    """Hashable references of variables (tf.Variable is not hashable)."""
    if isinstance(variables, list):
        return tuple(vars_to_refs(v) for v in variables)
    return variables.ref()


def refs_to_vars(refs):
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
