#!/usr/bin/env bash
# hvd's TensorFlow and Keras APIs side by side with TensorFlow's own strategy on this machine
# (a benchmark, not a test):
#
#   tools/compare_tensorflow.sh [BUILD_DIR] [REPEATS]
#
# 1. tools/tensorflow_synthetic_benchmark.py: Keras model.fit of the MLP 784-1024-1024-1024-10
#    on synthetic data at batch 8 and 64 per rank, np 2 and 4, total img/s, for
#      hvd      hvd.DistributedOptimizer under horovodrun,
#      mwms     tf.distribute.MultiWorkerMirroredStrategy (ring collectives over gRPC),
#      no-comm  every rank training alone under horovodrun (the floor: no exchange at all),
#    with tf-keras (Keras 2, TF_USE_LEGACY_KERAS=1): Keras 3's model.fit does not run under
#    MultiWorkerMirroredStrategy here (PerReplica inputs it cannot convert), so that is where
#    the two can be compared; hvd on Keras 3 is measured too.
# 2. The per-call cost of a 1-element hvd.allreduce, eagerly and inside a tf.function, np 2.
# Each point runs REPEATS times (default 3), the three interleaved; every figure is printed,
# then the medians. HVD_TF_PYTHON: the interpreter with TensorFlow (default the venv of
# scripts/install-deps.sh).
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
py=${HVD_TF_PYTHON:-/opt/hvd/venv-tf/bin/python}
bench="$here/tensorflow_synthetic_benchmark.py"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=3
results=$(mktemp)
trap 'rm -f "$results"' EXIT

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
measure() { # label, command...
  local label=$1 line
  shift
  line=$("$@" 2>/dev/null | grep -o "img/s: [0-9.]*" | tail -1 | cut -d' ' -f2 || true)
  echo "$label ${line:-failed}" | tee -a "$results"
}
for ((r = 1; r <= repeats; r++)); do
  for np in 2 4; do
    for batch in 8 64; do
      args=(--batch-size "$batch")
      measure "keras2 hvd np$np b$batch" env TF_USE_LEGACY_KERAS=1 "$build/horovodrun" -np "$np" "$py" "$bench" --hvd "${args[@]}"
      measure "keras2 mwms np$np b$batch" env TF_USE_LEGACY_KERAS=1 "$py" "$bench" --mwms --np "$np" "${args[@]}"
      measure "keras2 no-comm np$np b$batch" env TF_USE_LEGACY_KERAS=1 "$build/horovodrun" -np "$np" "$py" "$bench" --no-comm "${args[@]}"
      measure "keras3 hvd np$np b$batch" "$build/horovodrun" -np "$np" "$py" "$bench" --hvd "${args[@]}"
    done
  done
  "$build/horovodrun" -np 2 "$py" "$bench" --allreduce-cost 2>/dev/null | grep -o "1-element.*" | tee -a "$results.cost" || true
done
echo
echo "medians (img/s, the whole job):"
"$py" - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    *label, value = line.split()
    if value != "failed":
        rows.setdefault(" ".join(label), []).append(float(value))
for label, vals in rows.items():
    print(f"  {label:28s} {statistics.median(vals):8.1f}  [{min(vals):.1f}-{max(vals):.1f}]")
PY
cat "$results.cost" 2>/dev/null && rm -f "$results.cost"
