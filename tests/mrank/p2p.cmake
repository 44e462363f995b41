# Point-to-point messages (hvd_send_async and friends): tests/mrank/p2p_check.c, one scenario
# per test (its header lists them), run as N processes under the real horovodrun. Every rank
# checks every byte it receives.
add_executable(p2p_check tests/mrank/p2p_check.c)
target_link_libraries(p2p_check PRIVATE hvd Threads::Threads)
set_target_properties(p2p_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                           ${PROJECT_BINARY_DIR}/tests/mrank)

# hvd_p2p_test(scenario np [VARIANT v] [ENV NAME=value...] [HOSTS h]): test
# mrank.p2p_<scenario>[_<v>]_np<np>.
function(hvd_p2p_test scenario np)
  hvd_mrank_scenario_test(p2p_check ${scenario} ${np} LABEL p2p ${ARGN})
endfunction()

foreach(np 2 3 4)
  hvd_p2p_test(ring ${np})
endforeach()
foreach(scenario many order dtypes mixed)
  hvd_p2p_test(${scenario} 3)
endforeach()
hvd_p2p_test(many 4)
hvd_p2p_test(tags 4)
hvd_p2p_test(mismatch 3)
hvd_p2p_test(invalid 2)
# Without the response cache (p2p never uses it; the collectives among them then negotiate
# every time too).
hvd_p2p_test(mixed 2 VARIANT nocache ENV HOROVOD_CACHE_CAPACITY=0)
# Across TCP: every transfer forced onto sockets (HVD_SHM=0), and two pseudo-hosts whose
# ranks reach each other over TCP while each host's pair shares memory.
hvd_p2p_test(ring 3 VARIANT tcp ENV HVD_SHM=0)
hvd_p2p_test(many 3 VARIANT tcp ENV HVD_SHM=0)
hvd_p2p_test(mixed 3 VARIANT tcp ENV HVD_SHM=0)
hvd_p2p_test(ring 4 VARIANT 2hosts HOSTS 127.0.0.1:2,127.0.0.2:2)
hvd_p2p_test(many 4 VARIANT 2hosts HOSTS 127.0.0.1:2,127.0.0.2:2)

# The stall inspector names a message whose partner posts late, and the partner alone as
# missing (rank 2 takes no part in it); both sides then complete.
add_test(NAME mrank.p2p_stall_np3
         COMMAND bash -c [=[
out=$("$@" 2>&1); rc=$?; printf '%s\n' "$out"
[[ $rc == 0 ]] || { echo "FAIL: exit $rc"; exit 1; }
grep -q 'Missing ranks:' <<<"$out" && grep -q '^.*1 (host [^)]*): \[p2p:0->1:tag=77:#0\]' <<<"$out" ||
  { echo "FAIL: no stall warning naming p2p:0->1:tag=77:#0 and rank 1"; exit 1; }
! grep -q '<stderr>:2 (host' <<<"$out" || { echo "FAIL: rank 2 named as missing"; exit 1; }
]=] p2p_stall timeout -k 10 100 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 30 -np 3
                 $<TARGET_FILE:p2p_check> stall --delay-ms 3500)
set_tests_properties(mrank.p2p_stall_np3 PROPERTIES TIMEOUT 120 LABELS "mrank;p2p"
                     ENVIRONMENT HOROVOD_STALL_CHECK_TIME_SECONDS=1)

# A peer that dies while its partner waits for a message from it: the wait fails with
# HVD_ERR_PEER_LOST naming the dead rank and its host, promptly (not at a deadline).
add_test(NAME mrank.p2p_peer_death_np2
         COMMAND bash -c [=[
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$@" --dir "$dir"; rc=$?
[[ $rc == 3 ]] || { echo "FAIL: horovodrun exit $rc, expected the victim's 3"; exit 1; }
[[ -f $dir/rank.0 ]] || { echo "FAIL: rank 0 wrote no result"; exit 1; }
cat "$dir/rank.0"
grep -q '^status=HVD_ERR_PEER_LOST$' "$dir/rank.0" || { echo "FAIL: status"; exit 1; }
grep -q '^msg=.*rank 1 (host ' "$dir/rank.0" || { echo "FAIL: the message names no rank 1 (host"; exit 1; }
awk -F= '/^seconds=/ { exit !($2 < 10) }' "$dir/rank.0" || { echo "FAIL: too slow"; exit 1; }
]=] p2p_peer_death timeout -k 10 100 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 30
                 -np 2 $<TARGET_FILE:p2p_check> peer_death)
set_tests_properties(mrank.p2p_peer_death_np2 PROPERTIES TIMEOUT 120 LABELS "mrank;p2p")

# ThreadSanitizer (scripts/run-tests.sh, `ctest -L tsan`): posts, waits and the background
# thread with blocking collectives on another thread.
set_property(TEST mrank.p2p_mixed_np3 mrank.p2p_many_np3 APPEND PROPERTY LABELS tsan)
