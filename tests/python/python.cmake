# The horovod package's tests (label python), registered once per target interpreter
# (python/CMakeLists.txt): python.* under the main one (PyTorch 2.13 from PyPI, in the venv that
# scripts/install-deps.sh makes) and python_debian.* under Debian's /usr/bin/python3 with its
# python3-torch (1.13 on Debian 12, the oldest supported), when both are there.
#
# tests/python/ranks/ run by pytest on every rank of a horovodrun job at np 1, 2 and 3;
# tests/python/dist_ranks/ the torch.distributed backend under torchrun and horovodrun at np 1-4;
# tests/python/test_jobs.py drives whole jobs (a rank SIGKILLed mid-training, the PyTorch
# example, a script written like Horovod's pytorch_mnist.py) from one pytest process,
# test_elastic.py elastic jobs (workers killed and added, the elastic example),
# test_dist_jobs.py whole DDP and torchrun jobs, test_torch2.py what torch 2 adds (FSDP,
# DTensor, distributed checkpoints, torch.compile), test_spark.py horovod.spark on pyspark.
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
  # when libstdc++ came only later, with torch's dlopen. malloc_context_size=8: every
  # allocation of torch and CPython records its stack, and 8 frames (of 30) still place an
  # allocation in libhvd's code, at 10% less CPU for an import of torch.
  # quarantine_size_mb=16 (of 256): freed memory waits less before reuse, and an import of
  # torch touches 160 MB less, 0.4 s less per process (a few hundred start in a CI run).
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE HVD_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE HVD_LIBSTDCXX OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND HVD_PY_ENV "LD_PRELOAD=${HVD_LIBASAN}:${HVD_LIBSTDCXX}"
       "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_abort=1:malloc_context_size=8:quarantine_size_mb=16"
       "LIBC_FATAL_STDERR_=1")
endif()

# The whole-training jobs (the PyTorch example, the Horovod-style MNIST script, the elastic
# example killed mid-epoch) never run under the sanitizer: torch runs 3-4x slower under the
# preloaded runtime (the elastic example's kill scenario did not finish in the test's time
# there). Their optimizer, compression, broadcast and elastic-state paths run under it in
# tests/python/ranks/ and in the other scenarios.
set(HVD_PY_TRAINING_JOBS "training_script or example_trains")

