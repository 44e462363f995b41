#!/usr/bin/env bash
# Every failing return under src/ sets its message (hvd__error_set, _wrap, _prefix) or says
# that it is set already (hvd__error_pass, common/error.h): a bare `return HVD_ERR_...;` would
# leave the caller's hvd_last_error() empty, or another failure's.
set -euo pipefail
root=${1:?usage: check_error_messages.sh SOURCE_DIR}
bare=$(grep -rnE --include='*.c' --include='*.h' 'return[[:space:]]+\(?HVD_ERR_[A-Z_]+\)?[[:space:]]*;' \
  "$root/src" || true)
if [[ -n $bare ]]; then
  echo "FAIL: failing returns without a message (set one, or hvd__error_pass if the failed call set it):"
  echo "$bare"
  exit 1
fi
echo "every failing return under src/ sets its message or passes one on"
