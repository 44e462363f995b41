"""horovod.runner.util: the helpers of Horovod's runner that programs and Horovod's own test
utilities import (threads.in_thread)."""
