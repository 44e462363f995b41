"""Horovod on Spark: `horovod.spark.run(fn, num_proc=8)` runs fn on Horovod ranks placed in
Spark tasks, the executors being the hosts, and returns what each rank's fn returned.

As Horovod's: the same functions, arguments, defaults and messages. Underneath: hvd's
horovodrun, reaching each executor through its Spark task (runner.py says how)."""
from horovod.spark.runner import TimeoutException, run, run_elastic  # noqa: F401
