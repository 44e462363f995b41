# Autotune in a job (src/controller/autotune.h, wired in src/core/cycle.c): the gradient step
# of tools/hvd_allreduce_perf -m step with HOROVOD_AUTOTUNE=1 and a small budget. Every rank
# must log the same configurations in the same order (rank 0 decides, all switch at one
# cycle), every result must stay right (the tool checks every element of every step), the
# log must have Horovod's header and a line per configuration; the response cache must be
# tried off and on again; with HOROVOD_CYCLE_TIME and HOROVOD_CACHE_CAPACITY set, the cycle
# time and the cache are pinned; on two pseudo-hosts of two ranks (a grid: init.c,
# plan_hierarchical) hierarchical allreduce and allgather are tried both ways.
foreach(variant tuned pinned hosts)
  set(np 3)
  set(hosts)
  if(variant STREQUAL "pinned")
    set(pin "HOROVOD_CYCLE_TIME=3;HOROVOD_CACHE_CAPACITY=1024")
  elseif(variant STREQUAL "hosts")
    set(pin "AT_HOSTS=1")
    set(np 4)
    set(hosts -H 127.0.0.1:2,127.0.0.2:2)
  else()
    set(pin "HVD_UNUSED=0")
  endif()
  add_test(NAME mrank.autotune_${variant}_np${np}
           COMMAND bash -c [=[
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
HOROVOD_AUTOTUNE_LOG=$dir/log.csv "$@" >"$dir/out" 2>&1; rc=$?
cat "$dir/out" | grep -E "autotune|#wrong|async" | head -40
[[ $rc == 0 ]] || { echo "FAIL: exit $rc (a wrong element exits 1)"; exit 1; }
for ((r = 0; r < NP; r++)); do
  grep "^\[$r\].*autotune:" "$dir/out" | sed 's/.*autotune:/autotune:/' >"$dir/r$r"
  cmp -s "$dir/r0" "$dir/r$r" || { echo "FAIL: ranks 0 and $r switched differently"; exit 1; }
done
n=$(wc -l <"$dir/r0")
((n >= 3)) || { echo "FAIL: rank 0 logged $n switches"; exit 1; }
if [[ ${HOROVOD_CACHE_CAPACITY:-} ]]; then
  ! grep -q "response cache off" "$dir/r0" || { echo "FAIL: the pinned response cache was turned off"; exit 1; }
else
  grep -q "response cache off" "$dir/r0" && grep -q "response cache on" "$dir/r0" ||
    { echo "FAIL: the response cache was not tried both ways"; cat "$dir/r0"; exit 1; }
fi
if [[ ${AT_HOSTS:-} ]]; then
  for k in allreduce allgather; do
    grep -q "hierarchical.*$k on" "$dir/r0" && grep -q "$k off" "$dir/r0" ||
      { echo "FAIL: hierarchical $k was not tried both ways"; cat "$dir/r0"; exit 1; }
  done
fi
head -1 "$dir/log.csv" | grep -qx 'hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,tensor_fusion_threshold,score' ||
  { echo "FAIL: log header"; cat "$dir/log.csv"; exit 1; }
rows=$(($(wc -l <"$dir/log.csv") - 1))
((rows >= n)) || { echo "FAIL: $rows log rows for $n switches"; exit 1; }
if [[ ${HOROVOD_CYCLE_TIME:-} ]]; then
  ! grep -v "cycle time 3.000 ms" "$dir/r0" | grep -q . || { echo "FAIL: the pinned cycle time moved"; exit 1; }
fi
echo "ok: $n switches on every rank, $rows log rows"
]=] autotune timeout -k 10 150 $<TARGET_FILE:horovodrun> --gloo-timeout-seconds 30 -np ${np}
                   ${hosts} $<TARGET_FILE:hvd_allreduce_perf> -m step -N 20 -b 4K -e 256K -w 5
                   -n 200 -c 1)
  set_tests_properties(mrank.autotune_${variant}_np${np} PROPERTIES TIMEOUT 180 LABELS mrank
    ENVIRONMENT "NP=${np};HOROVOD_AUTOTUNE=1;HOROVOD_AUTOTUNE_WARMUP_SAMPLES=1;HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=2;HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=6;HOROVOD_LOG_LEVEL=info;${pin}")
endforeach()
