# hvd under a real Slurm on the network-namespace hosts (tests/slurm/README.md), label slurm.
# A cluster is a bed (tests/netns/netns.cmake says why two at most): slurm.srun takes
# netbed_a, slurm.elastic and slurm.faults netbed_b. The
# sanitizer pass leaves it out (scripts/run-tests.sh): what it adds to the other suites is
# Slurm itself; libhvd's side of it (the step's variables, the PMIx exchange) runs under the
# sanitizers in unit.mpi_env, unit.slurm_env and e2e.mpi. Exit 77 (skipped, never passed)
# where root, ip netns, sshd or Slurm are missing.
add_test(NAME slurm.srun COMMAND bash ${PROJECT_SOURCE_DIR}/tests/slurm/test_srun.sh)
set_tests_properties(slurm.srun PROPERTIES TIMEOUT 300 LABELS slurm SKIP_RETURN_CODE 77
  RESOURCE_LOCK netbed_a COST 60
  ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
add_test(NAME slurm.elastic COMMAND bash ${PROJECT_SOURCE_DIR}/tests/slurm/test_elastic.sh)
# (on the other bed's lock: in the plain pass the netns job tests that take it do not run,
# tests/netns/netns.cmake, so the two Slurm tests run side by side)
set_tests_properties(slurm.elastic PROPERTIES TIMEOUT 300 LABELS slurm SKIP_RETURN_CODE 77
  RESOURCE_LOCK netbed_b COST 40
  ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
add_test(NAME slurm.faults COMMAND bash ${PROJECT_SOURCE_DIR}/tests/slurm/test_faults.sh)
set_tests_properties(slurm.faults PROPERTIES TIMEOUT 400 LABELS slurm SKIP_RETURN_CODE 77
  RESOURCE_LOCK netbed_b COST 50
  ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
