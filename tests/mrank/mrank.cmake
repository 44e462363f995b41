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
# counts to a few dtype/op pairs. The one allreduce of 64 MiB (--big) runs in the plain build
# only: under the sanitizer it is the same chunked path as the sweep's megabyte counts, at
# 7 s of CPU per test.
if(HVD_SANITIZE)
  set(HVD_MRANK_BIG "")
else()
  set(HVD_MRANK_BIG --big)
endif()
hvd_mrank_test(collectives_np1 1 ${HVD_MRANK_BIG})
hvd_mrank_test(collectives_np2 2 ${HVD_MRANK_BIG})
# (in both passes of CI: the plain one runs --big; the other mrank tests run in the sanitizer
# pass only, CMakeLists.txt)
set_property(TEST mrank.collectives_np1 mrank.collectives_np2 APPEND PROPERTY LABELS both_passes)
hvd_mrank_test(collectives_np3 3 --max-count 65537)
hvd_mrank_test(collectives_np4 4 --quick)
hvd_mrank_test(collectives_np7 7 --quick)
hvd_mrank_test(collectives_np8 8 --quick)
# the costliest first (tests/netns/netns.cmake says why)
set_tests_properties(mrank.collectives_np2 mrank.collectives_np7 mrank.collectives_np8
                     PROPERTIES COST 45)
# Same-host ranks exchange through shared memory by default; forced TCP (HVD_SHM=0) must
# still pass everything.
hvd_mrank_test(collectives_tcp_np3 3 --max-count 65537)
set_tests_properties(mrank.collectives_tcp_np3 PROPERTIES ENVIRONMENT HVD_SHM=0)
# The planned check-in (core/check_in.h; by default only above 1,024 ranks) on every job
# size: two host names on this one machine, peers' addresses learnt at first connection,
# and again at every re-initialisation.
add_test(NAME mrank.collectives_planned_np5
         COMMAND timeout -k 10 280 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60 -np 5
                 -H localhost:2,127.0.0.2:3 $<TARGET_FILE:collectives_check> --quick)
add_test(NAME mrank.reinit_planned_np4
         COMMAND timeout -k 10 280 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60 -np 4
                 -H localhost:2,127.0.0.2:2 $<TARGET_FILE:collectives_check> --mode reinit
                 --iters 20)
set_tests_properties(mrank.collectives_planned_np5 mrank.reinit_planned_np4 PROPERTIES
                     TIMEOUT 300 LABELS mrank ENVIRONMENT HVD_CHECK_IN_ALL_MAX=0)
# Three pseudo-hosts of two ranks with the default settings: the engine's cycle messages (and
# with them every small blocking call's data) cross hosts first, then each host's arena.
add_test(NAME mrank.collectives_3hosts_np6
         COMMAND timeout -k 10 280 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60 -np 6
                 -H 127.0.0.1:2,127.0.0.2:2,127.0.0.3:2 $<TARGET_FILE:collectives_check> --quick)
