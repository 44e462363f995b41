# Timeline writer: valid Chrome-trace JSON after close and after a kill, escaping, pids.
hvd_unit_test(timeline tests/unit/test_timeline.c)
