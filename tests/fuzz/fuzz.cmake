# libFuzzer targets for every parser, built only with -DHVD_FUZZ=ON and clang. Each also runs
# as a ctest test for a bounded time (HVD_FUZZ_SECONDS) from its seed corpus.
if(HVD_FUZZ)
  set(HVD_FUZZ_SECONDS 10 CACHE STRING "Seconds each fuzz target runs under ctest")
  foreach(name http_head scope_decode kv_auth hosts settings frame negotiate cycle exec_spec
               service elastic_msg rank_plan slurm_env)
    add_executable(fuzz_${name} tests/fuzz/fuzz_${name}.c)
    target_link_libraries(fuzz_${name} PRIVATE hvd_runner)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    # new inputs go to the build tree (the first corpus directory), seeds stay read-only
    file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/fuzz/corpus/${name} ${PROJECT_BINARY_DIR}/fuzz/crashes)
    add_test(NAME fuzz.${name}
             COMMAND fuzz_${name} -max_total_time=${HVD_FUZZ_SECONDS} -timeout=10
                     -rss_limit_mb=1024 -artifact_prefix=${PROJECT_BINARY_DIR}/fuzz/crashes/
                     ${PROJECT_BINARY_DIR}/fuzz/corpus/${name}
                     ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 120)
  endforeach()
endif()
