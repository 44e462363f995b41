# Shared helpers for the end-to-end tests: each test script sources this, runs the real
# horovodrun from the build tree on loopback, and fails with a message naming what differed.
set -euo pipefail
# set -e alone exits without a word: name the command and line that stopped the test (not
# inherited by functions and command substitutions, whose expected failures would be noise)
trap 'echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

: "${HVD_BUILD_DIR:?set by ctest}"
: "${HVD_SOURCE_DIR:?set by ctest}"
HVDRUN="$HVD_BUILD_DIR/horovodrun"
HELLO="$HVD_BUILD_DIR/examples/hello"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hvd-e2e.XXXXXX")
trap '[[ -n "${KEEP_TMP:-}" ]] || rm -rf "$TMP"' EXIT

# sanitized: the build under test is the ASan+UBSan one (its horovodrun carries the runtime)
sanitized() {
  grep -q '__asan_init' "$HVDRUN"
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
  [[ "$2" == "$3" ]] || fail "$1: expected [$2], got [$3]"
}

# expect_contains WHAT HAYSTACK NEEDLE
expect_contains() {
  [[ "$2" == *"$3"* ]] || fail "$1: [$3] not found in:
$2"
}

expect_not_contains() {
  [[ "$2" != *"$3"* ]] || fail "$1: [$3] must not appear in:
$2"
}

# run_hvd ARGS...: run horovodrun with a deadline; sets OUT, ERR, RC.
run_hvd() {
  set +e
  timeout -k 5 120 "$HVDRUN" "$@" >"$TMP/out" 2>"$TMP/err"
  RC=$?
  set -e
  OUT=$(cat "$TMP/out")
  ERR=$(cat "$TMP/err")
}

# wait_until DEADLINE_S CMD...: poll CMD every 50 ms until it succeeds or the deadline passes.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# Processes whose command line contains MARKER (excluding this shell's own pgrep).
procs_with() {
  pgrep -f -- "$1" || true
}

# rank_pid PATTERN RANK: the pid of the process whose command line matches PATTERN (pgrep -f)
# and whose environment says HOROVOD_RANK=RANK; nothing when there is none
rank_pid() {
  local p
  for p in $(procs_with "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "HOROVOD_RANK=$2" && echo "$p"
  done
  return 0
}

no_procs_with() {
  [[ -z "$(procs_with "$1")" ]]
}

pass() {
  echo "PASS: $(basename "$0")"
}
