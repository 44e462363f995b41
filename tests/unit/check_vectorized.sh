#!/usr/bin/env bash
# The reduction kernels stay vectorised: compile src/collectives/reduce.c as the build does
# (-O3) with GCC's vectorisation report and require a vectorised loop for every
# DEFINE_REDUCE instantiation, all four op loops for float32 and float64 (the dtypes that
# carry gradients), and both bool loops. A change that defeats the vectoriser (an aliasing
# pointer, a call inside a loop) fails here instead of silently costing bandwidth.
set -euo pipefail
trap 'echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR # set -e would end silently
cc="$1"
src="$2/src/collectives/reduce.c"
report=$("$cc" -O3 -std=c11 -I"$2/include" -I"$2/src" -c "$src" -o /dev/null \
  -fopt-info-vec-optimized 2>&1 | grep "loop vectorized" || true)
count_at() { grep -c "reduce.c:$1:" <<<"$report" || true; }
bad=0
while IFS=: read -r line text; do
  name=$(sed -E 's/DEFINE_REDUCE\(([a-z0-9_]+),.*/\1/' <<<"$text")
  n=$(count_at "$line")
  want=1
  [[ $name == reduce_f32 || $name == reduce_f64 ]] && want=4
  if ((n < want)); then
    echo "not vectorised: $name (line $line): $n of $want loops"
    bad=1
  fi
done < <(grep -n '^DEFINE_REDUCE(' "$src")
bool_lines=$(awk '/^static void reduce_bool/,/^}/ { if ($0 ~ /for \(size_t i/) print NR }' "$src")
for line in $bool_lines; do
  if (($(count_at "$line") < 1)); then
    echo "not vectorised: reduce_bool loop at line $line"
    bad=1
  fi
done
[[ -n $bool_lines ]] || { echo "reduce_bool not found"; bad=1; }
exit $bad
