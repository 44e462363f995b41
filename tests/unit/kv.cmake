hvd_unit_test(kv_store tests/unit/test_kv_store.c)
hvd_unit_test(kv_server tests/unit/test_kv_server.c)
