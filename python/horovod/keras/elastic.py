"""Elastic Keras training (the same as horovod.tensorflow.keras.elastic)."""
from horovod.tensorflow.keras.elastic import (CommitStateCallback, KerasState,  # noqa: F401
                                              UpdateBatchStateCallback,
                                              UpdateEpochStateCallback, run)

__all__ = ['KerasState', 'CommitStateCallback', 'UpdateBatchStateCallback',
           'UpdateEpochStateCallback', 'run']
