#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, build with warnings as errors
# and run every test but those labelled sanitize_once; fuzz every parser for a bounded time;
# run the engine's and the shared-memory transport's tests under ThreadSanitizer; then build
# with ASan+UBSan and run every test again but a few (below). Each phase's heading says when
# it started. Exit status 0 only if all pass.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
jobs=$(nproc)
# Tests run one more at a time than there are cores: most of them spend their time waiting
# (for sshd, timeouts, sleeping ranks). (Marking the few that keep both cores busy with
# PROCESSORS 2 made ctest hold them back until two slots were free, which came only at the
# end: 4 minutes of one test at a time.)
test_jobs=$((jobs + 1))

# phase HEADING: the heading, with the minutes and seconds since the start
phase() { printf '=== %s (at %dm%02ds)\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }

run_suite() { # name, ctest selection (e.g. -LE source, or ""), cmake flags...
  local dir="build-$1" select=$2; shift 2
  phase "configure + build: $dir ($*)"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVD_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" >/dev/null
  phase "test: $dir"
  # shellcheck disable=SC2086 # select is ctest options, or nothing
  (cd "$dir" && ctest --output-on-failure -j "$test_jobs" --timeout 300 $select)
}

# (tests labelled sanitize_once run in the sanitizer pass only: tests/netns/netns.cmake and
# tests/e2e/e2e.cmake say why)
run_suite ci "-LE sanitize_once"

# Every parser under libFuzzer (clang), each target for a bounded time from its seeds.
phase "configure + build: build-fuzz (clang, -DHVD_FUZZ=ON)"
# (6 s each of the 10 a developer's build gives them: 13 targets cost 40 s less of CI's 20 min)
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVD_FUZZ=ON \
  -DHVD_FUZZ_SECONDS=6 >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzz_http_head fuzz_scope_decode fuzz_kv_auth \
  fuzz_hosts fuzz_settings fuzz_frame fuzz_negotiate fuzz_cycle fuzz_exec_spec fuzz_service \
  fuzz_elastic_msg fuzz_rank_plan fuzz_slurm_env \
  >/dev/null
phase "fuzz: build-fuzz"
# (two at a time on two cores: each target still gets its time, at half the executions)
(cd build-fuzz && ctest --output-on-failure -j "$jobs" -L fuzz)

# ThreadSanitizer over the engine's threads and the shared-memory transport: the tests
# labelled tsan (tests/mrank/mrank.cmake), on a build of just what they run.
phase "configure + build: build-tsan (-DHVD_TSAN=ON)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVD_WERROR=ON -DHVD_TSAN=ON >/dev/null
cmake --build build-tsan -j "$jobs" --target horovodrun collectives_check async_check p2p_check >/dev/null
phase "test: build-tsan"
(cd build-tsan && TSAN_OPTIONS=second_deadlock_stack=1 ctest --output-on-failure -j "$jobs" --timeout 300 -L tsan)

# ASan/UBSan: abort on the first report so a finding fails the test that caused it. Every
# test again but those labelled source (they read the sources, not the build), harness
# (they check the test bed, not the project's code), slurm (tests/slurm/slurm.cmake says
# why) or plain_once (the Python tests on PyPI's torch, while Debian's torch runs here:
# tests/python/python.cmake): those ran above.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_abort=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_suite asan "-LE source|harness|slurm|plain_once" -DHVD_SANITIZE=ON
phase "done"
