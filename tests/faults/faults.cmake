# The fault matrix (tests/faults/test_matrix.sh says what each row checks): one test per role,
# phase and fault, each a job of tests/faults/fault_worker under the real horovodrun.
add_executable(fault_worker tests/faults/fault_worker.c)
target_link_libraries(fault_worker PRIVATE hvd)
set_target_properties(fault_worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)

# faults.<role>.<phase>.<fault>: each row a test of its own (tests/faults/test_matrix.sh)
set(HVD_FAULT_ROWS)
foreach(role rank rank0)
  foreach(phase init small large negotiate shutdown)
    foreach(fault kill stop)
      list(APPEND HVD_FAULT_ROWS "${role} ${phase} ${fault}")
    endforeach()
  endforeach()
  list(APPEND HVD_FAULT_ROWS "${role} small exit0" "${role} negotiate exit0")
endforeach()
# a rank that returns instead of calling hvd_init; a rank left stopped inside hvd_shutdown, and
# one running on, after the others exited (tests/faults/test_matrix.sh, left_behind_row)
list(APPEND HVD_FAULT_ROWS "rank init exit0" "rank0 init exit0" "rank shutdown left_stopped"
     "rank shutdown linger")
foreach(phase init small)
  foreach(fault kill stop)
    list(APPEND HVD_FAULT_ROWS "horovodrun ${phase} ${fault}")
  endforeach()
endforeach()
foreach(row ${HVD_FAULT_ROWS})
  separate_arguments(args UNIX_COMMAND "${row}")
  string(REPLACE " " "." name "${row}")
  add_test(NAME faults.${name} COMMAND bash ${PROJECT_SOURCE_DIR}/tests/faults/test_matrix.sh ${args})
  set_tests_properties(faults.${name} PROPERTIES TIMEOUT 120 LABELS faults
    ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endforeach()
# a rank killed mid-allgather: in one host's arena, and hierarchically across two pseudo-hosts
# (TCP between them, then each host's arena)
add_test(NAME faults.rank.large_allgather.kill
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/faults/test_matrix.sh rank large kill)
add_test(NAME faults.rank.large_allgather_2hosts.kill
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/faults/test_matrix.sh rank large kill)
set_tests_properties(faults.rank.large_allgather.kill faults.rank.large_allgather_2hosts.kill
  PROPERTIES TIMEOUT 120 LABELS faults)
set_tests_properties(faults.rank.large_allgather.kill PROPERTIES ENVIRONMENT
  "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR};FAULT_OP=allgather;FAULT_NP=4")
set_tests_properties(faults.rank.large_allgather_2hosts.kill PROPERTIES ENVIRONMENT
  "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR};FAULT_OP=allgather;FAULT_NP=4;FAULT_HOSTS=127.0.0.1:2,127.0.0.2:2;HOROVOD_HIERARCHICAL_ALLGATHER=1")
# a rank killed or stopped among small allreduces on three pseudo-hosts of two ranks: the
# engine's cycle messages cross hosts first and then go through each host's arena; a rank
# waiting in the arena for a host peer that waits across hosts for the stopped rank names
# both (the peer's wait record), so every rank's message names the victim
foreach(fault kill stop)
  add_test(NAME faults.rank.small_3hosts.${fault}
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/faults/test_matrix.sh rank small ${fault})
  set_tests_properties(faults.rank.small_3hosts.${fault} PROPERTIES TIMEOUT 120 LABELS faults
    ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR};FAULT_NP=6;FAULT_HOSTS=127.0.0.1:2,127.0.0.2:2,127.0.0.3:2")
endforeach()
# elastic mode (tests/e2e/test_elastic.sh's matrix scenarios): the driver stopped and killed
# mid-training, and a second worker killed while the world re-forms after the first's death
foreach(row "elastic_driver.training.stop driver_stop" "elastic_driver.training.kill driver_kill"
            "rank.elastic_reinit.kill kill_in_reinit")
  separate_arguments(args UNIX_COMMAND "${row}")
  list(GET args 0 name)
  list(GET args 1 scenario)
  add_test(NAME faults.${name}
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/test_elastic.sh ${scenario})
  set_tests_properties(faults.${name} PROPERTIES TIMEOUT 200 LABELS faults
    ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endforeach()
