# hvd_init_store without horovodrun: tests/mrank/store_init_check.c forks the ranks itself,
# which meet through a store of files (its header lists the scenarios).
add_executable(store_init_check tests/mrank/store_init_check.c)
target_link_libraries(store_init_check PRIVATE hvd)
set_target_properties(store_init_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                  ${PROJECT_BINARY_DIR}/tests/mrank)
foreach(scenario_np "job;1" "job;3" "secret_file;2" "missing;3" "bad_args;1")
  list(GET scenario_np 0 scenario)
  list(GET scenario_np 1 np)
  add_test(NAME mrank.store_init_${scenario}_np${np}
           COMMAND timeout -k 10 100 $<TARGET_FILE:store_init_check> ${scenario} ${np})
  set_tests_properties(mrank.store_init_${scenario}_np${np} PROPERTIES TIMEOUT 120
                       LABELS mrank)
endforeach()
