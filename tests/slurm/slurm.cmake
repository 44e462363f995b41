# hvd under a real Slurm on the network-namespace hosts (tests/slurm/README.md), label slurm.
# A cluster is a bed (tests/netns/netns.cmake says why two at most): it takes netbed_a. The
# sanitizer pass leaves it out (scripts/run-tests.sh): what it adds to the other suites is
# Slurm itself; libhvd's side of it (the step's variables, the PMIx exchange) runs under the
# sanitizers in unit.mpi_env, unit.slurm_env and e2e.mpi. Exit 77 (skipped, never passed)
# where root, ip netns, sshd or Slurm are missing.
add_test(NAME slurm.srun COMMAND bash ${PROJECT_SOURCE_DIR}/tests/slurm/test_srun.sh)
set_tests_properties(slurm.srun PROPERTIES TIMEOUT 300 LABELS slurm SKIP_RETURN_CODE 77
  RESOURCE_LOCK netbed_a COST 60
  ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
add_test(NAME slurm.elastic COMMAND bash ${PROJECT_SOURCE_DIR}/tests/slurm/test_elastic.sh)
set_tests_properties(slurm.elastic PROPERTIES TIMEOUT 300 LABELS slurm SKIP_RETURN_CODE 77
  RESOURCE_LOCK netbed_a COST 40
  ENVIRONMENT "HVD_BUILD_DIR=${PROJECT_BINARY_DIR};HVD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
