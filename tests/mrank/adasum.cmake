# Adasum (op HVD_ADASUM): tests/mrank/adasum_check.c, one scenario per test (its header lists
# them), run as N processes under the real horovodrun; every rank checks its result against a
# float64 reference of the same tree that it computes itself.
add_executable(adasum_check tests/mrank/adasum_check.c)
target_link_libraries(adasum_check PRIVATE hvd m)
set_target_properties(adasum_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                              ${PROJECT_BINARY_DIR}/tests/mrank)

# hvd_adasum_test(scenario np [VARIANT v] [ENV NAME=value...] [HOSTS h]): test
# mrank.adasum_<scenario>[_<v>]_np<np>.
function(hvd_adasum_test scenario np)
  hvd_mrank_scenario_test(adasum_check ${scenario} ${np} LABEL adasum ${ARGN})
endfunction()

# every rank count from 1 to 8 (odd ones fold into the power-of-two tree), and 9: a tree of four
# levels, which the host arena computes in two stages (shm_adasum.c). Under the sanitizer np 9's
# sweep costs 16 s of nine processes; props_np9 below runs the same two stages there.
foreach(np 1 2 3 4 5 6 7 8)
  hvd_adasum_test(values ${np})
endforeach()
if(NOT HVD_SANITIZE)
  hvd_adasum_test(values 9)
endif()
foreach(np 3 4)
  foreach(scenario fused grouped pset props)
    hvd_adasum_test(${scenario} ${np})
  endforeach()
endforeach()
hvd_adasum_test(props 8)
hvd_adasum_test(props 9)
hvd_adasum_test(errors 2)
# Across TCP (every transfer on sockets) and two pseudo-hosts (shared memory inside each).
hvd_adasum_test(values 3 VARIANT tcp ENV HVD_SHM=0)
hvd_adasum_test(fused 4 VARIANT tcp ENV HVD_SHM=0)
hvd_adasum_test(values 4 VARIANT 2hosts HOSTS 127.0.0.1:2,127.0.0.2:2)
hvd_adasum_test(fused 3 VARIANT 2hosts HOSTS 127.0.0.1:2,127.0.0.2:1)
