#!/usr/bin/env bash
# Every C source and header is formatted as .clang-format says.
set -euo pipefail
trap 'echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR # set -e would end silently
cd "$1"
bad=0
while IFS= read -r f; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run clang-format -i $f)"
    bad=1
  fi
done < <(find include src tests tools examples python -name '*.c' -o -name '*.h')
exit $bad
