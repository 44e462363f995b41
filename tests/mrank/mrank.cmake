# Multi-rank tests: tests/mrank/collectives_check.c run as N processes under the real
# horovodrun on loopback. The program checks every blocking collective against results it
# computes itself; tests/e2e/test_faults.sh uses it too (HVD_BUILD_DIR/tests/mrank/).
add_executable(collectives_check tests/mrank/collectives_check.c)
target_link_libraries(collectives_check PRIVATE hvd m)
set_target_properties(collectives_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                   ${PROJECT_BINARY_DIR}/tests/mrank)

# hvd_mrank_test(name np args...): horovodrun -np np collectives_check args...
function(hvd_mrank_test name np)
  add_test(NAME mrank.${name}
           COMMAND timeout -k 10 280 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60
                   -np ${np} $<TARGET_FILE:collectives_check> ${ARGN})
  set_tests_properties(mrank.${name} PROPERTIES TIMEOUT 300 LABELS mrank)
endfunction()

# Everything at every count on few ranks; at more ranks than cores, --quick keeps the large
# counts to a few dtype/op pairs.
hvd_mrank_test(collectives_np1 1 --big)
hvd_mrank_test(collectives_np2 2 --big)
hvd_mrank_test(collectives_np3 3 --max-count 65537)
hvd_mrank_test(collectives_np4 4 --quick)
hvd_mrank_test(collectives_np7 7 --quick)
hvd_mrank_test(collectives_np8 8 --quick)
hvd_mrank_test(reinit_np2 2 --mode reinit --iters 100)
hvd_mrank_test(reinit_np4 4 --mode reinit --iters 30)
