# horovodrun --mpi: detection of the MPI installed (fake mpirun scripts in PATH), the mpirun
# command line for each implementation, and running it with output passed through.
hvd_unit_test(mpi_run tests/unit/test_mpi_run.c)
