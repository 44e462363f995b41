# Elastic worker registry: per-round outcomes, refused transitions, the reference's decisions.
hvd_unit_test(worker_registry tests/unit/test_worker_registry.c)
