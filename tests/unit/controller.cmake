# The core's tensor queue: names in flight, handles, waiting, threads.
hvd_unit_test(tensor_queue tests/unit/test_tensor_queue.c)
