"""The elastic Keras callbacks of horovod.tensorflow.keras and horovod.keras: commit the state
every few batches, and keep its batch and epoch counters current."""


class CommitStateCallbackImpl:
    """state.commit() every batches_per_commit batches and at each epoch's end."""

    def __init__(self, backend, state, batches_per_commit=1, *args):
        super().__init__(*args)
        self.backend = backend
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.commit()

    def on_epoch_end(self, epoch, logs=None):
        self.commit()

    def commit(self):
        self.state.commit()
        self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallbackImpl:
    """state.batch: the batches done in this epoch (a restarted epoch runs only the rest)."""

    def __init__(self, backend, state, *args):
        super().__init__(*args)
        self.backend = backend
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = self.params.get("steps")

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps") and self.state.batch:
            # the rest of an epoch interrupted by a reset
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        if self.steps_per_epoch:
            self.params["steps"] = self.steps_per_epoch
        self.state.batch = 0


class UpdateEpochStateCallbackImpl:
    """state.epoch: the epochs done; pass initial_epoch=state.epoch to fit."""

    def __init__(self, backend, state, *args):
        super().__init__(*args)
        self.backend = backend
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        # (fit(initial_epoch=state.epoch) numbers the epochs on from the state's)
        self.state.epoch = epoch + 1
