#!/usr/bin/env bash
# Compare the dynamic symbols libhvd exports with the HVD_API functions of the public headers:
# internal functions must stay hidden, and every declared function must exist.
set -euo pipefail
trap 'echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR # set -e would end silently
lib=$1 incdir=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sort)
declared=$(grep -hoE '^HVD_API [^(]*\b(hvd_[a-z0-9_]+)\(' "$incdir"/*.h |
           grep -oE 'hvd_[a-z0-9_]+\($' | tr -d '(' | sort)
if [[ "$exported" != "$declared" ]]; then
  echo "FAIL: exported symbols differ from the public headers"
  diff <(echo "$declared") <(echo "$exported") | sed 's/^</declared only:/; s/^>/exported only:/'
  exit 1
fi
echo "exports match: $(echo "$exported" | wc -l) functions"
