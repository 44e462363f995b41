# Elastic host view: update flags, assignment order, snapshots, blacklist and cooldown.
hvd_unit_test(host_manager tests/unit/test_host_manager.c)
