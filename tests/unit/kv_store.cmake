# KV store executable: the data rules listed at the top of its source (no HTTP).
hvd_unit_test(kv_store tests/unit/test_kv_store.c)
