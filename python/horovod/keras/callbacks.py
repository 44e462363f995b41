"""Horovod's Keras callbacks (the same classes as horovod.tensorflow.keras.callbacks)."""
from horovod.tensorflow.keras.callbacks import (BestModelCheckpoint,  # noqa: F401
                                                BroadcastGlobalVariablesCallback,
                                                LearningRateScheduleCallback,
                                                LearningRateWarmupCallback,
                                                MetricAverageCallback)
