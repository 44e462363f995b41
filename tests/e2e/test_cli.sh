#!/usr/bin/env bash
# The print-and-exit flags, flag -> environment exports, --config-file precedence, and clear
# usage errors.
source "$(dirname "$0")/lib.sh"

run_hvd --version
expect_eq "--version exit" 0 "$RC"
expect_contains "--version" "$OUT" "0.1.0"
run_hvd -v
expect_contains "-v" "$OUT" "0.1.0"

run_hvd --check-build
expect_eq "--check-build exit" 0 "$RC"
expect_contains "check-build controllers" "$OUT" "Available Controllers:"
expect_contains "check-build gloo" "$OUT" "[X] Gloo"
expect_contains "check-build no MPI" "$OUT" "[ ] MPI"
if [[ -d "$HVD_BUILD_DIR/python/horovod/torch" ]]; then
  expect_contains "check-build PyTorch" "$OUT" "[X] PyTorch"
fi

run_hvd --help
expect_eq "--help exit" 0 "$RC"
for flag in -np --hosts --hostfile --dry-run --output-filename --verbose --start-timeout \
  --config-file --fusion-threshold-mb --timeline-filename --log-level --min-np; do
  expect_contains "--help mentions $flag" "$OUT" "$flag"
done

run_hvd --help-env
expect_eq "--help-env exit" 0 "$RC"
expect_contains "--help-env" "$OUT" "HOROVOD_GLOO_TIMEOUT_SECONDS"

# flags become the workers' environment
show='env | grep -E "^(HOROVOD_(FUSION_THRESHOLD|CYCLE_TIME|CACHE_CAPACITY|LOG_LEVEL|GLOO_TIMEOUT_SECONDS|TIMELINE|STALL_CHECK_DISABLE)|NCCL_IB_DISABLE)=" | sort'
run_hvd -np 1 --fusion-threshold-mb 10 --cycle-time-ms 20 --cache-capacity 512 --log-level INFO \
  --gloo-timeout-seconds 60 --timeline-filename "$TMP/tl.json" --no-stall-check --tcp sh -c "$show"
expect_eq "exit" 0 "$RC"
for kv in HOROVOD_FUSION_THRESHOLD=10485760 HOROVOD_CYCLE_TIME=20.0 HOROVOD_CACHE_CAPACITY=512 \
  HOROVOD_LOG_LEVEL=INFO HOROVOD_GLOO_TIMEOUT_SECONDS=60 "HOROVOD_TIMELINE=$TMP/tl.json" \
  HOROVOD_STALL_CHECK_DISABLE=1 NCCL_IB_DISABLE=1; do
  expect_contains "export $kv" "$OUT" "[0]<stdout>:$kv"
done
# abbreviations and --opt=value
run_hvd -np 1 --fusion-thr=3 --cycle-time=2.5 sh -c "$show"
expect_contains "prefix + =" "$OUT" "HOROVOD_FUSION_THRESHOLD=3145728"
expect_contains "float formatting" "$OUT" "HOROVOD_CYCLE_TIME=2.5"
# nothing exported for absent flags; the launcher's own environment passes through
HOROVOD_GLOO_TIMEOUT_SECONDS=1800 run_hvd -np 1 sh -c "$show"
expect_not_contains "no fusion export" "$OUT" "HOROVOD_FUSION_THRESHOLD"
expect_contains "inherited env" "$OUT" "HOROVOD_GLOO_TIMEOUT_SECONDS=1800"

# config file, with a flag given on the command line winning
cat >"$TMP/cfg.yaml" <<'YAML'
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
logging:
  level: DEBUG
YAML
run_hvd -np 1 --cache-capacity 7 --config-file "$TMP/cfg.yaml" sh -c "$show"
expect_eq "config exit" 0 "$RC"
expect_contains "config fusion" "$OUT" "HOROVOD_FUSION_THRESHOLD=33554432"
expect_contains "config cycle" "$OUT" "HOROVOD_CYCLE_TIME=10.0"
expect_contains "config level" "$OUT" "HOROVOD_LOG_LEVEL=DEBUG"
expect_contains "flag wins over config" "$OUT" "HOROVOD_CACHE_CAPACITY=7"
printf 'params:\n  fusion_threshold_mb: lots\n' >"$TMP/bad.yaml"
run_hvd -np 1 --config-file "$TMP/bad.yaml" true
expect_eq "bad config exit" 2 "$RC"
expect_contains "bad config names the key" "$ERR" "fusion_threshold_mb"

# usage errors
run_hvd -np 1 --no-such-flag true
expect_eq "unknown flag exit" 2 "$RC"
expect_contains "unknown flag" "$ERR" "--no-such-flag"
run_hvd true
expect_eq "missing -np exit" 2 "$RC"
expect_contains "missing -np" "$ERR" "-np"
run_hvd -np 2
expect_eq "missing command exit" 2 "$RC"
run_hvd -np 0 true
expect_eq "-np 0 exit" 2 "$RC"
run_hvd -np 1 --fusion-threshold-mb -1 true
expect_eq "negative value exit" 2 "$RC"
expect_contains "negative value" "$ERR" "fusion-threshold-mb"
run_hvd -np 1 -H a:1 --hostfile /dev/null true
expect_eq "-H with --hostfile exit" 2 "$RC"
# options after the command belong to the command
run_hvd -np 1 echo --version -np 5
expect_eq "remainder" "[0]<stdout>:--version -np 5" "$OUT"
pass
