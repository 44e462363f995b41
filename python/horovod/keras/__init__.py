"""Horovod's API for Keras on hvd: `import horovod.keras as hvd`. Keras runs on TensorFlow
here (hvd's collectives are TensorFlow ops), so this is horovod.tensorflow.keras: the Keras
that tf.keras is (Keras 3, or tf-keras with TF_USE_LEGACY_KERAS=1)."""
from horovod.keras import callbacks, elastic  # noqa: F401
from horovod.tensorflow.keras import *  # noqa: F401,F403
from horovod.tensorflow.keras import (DistributedOptimizer, PartialDistributedOptimizer,  # noqa: F401
                                      allgather, allreduce, broadcast,
                                      broadcast_global_variables, load_model, reducescatter)
