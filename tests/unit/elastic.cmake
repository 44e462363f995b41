# Elastic mode, the worker's side: the protocol's values (strict parsers), the transport's
# interrupt, and worker processes under hvd_elastic_run against a fake driver that writes
# the driver's keys into an in-process rendezvous store (the headers list the scenarios).
hvd_unit_test(elastic_msg tests/unit/test_elastic_msg.c)
hvd_unit_test(tcp_interrupt tests/unit/test_tcp_interrupt.c)
hvd_unit_test(elastic_recovery tests/unit/test_elastic_recovery.c)
set_tests_properties(unit.elastic_recovery PROPERTIES TIMEOUT 90)
