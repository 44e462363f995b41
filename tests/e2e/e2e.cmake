foreach(t env_contract dry_run cli failure signals output rendezvous install faults perf_tools
          train_example core_faults core_fault_messages core_timeline mpi elastic shm port_barrage
          reproducible)
  hvd_e2e_test(${t} tests/e2e/test_${t}.sh)
endforeach()
# CI runs these once, in the sanitizer pass (label sanitize_once, scripts/run-tests.sh): they
# start many jobs of several ranks each, so on a CPU-bound CI machine a second, plain run
# costs minutes; their assertions (results, messages, deadlines) are the same in both builds,
# the sanitized build is the same -O2 code with ASan's and UBSan's checks added, and its ranks
# run slower, which only tightens their deadlines. (A plain build's own ctest runs them.)
set_tests_properties(e2e.elastic e2e.shm e2e.reproducible e2e.rendezvous e2e.mpi e2e.perf_tools
                     e2e.train_example
                     PROPERTIES LABELS "e2e;sanitize_once")
# 1,024 ranks on this host (test_many_ranks.sh): in the plain pass only, since a thousand
# processes each with the sanitizer's runtime and shadow memory would take gigabytes; alone
# and last (RUN_SERIAL, COST 1): beside two other tests its short timeout also bounded the
# launcher's answers to the check-ins (a store request timed out at 2 s in a CI run)
hvd_e2e_test(many_ranks tests/e2e/test_many_ranks.sh)
set_tests_properties(e2e.many_ranks PROPERTIES LABELS "e2e;plain_once" COST 1 RUN_SERIAL ON)
# the costliest first (tests/netns/netns.cmake says why)
set_tests_properties(e2e.shm PROPERTIES COST 100)
set_tests_properties(e2e.elastic PROPERTIES COST 90)
set_tests_properties(e2e.train_example PROPERTIES COST 40)
# The deterministic elastic training program of the elastic tests (its header says what it
# checks): ${PROJECT_BINARY_DIR}/tests/elastic_worker.
add_executable(elastic_worker tests/e2e/elastic_worker.c)
target_link_libraries(elastic_worker PRIVATE hvd)
set_target_properties(elastic_worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
# pip install: builds the project again from a copy of the sources into a wheel, installs it
# into a fresh venv and a --user site, runs a job with each and uninstalls (test_pip.sh).
# Label source: it builds its own plain tree from the sources, so the sanitizer pass (which
# leaves out that label) does not run it a second time.
hvd_e2e_test(pip tests/e2e/test_pip.sh)
set_tests_properties(e2e.pip PROPERTIES LABELS "e2e;source" COST 120 TIMEOUT 600)
