# The static launcher: hvd__launch_run with hand-built slot plans (environment contract, tagged
# output, --output-filename, kill-all on failure, signals to the launcher, many ranks).
hvd_unit_test(launch tests/unit/test_launch.c)
target_compile_definitions(launch PRIVATE HVD_HOROVODRUN="$<TARGET_FILE:horovodrun>")
add_dependencies(launch horovodrun)
# A remote host's ranks: ssh's command line, and the supervisor that `horovodrun
# --internal-exec` runs on the remote host (run here without ssh).
hvd_unit_test(remote_exec tests/unit/test_remote_exec.c)
target_compile_definitions(remote_exec PRIVATE HVD_HOROVODRUN="$<TARGET_FILE:horovodrun>")
add_dependencies(remote_exec horovodrun)
# What crosses that host's ssh session: the ranks' spec, commands, frames.
hvd_unit_test(exec_wire tests/unit/test_exec_wire.c)
# Ranks left behind, stopped, after the others exited: the policy on a fake clock.
hvd_unit_test(stopped_ranks tests/unit/test_stopped_ranks.c)
