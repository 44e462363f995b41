# The static launcher: hvd__launch_run with hand-built slot plans (environment contract, tagged
# output, --output-filename, kill-all on failure, signals to the launcher, many ranks).
hvd_unit_test(launch tests/unit/test_launch.c)
