"""An elastic job whose worker on 127.0.0.1 leaves or stays behind, run by
tests/python/test_elastic.py under horovodrun --host-discovery-script:

    elastic_left_behind.py OUT_DIR MODE

MODE leave: the worker on 127.0.0.1 exits 0 instead of calling hvd.init() (the first time
  only: OUT_DIR/left marks it), while the others wait for it in round 0's rendezvous;
MODE stop: after training and hvd.shutdown(), that worker stops itself (SIGSTOP) while the
  others exit;
MODE linger: after hvd.shutdown() that worker goes on running for LINGER seconds (a long
  checkpoint) while the others exit.
Every worker trains 5 committed steps of allreduces and prints "done rank R size S"."""
import os
import signal
import sys
import time

out_dir, mode = sys.argv[1], sys.argv[2]
marked = os.path.join(out_dir, "left")
first_host = os.environ.get("HOROVOD_HOSTNAME") == "127.0.0.1"
if mode == "leave" and first_host and not os.path.exists(marked):
    with open(marked, "w") as f:
        f.write(repr(time.time()))
    sys.exit(0)

import torch  # noqa: E402  (after the early exit: it leaves at once)

import horovod.torch as hvd  # noqa: E402

hvd.init()
state = hvd.elastic.TorchState(step=0)


@hvd.elastic.run
def train(state):
    while state.step < 5:
        hvd.allreduce(torch.ones(2))
        state.step += 1
        state.commit()


train(state)
rank, size = hvd.rank(), hvd.size()
hvd.shutdown()
print(f"done rank {rank} size {size}", flush=True)
if first_host and mode == "stop":
    with open(os.path.join(out_dir, "stopped"), "w") as f:
        f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
if first_host and mode == "linger":
    time.sleep(float(os.environ["LINGER"]))
