# Launcher modules: each executable checks one module (hosts, settings, output, spawn).
hvd_unit_test(hosts tests/unit/test_hosts.c)
# horovodrun inside a Slurm allocation: its hosts and slots
hvd_unit_test(slurm_alloc tests/unit/test_slurm_alloc.c)
hvd_unit_test(settings tests/unit/test_settings.c)
hvd_unit_test(output tests/unit/test_output.c)
hvd_unit_test(spawn tests/unit/test_spawn.c)
