hvd_unit_test(common tests/unit/test_common.c)
hvd_unit_test(kv_auth tests/unit/test_kv_auth.c)
hvd_unit_test(http_client tests/unit/test_http_client.c)
# The shared library exports exactly the functions the public headers declare.
add_test(NAME unit.exports COMMAND bash ${PROJECT_SOURCE_DIR}/tests/unit/check_exports.sh
         $<TARGET_FILE:hvd> ${PROJECT_SOURCE_DIR}/include/hvd)
set_tests_properties(unit.exports PROPERTIES LABELS unit)
hvd_unit_test(store_decode tests/unit/test_store_decode.c)
# Sources follow .clang-format. Label source: it reads the sources, not the build, so
# run-tests.sh runs it in one build only.
add_test(NAME unit.format COMMAND bash ${PROJECT_SOURCE_DIR}/tests/unit/check_format.sh
         ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.format PROPERTIES LABELS "unit;source")
# No failing return under src/ leaves the error message unset (common/error.h).
add_test(NAME unit.error_messages COMMAND bash
         ${PROJECT_SOURCE_DIR}/tests/unit/check_error_messages.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.error_messages PROPERTIES LABELS "unit;source")
# Ranks started by an MPI launcher: their place from OMPI_* / PMI_* variables.
hvd_unit_test(mpi_env tests/unit/test_mpi_env.c)
# Slurm's per-node counts and host lists.
hvd_unit_test(slurm_env tests/unit/test_slurm_env.c)
# No two files of a folder of src/ call each other in a circle (from the objects' symbols).
if(HVD_PYTHON_EXECUTABLE)
  set(HVD_LAYERS_PYTHON ${HVD_PYTHON_EXECUTABLE})
else()
  set(HVD_LAYERS_PYTHON python3)
endif()
add_test(NAME unit.layers COMMAND ${HVD_LAYERS_PYTHON} ${PROJECT_SOURCE_DIR}/tests/unit/check_layers.py
         ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.layers PROPERTIES LABELS "unit;source")
