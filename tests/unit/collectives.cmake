# Reduction kernels: each dtype and op checked against values computed independently.
hvd_unit_test(reduce tests/unit/test_reduce.c)
