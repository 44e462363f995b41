# Reduction kernels: each dtype and op checked against values computed independently.
hvd_unit_test(reduce tests/unit/test_reduce.c)
# Adasum's Gram-matrix and weighted-sum kernels (the host arena's tree) against long double sums.
hvd_unit_test(adasum_math tests/unit/test_adasum_math.c)
# The reduction kernels are vectorised (GCC's -fopt-info-vec report).
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  add_test(NAME unit.vectorized COMMAND bash ${PROJECT_SOURCE_DIR}/tests/unit/check_vectorized.sh
           ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR})
  set_tests_properties(unit.vectorized PROPERTIES LABELS "unit;source") # reads sources only
endif()
# Data-plane wire codecs: handshake authentication and frame headers.
hvd_unit_test(frame tests/unit/test_frame.c)
# Negotiation message codecs (request and response lists of the core).
hvd_unit_test(negotiate tests/unit/test_negotiate.c)
target_compile_definitions(negotiate PRIVATE HVD_FUZZ_SEEDS="${PROJECT_SOURCE_DIR}/tests/fuzz/corpus")
# The engine's per-cycle control message codec, and its fuzz seeds.
hvd_unit_test(cycle_msg tests/unit/test_cycle_msg.c)
target_compile_definitions(cycle_msg PRIVATE HVD_FUZZ_SEEDS="${PROJECT_SOURCE_DIR}/tests/fuzz/corpus")
# Ranks as threads over loopback TCP: control-plane gather/broadcast and an allreduce.
hvd_unit_test(control tests/unit/test_control.c)
# The shared-memory ring of same-host peers and its memfd.
hvd_unit_test(shm_ring tests/unit/test_shm_ring.c)
hvd_unit_test(shm_arena tests/unit/test_shm_arena.c)
hvd_unit_test(coll_what tests/unit/test_coll_what.c)