set_tests_properties(mrank.collectives_3hosts_np6 PROPERTIES TIMEOUT 300 LABELS mrank)
# Blocking allreduces on the global, local and cross communicators of four pseudo-hosts of
# two ranks (tests/mrank/comms_check.c): the local ones' 64 KiB cycle messages make bundles
# longer than an arena slot.
add_executable(comms_check tests/mrank/comms_check.c)
target_link_libraries(comms_check PRIVATE hvd)
set_target_properties(comms_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
add_test(NAME mrank.comms_4hosts_np8
         COMMAND timeout -k 10 280 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 60 -np 8
                 -H 127.0.0.1:2,127.0.0.2:2,127.0.0.3:2,127.0.0.4:2 $<TARGET_FILE:comms_check>)
set_tests_properties(mrank.comms_4hosts_np8 PROPERTIES TIMEOUT 300 LABELS mrank)
hvd_mrank_test(reinit_np2 2 --mode reinit --iters 100)
hvd_mrank_test(reinit_np4 4 --mode reinit --iters 30)

# The core's named asynchronous operations: tests/mrank/async_check.c, one scenario per test
# (its header lists them), every rank checking every result exactly. The fusion tests run
# with HOROVOD_TIMELINE set (tests/mrank/timeline_check.sh --run) and then check the timeline:
# valid JSON, negotiation and allreduce of the named tensors, and MEMCPY_IN_FUSION_BUFFER (so
# fusion really happened). Other core behaviour runs under the real launcher in
# tests/e2e/test_core_faults.sh (peer death, stalls), test_core_fault_messages.sh and
# test_core_timeline.sh.
add_executable(async_check tests/mrank/async_check.c)
target_link_libraries(async_check PRIVATE hvd m Threads::Threads)
set_target_properties(async_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                             ${PROJECT_BINARY_DIR}/tests/mrank)

# hvd_async_test(scenario np [VARIANT v] [ENV NAME=value...] [TIMELINE checks...]):
# test mrank.async_<scenario>[_<v>]_np<np>.
function(hvd_async_test scenario np)
  cmake_parse_arguments(A "" "VARIANT" "ENV;TIMELINE" ${ARGN})
  set(name mrank.async_${scenario})
  if(A_VARIANT)
    set(name ${name}_${A_VARIANT})
  endif()
  set(name ${name}_np${np})
  set(cmd timeout -k 10 100 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 30 -np ${np}
          $<TARGET_FILE:async_check> ${scenario})
  if(A_TIMELINE)
    set(cmd bash ${PROJECT_SOURCE_DIR}/tests/mrank/timeline_check.sh --run ${A_TIMELINE} --
            ${cmd})
  endif()
  add_test(NAME ${name} COMMAND ${cmd})
  set_tests_properties(${name} PROPERTIES TIMEOUT 120 LABELS "mrank;async")
  if(A_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${A_ENV}")
  endif()
endfunction()

foreach(np 1 2 3 4)
  hvd_async_test(order ${np})
endforeach()
# Without the response cache every name is negotiated every time.
hvd_async_test(order 3 VARIANT nocache ENV HOROVOD_CACHE_CAPACITY=0)
set(fusion_checks --balanced --activity NEGOTIATE_ALLREDUCE --activity ALLREDUCE
    --activity MEMCPY_IN_FUSION_BUFFER --activity MEMCPY_OUT_FUSION_BUFFER --fused fuse.
    --tensor fuse.000 --tensor fuse.001 --tensor fuse.050 --tensor fuse.099)
hvd_async_test(fusion 2 TIMELINE ${fusion_checks} --ready-ranks 2)
hvd_async_test(fusion 4 TIMELINE ${fusion_checks} --ready-ranks 4)
# A fusion buffer smaller than one step's tensors (several fused groups per cycle) and a
# response cache smaller than the names in use (evictions every step). Not --balanced: an
# eviction can leave a negotiation open in the timeline, which mrank.async_evict_np2 shows
# deterministically.
list(REMOVE_ITEM fusion_checks --balanced)
hvd_async_test(fusion 3 VARIANT small_buffer_cache
               ENV HOROVOD_FUSION_THRESHOLD=16384 HOROVOD_CACHE_CAPACITY=16
               TIMELINE ${fusion_checks} --ready-ranks 3)
# A name waiting as a cache hit is evicted by another: results right, timeline balanced.
hvd_async_test(evict 2 ENV HOROVOD_CACHE_CAPACITY=1
               TIMELINE --balanced --tensor ev.x --tensor ev.y --activity NEGOTIATE_ALLREDUCE)
foreach(np 2 3)
  hvd_async_test(mixed ${np})
endforeach()
# What nobody waits for moves anyway (the background thread's wake-up on a push).
hvd_async_test(unwaited 1)
hvd_async_test(unwaited 2)
# hvd_wait_resting: right results, and no busy-polling while a rank is late.
hvd_async_test(resting 1)
hvd_async_test(resting 2)
hvd_async_test(resting 3)
hvd_async_test(threads 2)
hvd_async_test(threads 4)
hvd_async_test(duplicate 2)
hvd_async_test(duplicate 3)
foreach(np 2 3 4)
  hvd_async_test(mismatch ${np})
  hvd_async_test(partial ${np})
  hvd_async_test(join ${np})
endforeach()
hvd_async_test(shutdown 2)
hvd_async_test(shutdown 3)

# ThreadSanitizer (scripts/run-tests.sh builds with -DHVD_TSAN=ON and runs `ctest -L tsan`):
# the engine's threads (callers, waiters and the background thread: threads, fusion, order,
# shutdown, the error paths, re-initialisation) and the shared-memory transport with its host
# arena (collectives at np 4). TSan sees each process's threads; what ranks share across
# processes it cannot see, which the conformance and fault tests cover.
set_property(TEST mrank.async_threads_np2 mrank.async_threads_np4 mrank.async_fusion_np2
             mrank.async_order_np3 mrank.async_shutdown_np2 mrank.async_mismatch_np3
             mrank.async_join_np2 mrank.async_partial_np3 mrank.reinit_np2
             mrank.collectives_np4 APPEND PROPERTY LABELS tsan)
