# KV store and server executables: each checks the protocol rules listed at the top of its source.
hvd_unit_test(kv_store tests/unit/test_kv_store.c)
hvd_unit_test(kv_server tests/unit/test_kv_server.c)