# hvd_python_tests(prefix python mode): every Python test under one interpreter. Which pass of
# scripts/run-tests.sh runs what (labels plain_once and sanitize_once):
#  - mode both (the only interpreter): ranks and dist_horovodrun in both passes; the other job
#    tests in the sanitizer pass only, since they start torchrun, mpirun or horovodrun jobs
#    whose Python start-up dominates (an import of torch costs 2-2.5 s of CPU, and they start
#    about 80 Python processes) and the sanitized build runs the same assertions; the training
#    jobs in the plain pass only.
#  - mode plain (the main interpreter beside Debian's): everything in the plain pass.
#  - mode sanitize (Debian's beside the main one): everything in the sanitizer pass, but the
#    training jobs, in the plain pass.
# So each interpreter runs every test once per CI run, and the sanitizer sees every libhvd and
# extension path of a job's life.
function(hvd_python_tests prefix py mode)
  # What this interpreter lacks is said here, and those tests are left out of its run (never
  # counted as passed): PyPI's torchvision does not import beside the CPU wheel of torch 2.13,
  # mpi4py may be missing, torch 1 has no FSDP2 or DTensor. One probe (each import of torch
  # costs seconds): "<torch major>;<torchvision imports>;<mpi4py imports>".
  execute_process(
    COMMAND ${py} -c "
import torch
def ok(m):
    try:
        __import__(m)
        return 1
    except Exception:
        return 0
print(torch.__version__.split('.')[0], ok('torchvision'), ok('mpi4py'), ok('pyspark'), sep=';')"
    OUTPUT_VARIABLE probe OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(LENGTH probe probe_n)
  if(NOT probe_n EQUAL 4)
    set(probe "0;0;0;0")
  endif()
  list(GET probe 0 torch_major)
  list(GET probe 1 has_vision)
  list(GET probe 2 has_mpi4py)
  list(GET probe 3 has_pyspark)
  set(deselect "")
  if(NOT has_vision)
    message(STATUS "${py}: no torchvision: ${prefix}.jobs_training leaves out the "
                   "Horovod-style MNIST script (python_debian.* runs it)")
    set(deselect " and not horovod_style")
  endif()

  # --capture=sys: pytest captures Python's output only, so what native code writes to fd 2
  # when a rank dies (the sanitizer's report, glibc's abort message, libhvd's log) reaches
  # the test log instead of a capture file that dies with the process.
  set(pytest ${py} -m pytest -q -p no:cacheprovider)
  set(ranks_tests)
  foreach(np 1 2 3)
    add_test(NAME ${prefix}.ranks_np${np}
             COMMAND timeout -k 10 580 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60
                     -np ${np} ${pytest} -x --capture=sys ${PROJECT_SOURCE_DIR}/tests/python/ranks)
    set_tests_properties(${prefix}.ranks_np${np} PROPERTIES TIMEOUT 600)
    list(APPEND ranks_tests ${prefix}.ranks_np${np})
  endforeach()
  # torch.distributed on the "hvd" backend (tests/python/dist_ranks/): every collective at np
  # 1-4 under torchrun (the world forms through torch's c10d store) and under horovodrun (the
  # world is the job's). (tests/python/torchrun.py: torchrun with a rendezvous port of each
  # job's own.)
  set(torchrun_tests)
  foreach(np 1 2 3 4)
    add_test(NAME ${prefix}.dist_torchrun_np${np}
             COMMAND timeout -k 10 280 ${py} ${PROJECT_SOURCE_DIR}/tests/python/torchrun.py
                     --nproc_per_node ${np} -m pytest -q -x -p no:cacheprovider --capture=sys
                     ${PROJECT_SOURCE_DIR}/tests/python/dist_ranks)
    add_test(NAME ${prefix}.dist_horovodrun_np${np}
             COMMAND timeout -k 10 280 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60
                     -np ${np} ${pytest} -x --capture=sys
                     ${PROJECT_SOURCE_DIR}/tests/python/dist_ranks)
    set_tests_properties(${prefix}.dist_torchrun_np${np} ${prefix}.dist_horovodrun_np${np}
                         PROPERTIES TIMEOUT 300)
    list(APPEND ranks_tests ${prefix}.dist_horovodrun_np${np})
    list(APPEND torchrun_tests ${prefix}.dist_torchrun_np${np})
  endforeach()
  add_test(NAME ${prefix}.dist_jobs COMMAND ${pytest} ${PROJECT_SOURCE_DIR}/tests/python/test_dist_jobs.py
                                            ${PROJECT_SOURCE_DIR}/tests/python/test_store_attempt.py)
  set(job_tests ${prefix}.dist_jobs)
  if(torch_major GREATER_EQUAL 2)
    add_test(NAME ${prefix}.torch2 COMMAND ${pytest} ${PROJECT_SOURCE_DIR}/tests/python/test_torch2.py)
    list(APPEND job_tests ${prefix}.torch2)
  else()
    message(STATUS "${py}: torch ${torch_major}.x: no ${prefix}.torch2 (FSDP's, DTensor's and "
                   "distributed checkpoints' tests are torch 2's)")
  endif()
  # test_jobs.py and test_elastic.py, split in two tests each: the training jobs and the rest
  add_test(NAME ${prefix}.jobs
           COMMAND ${pytest} -k "not (${HVD_PY_TRAINING_JOBS})${deselect}"
                   ${PROJECT_SOURCE_DIR}/tests/python/test_jobs.py)
  add_test(NAME ${prefix}.elastic
           COMMAND ${pytest} -k "not example" ${PROJECT_SOURCE_DIR}/tests/python/test_elastic.py)
  list(APPEND job_tests ${prefix}.jobs ${prefix}.elastic)
  # hvd.init(comm=...): an mpi4py communicator or a list of ranks as the world, under mpirun
  # and horovodrun --mpi, and what horovodrun alone accepts
  if(NOT has_mpi4py)
    message(STATUS "${py}: no mpi4py: no ${prefix}.init_comm")
  else()
    add_test(NAME ${prefix}.init_comm
             COMMAND ${pytest} ${PROJECT_SOURCE_DIR}/tests/python/test_init_comm.py)
    set_tests_properties(${prefix}.init_comm PROPERTIES TIMEOUT 300 COST 40)
    list(APPEND job_tests ${prefix}.init_comm)
  endif()
  set_tests_properties(${job_tests} PROPERTIES TIMEOUT 600)
  # the costliest first (tests/netns/netns.cmake says why)
  set_tests_properties(${prefix}.jobs PROPERTIES COST 120)
  set_tests_properties(${prefix}.elastic PROPERTIES COST 100)
  set_tests_properties(${prefix}.dist_jobs PROPERTIES COST 90)
  if(TEST ${prefix}.torch2)
    set_tests_properties(${prefix}.torch2 PROPERTIES COST 90)
  endif()

  set(training_tests)
  if(NOT HVD_SANITIZE)
    add_test(NAME ${prefix}.jobs_training
             COMMAND ${pytest} -k "(${HVD_PY_TRAINING_JOBS})${deselect}"
                     ${PROJECT_SOURCE_DIR}/tests/python/test_jobs.py)
    add_test(NAME ${prefix}.elastic_example
             COMMAND ${pytest} -k "example" ${PROJECT_SOURCE_DIR}/tests/python/test_elastic.py)
    set_tests_properties(${prefix}.jobs_training ${prefix}.elastic_example PROPERTIES TIMEOUT 600)
    set(training_tests ${prefix}.jobs_training ${prefix}.elastic_example)
  endif()

  # horovod.spark on a real Spark (tests/python/test_spark.py): every test on local[3,2] (one
  # executor in this JVM, a failed task tried twice) but the one that kills an executor's JVM;
  # on local-cluster (two executors, JVMs of their own) what executors of their own change: a
  # lost task or executor and Spark's retry, elastic rejoining (ranks across executors of two
  # hosts: netns.spark).
  # The plain pass only: a JVM does not run under the sanitizer's preloaded runtime.
  # HVD_SPARK_JAVA_ENV (CMakeLists.txt): Spark's JVMs with less start-up CPU.
  set(spark_tests)
  if(NOT has_pyspark)
    message(STATUS "${py}: no pyspark: no ${prefix}.spark_*")
  elseif(NOT HVD_SANITIZE)
    add_test(NAME ${prefix}.spark_local
             COMMAND ${pytest} -k "not lost_executor" ${PROJECT_SOURCE_DIR}/tests/python/test_spark.py)
    add_test(NAME ${prefix}.spark_cluster
             COMMAND ${pytest} -k "lost or elastic"
                     ${PROJECT_SOURCE_DIR}/tests/python/test_spark.py)
    set(spark_tests ${prefix}.spark_local ${prefix}.spark_cluster)
    set_tests_properties(${spark_tests} PROPERTIES TIMEOUT 600 COST 60)
  endif()

  set(all ${ranks_tests} ${torchrun_tests} ${job_tests} ${training_tests} ${spark_tests})
  set_tests_properties(${all} PROPERTIES ENVIRONMENT "${HVD_PY_ENV}" LABELS python)
  if(spark_tests)
    set_tests_properties(${prefix}.spark_local PROPERTIES ENVIRONMENT
                         "${HVD_PY_ENV};SPARK_MASTER=local[3,2];${HVD_SPARK_JAVA_ENV}")
    set_tests_properties(${prefix}.spark_cluster PROPERTIES ENVIRONMENT
                         "${HVD_PY_ENV};SPARK_MASTER=local-cluster[2,1,1024];${HVD_SPARK_JAVA_ENV}")
  endif()
  if(mode STREQUAL "both")
    set_tests_properties(${torchrun_tests} ${job_tests} PROPERTIES LABELS "python;sanitize_once")
    if(spark_tests)
      set_tests_properties(${spark_tests} PROPERTIES LABELS "python;plain_once")
    endif()
  elseif(mode STREQUAL "plain")
    set_tests_properties(${all} PROPERTIES LABELS "python;plain_once")
  else()
    set_tests_properties(${ranks_tests} ${torchrun_tests} ${job_tests}
                         PROPERTIES LABELS "python;sanitize_once")
  endif()
endfunction()

if(HVD_PYTHON_DEBIAN_EXECUTABLE)
  hvd_python_tests(python ${HVD_PYTHON_EXECUTABLE} plain)
  hvd_python_tests(python_debian ${HVD_PYTHON_DEBIAN_EXECUTABLE} sanitize)
else()
  hvd_python_tests(python ${HVD_PYTHON_EXECUTABLE} both)
endif()
