# The horovod package's tests (label python): tests/python/ranks/ run by pytest on every rank
# of a horovodrun job at np 1, 2 and 3; tests/python/test_jobs.py drives whole jobs (a rank
# SIGKILLed mid-training, the PyTorch example, a script written like Horovod's
# pytorch_mnist.py) from one pytest process, and
# tests/python/test_elastic.py elastic jobs (workers killed and added, the elastic example).
if(NOT HVD_PYTHON_BUILT)
  return()
endif()
set(HVD_PY_ENV
    "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1;HVD_BUILD_DIR=${PROJECT_BINARY_DIR}")
if(HVD_SANITIZE)
  # The interpreter is not instrumented: the sanitizer runtime must be loaded first, and
  # CPython's and torch's own allocations at exit are not this project's leaks. handle_abort:
  # an abort() in any thread prints that thread's C stack (faulthandler shows Python frames
  # only); LIBC_FATAL_STDERR_: glibc's fatal messages go to stderr, never to a terminal.
  # libstdc++ too: torch throws C++ exceptions (an operation's error crossing a future's
  # callback), and the runtime's __cxa_throw interceptor aborts ("real___cxa_throw != 0")
  # when libstdc++ came only later, with torch's dlopen.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE HVD_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE HVD_LIBSTDCXX OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND HVD_PY_ENV "LD_PRELOAD=${HVD_LIBASAN}:${HVD_LIBSTDCXX}"
       "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_abort=1"
       "LIBC_FATAL_STDERR_=1")
endif()
# --capture=sys: pytest captures Python's output only, so what native code writes to fd 2 when
# a rank dies (the sanitizer's report, glibc's abort message, libhvd's log) reaches the test
# log instead of a capture file that dies with the process.
foreach(np 1 2 3)
  add_test(NAME python.ranks_np${np}
           COMMAND timeout -k 10 580 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60
                   -np ${np} ${HVD_PYTHON_EXECUTABLE} -m pytest -q -x -p no:cacheprovider
                   --capture=sys ${PROJECT_SOURCE_DIR}/tests/python/ranks)
  set_tests_properties(python.ranks_np${np} PROPERTIES TIMEOUT 600 LABELS python
                       ENVIRONMENT "${HVD_PY_ENV}")
endforeach()
# torch.distributed on the "hvd" backend (tests/python/dist_ranks/): every collective at np 1-4
# under torchrun (the world forms through torch's c10d store) and under horovodrun (the world
# is the job's). (tests/python/torchrun.py: torchrun with a rendezvous port of each job's own.)
foreach(np 1 2 3 4)
  add_test(NAME python.dist_torchrun_np${np}
           COMMAND timeout -k 10 280 ${HVD_PYTHON_EXECUTABLE}
                   ${PROJECT_SOURCE_DIR}/tests/python/torchrun.py --nproc_per_node ${np}
                   -m pytest -q -x -p no:cacheprovider --capture=sys
                   ${PROJECT_SOURCE_DIR}/tests/python/dist_ranks)
  add_test(NAME python.dist_horovodrun_np${np}
           COMMAND timeout -k 10 280 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60
                   -np ${np} ${HVD_PYTHON_EXECUTABLE} -m pytest -q -x -p no:cacheprovider
                   --capture=sys ${PROJECT_SOURCE_DIR}/tests/python/dist_ranks)
  set_tests_properties(python.dist_torchrun_np${np} python.dist_horovodrun_np${np} PROPERTIES
                       TIMEOUT 300 LABELS python ENVIRONMENT "${HVD_PY_ENV}")
endforeach()
add_test(NAME python.dist_jobs
         COMMAND ${HVD_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider
                 ${PROJECT_SOURCE_DIR}/tests/python/test_dist_jobs.py)
set_tests_properties(python.dist_jobs PROPERTIES TIMEOUT 600 LABELS python COST 90
                     ENVIRONMENT "${HVD_PY_ENV}")
# test_jobs.py and test_elastic.py, split in two tests each: the whole-training jobs (the
# PyTorch example, the Horovod-style MNIST script, the elastic example killed mid-epoch) run
# only in the plain build, since torch runs 3-4x slower under the preloaded sanitizer runtime
# (the elastic example's kill scenario did not finish in the test's time there); their
# optimizer, compression, broadcast and elastic-state paths run under the sanitizer in
# tests/python/ranks/ and in the other scenarios. Those other scenarios (every libhvd and
# extension path of a job's life: ranks killed, stopped, leaving, workers added) are labelled
# sanitize_once below: CI runs them in the sanitizer pass only, which runs the same assertions.
set(HVD_PY_TRAINING_JOBS "training_script or example_trains")
# hvd_pytest_k(name file selection): test `name` runs pytest on tests/python/`file`, only the
# cases that `selection` (pytest's -k) picks
function(hvd_pytest_k name file selection)
  add_test(NAME ${name}
           COMMAND ${HVD_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider -k "${selection}"
                   ${PROJECT_SOURCE_DIR}/tests/python/${file})
  set_tests_properties(${name} PROPERTIES TIMEOUT 600 LABELS python ENVIRONMENT "${HVD_PY_ENV}")
endfunction()
hvd_pytest_k(python.jobs test_jobs.py "not (${HVD_PY_TRAINING_JOBS})")
hvd_pytest_k(python.elastic test_elastic.py "not example")
if(NOT HVD_SANITIZE)
  hvd_pytest_k(python.jobs_training test_jobs.py "${HVD_PY_TRAINING_JOBS}")
  hvd_pytest_k(python.elastic_example test_elastic.py "example")
endif()
# hvd.init(comm=...): an mpi4py communicator or a list of ranks as the world, under mpirun and
# horovodrun --mpi, and what horovodrun alone accepts
add_test(NAME python.init_comm
         COMMAND ${HVD_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider
                 ${PROJECT_SOURCE_DIR}/tests/python/test_init_comm.py)
set_tests_properties(python.init_comm PROPERTIES TIMEOUT 300 LABELS python COST 40
                     ENVIRONMENT "${HVD_PY_ENV}")
# CI runs these once, in the sanitizer pass (label sanitize_once, scripts/run-tests.sh; as
# tests/e2e/e2e.cmake's): they start torchrun, mpirun or horovodrun jobs whose Python
# start-up dominates (an import of torch costs 2-2.5 s of CPU, and these tests start about 80
# Python processes), and the sanitized build runs the same assertions on every one of them.
# In the plain pass the dist ones took 340 s of test time on a 2-core Intel VM whose whole CI
# run took 28.6 minutes (2026-11-28); python.jobs and python.elastic 77 s of CPU. A plain
# build's own ctest runs them.
set_tests_properties(python.jobs python.elastic python.dist_jobs python.dist_torchrun_np1
                     python.dist_torchrun_np2 python.dist_torchrun_np3 python.dist_torchrun_np4
                     python.init_comm
                     PROPERTIES LABELS "python;sanitize_once")
# the costliest first (tests/netns/netns.cmake says why)
set_tests_properties(python.jobs PROPERTIES COST 120)
set_tests_properties(python.elastic PROPERTIES COST 100)
