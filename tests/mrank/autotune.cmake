# Autotune in a job (src/controller/autotune.h, wired in src/core/cycle.c): the gradient step
# of tools/hvd_allreduce_perf -m step with HOROVOD_AUTOTUNE=1 and a small budget. Every rank
# must log the same configurations in the same order (rank 0 decides, all switch at one
# cycle), every result must stay right (the tool checks every element of every step), the
# log must have Horovod's header and a line per configuration; with HOROVOD_CYCLE_TIME set,
# the cycle time is pinned.
foreach(variant tuned pinned)
  if(variant STREQUAL "pinned")
    set(pin "HOROVOD_CYCLE_TIME=3")
  else()
    set(pin "HVD_UNUSED=0")
  endif()
  add_test(NAME mrank.autotune_${variant}_np3
           COMMAND bash -c [=[
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
HOROVOD_AUTOTUNE_LOG=$dir/log.csv "$@" >"$dir/out" 2>&1; rc=$?
cat "$dir/out" | grep -E "autotune|#wrong|async" | head -40
[[ $rc == 0 ]] || { echo "FAIL: exit $rc (a wrong element exits 1)"; exit 1; }
for r in 0 1 2; do
  grep "^\[$r\].*autotune:" "$dir/out" | sed 's/.*autotune:/autotune:/' >"$dir/r$r"
done
n=$(wc -l <"$dir/r0")
((n >= 3)) || { echo "FAIL: rank 0 logged $n switches"; exit 1; }
cmp -s "$dir/r0" "$dir/r1" && cmp -s "$dir/r0" "$dir/r2" || { echo "FAIL: the ranks switched differently"; exit 1; }
head -1 "$dir/log.csv" | grep -qx 'hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,tensor_fusion_threshold,score' ||
  { echo "FAIL: log header"; cat "$dir/log.csv"; exit 1; }
rows=$(($(wc -l <"$dir/log.csv") - 1))
((rows >= n)) || { echo "FAIL: $rows log rows for $n switches"; exit 1; }
if [[ ${HOROVOD_CYCLE_TIME:-} ]]; then
  ! grep -v "cycle time 3.000 ms" "$dir/r0" | grep -q . || { echo "FAIL: the pinned cycle time moved"; exit 1; }
fi
echo "ok: $n switches on every rank, $rows log rows"
]=] autotune timeout -k 10 150 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 30 -np 3
                   $<TARGET_FILE:hvd_allreduce_perf> -m step -N 20 -b 4K -e 256K -w 5 -n 200 -c 1)
  set_tests_properties(mrank.autotune_${variant}_np3 PROPERTIES TIMEOUT 180 LABELS mrank
    ENVIRONMENT "HOROVOD_AUTOTUNE=1;HOROVOD_AUTOTUNE_WARMUP_SAMPLES=1;HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=2;HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=6;HOROVOD_LOG_LEVEL=info;${pin}")
endforeach()
