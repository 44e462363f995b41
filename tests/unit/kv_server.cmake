# KV server executable: the HTTP protocol over loopback sockets, as listed at the top of its
# source.
hvd_unit_test(kv_server tests/unit/test_kv_server.c)
