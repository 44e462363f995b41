# Several hosts on this machine as network namespaces with sshd each (tests/netns/README.md).
# Each test builds a bed of its own (a prefix per process) and removes it however it ends.
# Two beds at a time at most (RESOURCE_LOCK netbed_a / netbed_b): four beds being built at once
# on two cores took twice as long each, and a bed's sshd could miss its 20 s readiness
# deadline. The bed's self-check holds both: it counts the links of the root namespace, which
# another bed being built would change.
# They need root and `ip netns`: where those are missing they exit 77, which ctest reports
# as skipped with the script's message, never as passed.
foreach(t netbed multihost discovery elastic hosts8)
  add_test(NAME netns.${t} COMMAND bash ${PROJECT_SOURCE_DIR}/tests/netns/test_${t}.sh)
  set_tests_properties(netns.${t} PROPERTIES TIMEOUT 300 LABELS netns SKIP_RETURN_CODE 77
    ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endforeach()
# The bed's self-check runs none of this project's programs (label harness: the sanitizer
# pass, which re-runs the project's code, leaves it out).
set_tests_properties(netns.netbed PROPERTIES LABELS "netns;harness")
# CI runs the three job tests once, in the sanitizer pass (label sanitize_once, see
# scripts/run-tests.sh): what they exercise is horovodrun's network-facing code (task
# services, NIC discovery, remote supervisors), where ASan's checks matter most, and their
# assertions are the same in both builds; most of their CPU is sshd's and the namespaces',
# which a second, plain run only spends again on a CPU-bound CI machine.
set_tests_properties(netns.multihost netns.discovery netns.elastic netns.hosts8 PROPERTIES
  LABELS "netns;sanitize_once")
set_tests_properties(netns.multihost PROPERTIES RESOURCE_LOCK netbed_a)
set_tests_properties(netns.discovery netns.elastic PROPERTIES RESOURCE_LOCK netbed_b)
# eight hosts, sixteen ranks: the smaller version of the 32-host benchmark bed
set_tests_properties(netns.hosts8 PROPERTIES RESOURCE_LOCK netbed_a COST 150)
set_tests_properties(netns.netbed PROPERTIES RESOURCE_LOCK "netbed_a;netbed_b")
# COST: about the seconds each takes under the sanitizers. ctest starts the costliest tests
# first (a fresh clone has no timing history), so a run never ends waiting on one long test
# started last.
set_tests_properties(netns.multihost PROPERTIES COST 160)
set_tests_properties(netns.discovery PROPERTIES COST 120)
set_tests_properties(netns.elastic PROPERTIES COST 70)
# the self-check holds both beds: first, before the others take them
set_tests_properties(netns.netbed PROPERTIES COST 300)
# torchrun across two hosts on the "hvd" backend (torch's c10d rendezvous, a restart after a
# killed worker), under the main Python interpreter: its torch is PyPI's torch 2, whose runs
# belong to the plain pass (label plain_once, tests/python/python.cmake says why)
if(HVD_PYTHON_BUILT AND HVD_WITH_PYTORCH)
  add_test(NAME netns.torchrun COMMAND bash ${PROJECT_SOURCE_DIR}/tests/netns/test_torchrun.sh)
  set_tests_properties(netns.torchrun PROPERTIES TIMEOUT 400 LABELS "netns;python;plain_once"
    SKIP_RETURN_CODE 77 RESOURCE_LOCK netbed_b COST 100
    ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR};HVD_PYTHON=${HVD_PYTHON_EXECUTABLE}")
endif()
# horovod.spark on a Spark standalone cluster across two hosts (tests/netns/test_spark.sh):
# the main interpreter's pyspark; a JVM does not run under the sanitizer's preloaded runtime,
# and it is torch 2's, so the plain pass (plain_once).
if(HVD_PYTHON_BUILT AND HVD_WITH_PYTORCH AND NOT HVD_SANITIZE)
  add_test(NAME netns.spark COMMAND bash ${PROJECT_SOURCE_DIR}/tests/netns/test_spark.sh)
  set_tests_properties(netns.spark PROPERTIES TIMEOUT 400 LABELS "netns;python;plain_once"
    SKIP_RETURN_CODE 77 RESOURCE_LOCK netbed_a COST 100
    ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR};HVD_PYTHON=${HVD_PYTHON_EXECUTABLE};${HVD_SPARK_JAVA_ENV}")
endif()
