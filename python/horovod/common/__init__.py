"""Framework-independent parts of the horovod package."""
