# KV store executable: the data rules listed at the top of its source (no HTTP).
hvd_unit_test(kv_store tests/unit/test_kv_store.c)
# The slot plan the ranks read from the store, as horovodrun publishes it.
hvd_unit_test(rank_plan tests/unit/test_rank_plan.c)
# The check-in of a whole job played by threads against the server: planned and every record.
hvd_unit_test(check_in tests/unit/test_check_in.c)
# A silent peer told apart from a dead one: another process's activity read from /proc
# (sleeping, spinning, stopped, gone), and the watch's answer over two looks.
hvd_unit_test(peer_watch tests/unit/test_peer_watch.c)
# The same watch at the transport's door: a same-host connection that has not authenticated
# is kept while its process runs, dropped once it sits idle past the handshake limit.
hvd_unit_test(tcp_handshake tests/unit/test_tcp_handshake.c)
