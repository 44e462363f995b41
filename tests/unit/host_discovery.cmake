# Elastic mode's host discovery script: output format, deadline, output cap, last good set.
hvd_unit_test(host_discovery tests/unit/test_host_discovery.c)
